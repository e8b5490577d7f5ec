// The batching rule of every primitive named in prims.def. Batched operands carry the batch on
// axis 0; unbatched ones are broadcast where a primitive needs every operand batched.
#include "core/grid_mapping.h"
#include "palladium/numpy.h"
#include "program/families.h"
#include "program/pallas_call_prim.h"
#include "program/trace.h"
#include "transforms/transforms.h"

namespace palladium::program {

namespace {

using Arrays = std::vector<Array>;

Array with_batch(const Array& x, bool b, int64_t size) {
  if (b) return x;
  Shape one{1}, full{size};
  one.insert(one.end(), x.shape().begin(), x.shape().end());
  full.insert(full.end(), x.shape().begin(), x.shape().end());
  return jnp::broadcast_to(jnp::reshape(x, one), full);
}

Arrays all_batched(const Arrays& in, const std::vector<bool>& b, int64_t size) {
  Arrays r;
  for (size_t i = 0; i < in.size(); ++i) r.push_back(with_batch(in[i], b[i], size));
  return r;
}

Arrays one_batched(Array x, std::vector<bool>& ob) {
  ob.assign(1, true);
  return {std::move(x)};
}

Arrays batch_elementwise(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t, std::vector<bool>& ob) {
  // Per example the result has rank r; a batched operand of lower rank gets size-1 axes after the
  // batch so that right-aligned broadcasting still lines its dimensions up.
  size_t r = 0;
  for (size_t i = 0; i < in.size(); ++i) r = std::max(r, in[i].shape().size() - (b[i] ? 1 : 0));
  Arrays a;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!b[i] || in[i].shape().size() - 1 == r) {
      a.push_back(in[i]);
      continue;
    }
    Shape s{in[i].shape()[0]};
    s.insert(s.end(), r - (in[i].shape().size() - 1), 1);
    s.insert(s.end(), in[i].shape().begin() + 1, in[i].shape().end());
    a.push_back(jnp::reshape(in[i], s));
  }
  return one_batched(bind1(e.prim, e.params, a), ob);
}

Arrays batch_broadcast(const Eqn& e, const Arrays& in, const std::vector<bool>&, int64_t size, std::vector<bool>& ob) {
  const Shape& target = e.params.shape;
  Shape s{size};
  s.insert(s.end(), target.size() - (in[0].shape().size() - 1), 1);
  s.insert(s.end(), in[0].shape().begin() + 1, in[0].shape().end());
  Shape t{size};
  t.insert(t.end(), target.begin(), target.end());
  return one_batched(jnp::broadcast_to(jnp::reshape(in[0], s), t), ob);
}

Arrays batch_none(const Eqn& e, const Arrays&, const std::vector<bool>&, int64_t, std::vector<bool>&) {
  throw InternalError(std::string("batch rule of ") + prim_name(e.prim) + " called for an equation without operands");
}

Arrays batch_reduce(const Eqn& e, const Arrays& in, const std::vector<bool>&, int64_t, std::vector<bool>& ob) {
  Params q = e.params;
  for (int64_t& a : q.axes) a += 1;
  return one_batched(bind1(e.prim, q, in), ob);
}
Arrays batch_argreduce(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t s, std::vector<bool>& ob) {
  return batch_reduce(e, in, b, s, ob);
}

Arrays batch_matmul(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t size, std::vector<bool>& ob) {
  return one_batched(bind1(e.prim, e.params, all_batched(in, b, size)), ob);
}

Arrays batch_reshape(const Eqn& e, const Arrays& in, const std::vector<bool>&, int64_t size, std::vector<bool>& ob) {
  Shape s{size};
  s.insert(s.end(), e.params.shape.begin(), e.params.shape.end());
  return one_batched(jnp::reshape(in[0], s), ob);
}

Arrays batch_transpose(const Eqn& e, const Arrays& in, const std::vector<bool>&, int64_t, std::vector<bool>& ob) {
  std::vector<int64_t> perm{0};
  for (int64_t a : e.params.axes) perm.push_back(a + 1);
  return one_batched(jnp::transpose(in[0], perm), ob);
}

Arrays batch_concatenate(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t size, std::vector<bool>& ob) {
  return one_batched(jnp::concatenate(all_batched(in, b, size), e.params.axis + 1), ob);
}

Arrays batch_slice(const Eqn& e, const Arrays& in, const std::vector<bool>&, int64_t size, std::vector<bool>& ob) {
  std::vector<int64_t> lo{0}, hi{size}, st{1};
  lo.insert(lo.end(), e.params.lo.begin(), e.params.lo.end());
  hi.insert(hi.end(), e.params.hi.begin(), e.params.hi.end());
  st.insert(st.end(), e.params.step.begin(), e.params.step.end());
  return one_batched(lax::slice(in[0], lo, hi, st), ob);
}

Arrays batch_pad(const Eqn& e, const Arrays& in, const std::vector<bool>&, int64_t, std::vector<bool>& ob) {
  std::vector<std::pair<int64_t, int64_t>> w{{0, 0}};
  for (size_t d = 0; d < e.params.lo.size(); ++d) w.emplace_back(e.params.lo[d], e.params.hi[d]);
  return one_batched(jnp::pad(in[0], w, e.params.scalar), ob);
}

bool indices_batched(const std::vector<bool>& b, size_t first) {
  for (size_t i = first; i < b.size(); ++i)
    if (b[i]) return true;
  return false;
}

// Batched start indices: each example has its own window, so the equation runs once per example
// in a scan over the batch (the equation itself is unchanged, on one example's operands).
Arrays per_example(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t size, std::vector<bool>& ob) {
  detail::FlatFn one = [&e](const Arrays& ex) { return bind(e.prim, e.params, ex); };
  Arrays r = detail::scan_flat(one, 0, {}, all_batched(in, b, size), size, false);
  ob.assign(r.size(), true);
  return r;
}

Arrays batch_dynamic_slice(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t size, std::vector<bool>& ob) {
  if (indices_batched(b, 1)) return per_example(e, in, b, size, ob);
  Arrays starts{lax::full({}, 0.0, DType::int32)};
  starts.insert(starts.end(), in.begin() + 1, in.end());
  Shape sizes{size};
  sizes.insert(sizes.end(), e.params.shape.begin(), e.params.shape.end());
  return one_batched(lax::dynamic_slice(in[0], starts, sizes), ob);
}

Arrays batch_dynamic_update_slice(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t size,
                                  std::vector<bool>& ob) {
  if (indices_batched(b, 2)) return per_example(e, in, b, size, ob);
  Arrays starts{lax::full({}, 0.0, DType::int32)};
  starts.insert(starts.end(), in.begin() + 2, in.end());
  return one_batched(lax::dynamic_update_slice(with_batch(in[0], b[0], size), with_batch(in[1], b[1], size), starts), ob);
}

Arrays batch_pallas_call(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t, std::vector<bool>& ob) {
  // Pallas's rule: a new leading grid axis over the batch (detail::make_vmap), None inputs unbatched.
  auto call = std::const_pointer_cast<detail::CallImpl>(std::static_pointer_cast<const detail::CallImpl>(e.params.callee));
  Arrays full = with_none_inputs(e.params, in);
  std::vector<std::optional<int64_t>> axes;
  for (size_t i = 0, k = 0; i < full.size(); ++i) {
    if (!full[i].defined()) { axes.push_back(std::nullopt); continue; }
    axes.push_back(b[k++] ? std::optional<int64_t>(0) : std::nullopt);
  }
  Arrays outs = detail::call_or_bind(detail::make_vmap(call, axes), full);
  ob.assign(outs.size(), true);
  return outs;
}

Arrays batch_custom_vjp(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t size, std::vector<bool>& ob) {
  // The batched function's primal, fwd and bwd are the vmaps of the originals (every operand,
  // residual and cotangent batched on axis 0).
  const auto cv = std::static_pointer_cast<const CustomVjp>(e.params.callee);
  const size_t n_args = static_cast<size_t>(e.params.count);
  for (size_t i = n_args; i < in.size(); ++i)
    PL_CHECK(!b[i], "custom_vjp '", cv->name, "': vmap over a value the function closes over is not supported yet; pass it as an argument");
  Arrays args = all_batched(Arrays(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n_args)), b, size);
  auto region = e.params.regions[0];
  Arrays captured(in.begin() + static_cast<std::ptrdiff_t>(n_args), in.end());
  auto zeros = [](size_t n) { return std::vector<int64_t>(n, 0); };
  detail::FlatFn primal = [region, captured, zeros](const Arrays& xs) {
    Arrays all = xs;
    std::vector<int64_t> axes = zeros(xs.size());
    for (const Array& c : captured) {
      all.push_back(c);
      axes.push_back(-1);
    }
    return detail::vmap_flat([region](const Arrays& a) { return eval_program(*region, a); }, all, axes);
  };
  detail::FlatFn fwd = [cv, zeros](const Arrays& xs) { return detail::vmap_flat(cv->fwd, xs, zeros(xs.size())); };
  auto bwd = [cv, zeros](const Arrays& res, const Arrays& cts) {
    const size_t nr = res.size();
    Arrays all = res;
    all.insert(all.end(), cts.begin(), cts.end());
    return detail::vmap_flat([cv, nr](const Arrays& a) {
      return cv->bwd(Arrays(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(nr)),
                     Arrays(a.begin() + static_cast<std::ptrdiff_t>(nr), a.end()));
    }, all, zeros(all.size()));
  };
  Arrays outs = detail::custom_vjp_call(cv->name, primal, fwd, bwd, args);
  ob.assign(outs.size(), true);
  return outs;
}

Arrays batch_scan(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t size, std::vector<bool>& ob) {
  // Everything batched; xs scanned along their axis 1 (axis 0 is the batch), so they are swapped.
  const Params& q = e.params;
  const size_t nc = static_cast<size_t>(q.count2), nk = static_cast<size_t>(q.count);
  Arrays all = all_batched(in, b, size);
  Arrays consts(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(nc));
  Arrays init(all.begin() + static_cast<std::ptrdiff_t>(nc), all.begin() + static_cast<std::ptrdiff_t>(nc + nk));
  Arrays xs;
  auto swap01 = [](const Array& x) {
    std::vector<int64_t> perm{1, 0};
    for (int64_t d = 2; d < x.ndim(); ++d) perm.push_back(d);
    return jnp::transpose(x, perm);
  };
  for (size_t i = nc + nk; i < all.size(); ++i) xs.push_back(swap01(all[i]));
  auto region = q.regions[0];
  detail::FlatFn body = [region, consts](const Arrays& cx) {
    Arrays a = consts;
    a.insert(a.end(), cx.begin(), cx.end());
    return vmap_program(*region, a, std::vector<bool>(a.size(), true), a.empty() ? 0 : a[0].shape()[0]);
  };
  Arrays r = detail::scan_flat(body, nk, init, xs, q.axis, q.flag);
  for (size_t i = nk; i < r.size(); ++i) r[i] = swap01(r[i]);
  ob.assign(r.size(), true);
  return r;
}

Arrays batch_unsupported(const Eqn& e, const Arrays&, const std::vector<bool>&, int64_t, std::vector<bool>&) {
  throw Error(std::string(prim_name(e.prim)) + ": no batching rule (transformation: vmap): vmap inside a sharded "
              "or shard_map program is not supported; vmap the function before partitioning it");
}
// A batched while_loop runs while any example's condition holds; an example whose condition is
// false keeps its carry (JAX's rule). ins: cond consts (count), body consts (count2), carries.
Arrays batch_while(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t size, std::vector<bool>& ob) {
  const size_t nc = static_cast<size_t>(e.params.count), nb = static_cast<size_t>(e.params.count2);
  const Arrays all = all_batched(in, b, size);
  const Arrays cconsts(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(nc));
  const Arrays bconsts(all.begin() + static_cast<std::ptrdiff_t>(nc), all.begin() + static_cast<std::ptrdiff_t>(nc + nb));
  const Arrays init(all.begin() + static_cast<std::ptrdiff_t>(nc + nb), all.end());
  auto cond_region = e.params.regions.at(0), body_region = e.params.regions.at(1);
  auto lanes = [cond_region, cconsts, size](const Arrays& carry) {  // each example's condition, [size] bool
    Arrays a = cconsts;
    a.insert(a.end(), carry.begin(), carry.end());
    return vmap_program(*cond_region, a, std::vector<bool>(a.size(), true), size).at(0);
  };
  detail::FlatFn cond = [lanes](const Arrays& carry) {
    return Arrays{jnp::max(jnp::astype(lanes(carry), DType::int32)) > 0};
  };
  detail::FlatFn body = [lanes, body_region, bconsts, size](const Arrays& carry) {
    const Array running = lanes(carry);
    Arrays a = bconsts;
    a.insert(a.end(), carry.begin(), carry.end());
    Arrays next = vmap_program(*body_region, a, std::vector<bool>(a.size(), true), size);
    for (size_t i = 0; i < next.size(); ++i) {
      Shape s{size};
      s.insert(s.end(), static_cast<size_t>(next[i].ndim() - 1), 1);
      next[i] = jnp::where(jnp::reshape(running, s), next[i], carry[i]);
    }
    return next;
  };
  Arrays r = detail::while_flat(cond, body, init);
  ob.assign(r.size(), true);
  return r;
}

Arrays batch_cond(const Eqn& e, const Arrays& in, const std::vector<bool>& b, int64_t size, std::vector<bool>& ob) {
  // Both branches run batched and the predicate selects per example.
  const size_t nt = static_cast<size_t>(e.params.count);
  Arrays t(in.begin() + 1, in.begin() + 1 + static_cast<std::ptrdiff_t>(nt));
  Arrays f(in.begin() + 1 + static_cast<std::ptrdiff_t>(nt), in.end());
  std::vector<bool> bt(b.begin() + 1, b.begin() + 1 + static_cast<std::ptrdiff_t>(nt));
  std::vector<bool> bf(b.begin() + 1 + static_cast<std::ptrdiff_t>(nt), b.end());
  Arrays rt = vmap_program(*e.params.regions[0], t, bt, size);
  Arrays rf = vmap_program(*e.params.regions[1], f, bf, size);
  Array pred = with_batch(in[0], b[0], size);
  Arrays r;
  for (size_t i = 0; i < rt.size(); ++i) {
    Shape s{size};
    s.insert(s.end(), static_cast<size_t>(rt[i].ndim() - 1), 1);
    r.push_back(jnp::where(jnp::reshape(pred, s), rt[i], rf[i]));
  }
  ob.assign(r.size(), true);
  return r;
}

const BatchRule kRules[] = {
#define PL_PRIM(name, family, vjp, batch, shard) &batch,
#include "program/prims.def"
#undef PL_PRIM
};

}  // namespace

BatchRule batch_rule(Prim p) { return kRules[static_cast<size_t>(p)]; }

}  // namespace palladium::program
