// The VJP rule of every primitive named in prims.def, written with the Array ops themselves (so a
// gradient program is differentiable again). Operands that broadcast get their cotangent summed
// back to their shape. custom_vjp and scan are handled by vjp_program (they need residuals).
#include <cmath>

#include "palladium/numpy.h"
#include "program/families.h"
#include "program/trace.h"
#include "transforms/transforms.h"

namespace palladium::program {

namespace {

using Arrays = std::vector<Array>;

// Sums g over the dimensions that broadcasting added to reach it from `shape`.
Array unbroadcast(const Array& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const size_t extra = g.shape().size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t d = 0; d < g.shape().size(); ++d)
    if (d < extra || (shape[d - extra] == 1 && g.shape()[d] != 1)) axes.push_back(static_cast<int64_t>(d));
  return jnp::reshape(axes.empty() ? g : jnp::sum(g, axes), shape);
}

Array ct0(const Arrays& cts, const Arrays& outs) { return cts[0].defined() ? cts[0] : jnp::zeros_like(outs[0]); }

#define PL_UNARY_VJP(name, expr)                                                            \
  Arrays name(const Eqn&, const Arrays& in, const Arrays& out, const Arrays& cts) {          \
    const Array& x = in[0];                                                                  \
    const Array& y = out[0];                                                                 \
    const Array g = ct0(cts, out);                                                           \
    (void)x;                                                                                 \
    (void)y;                                                                                 \
    return {expr};                                                                           \
  }
PL_UNARY_VJP(vjp_neg, -g)
PL_UNARY_VJP(vjp_abs, jnp::where(x >= 0, g, -g))
PL_UNARY_VJP(vjp_exp, g * y)
PL_UNARY_VJP(vjp_exp2, g * y * std::log(2.0))
PL_UNARY_VJP(vjp_log, g / x)
PL_UNARY_VJP(vjp_log2, g / (x * std::log(2.0)))
PL_UNARY_VJP(vjp_log1p, g / (x + 1.0))
PL_UNARY_VJP(vjp_sqrt, g * 0.5 / y)
PL_UNARY_VJP(vjp_rsqrt, g * -0.5 * y / x)
PL_UNARY_VJP(vjp_sin, g * jnp::cos(x))
PL_UNARY_VJP(vjp_cos, -g * jnp::sin(x))
PL_UNARY_VJP(vjp_tanh, g * (1.0 - y * y))
PL_UNARY_VJP(vjp_logistic, g * y * (1.0 - y))
PL_UNARY_VJP(vjp_erf, g * (2.0 / std::sqrt(M_PI)) * jnp::exp(-(x * x)))
#undef PL_UNARY_VJP

// Piecewise-constant and integer-valued primitives: no cotangent flows.
Arrays vjp_zero(const Eqn&, const Arrays& in, const Arrays&, const Arrays&) { return Arrays(in.size()); }

#define PL_BINARY_VJP(name, ga, gb)                                                         \
  Arrays name(const Eqn&, const Arrays& in, const Arrays& out, const Arrays& cts) {          \
    const Array& a = in[0];                                                                  \
    const Array& b = in[1];                                                                  \
    const Array& y = out[0];                                                                 \
    const Array g = ct0(cts, out);                                                           \
    (void)a;                                                                                 \
    (void)b;                                                                                 \
    (void)y;                                                                                 \
    return {unbroadcast(ga, a.shape()), unbroadcast(gb, b.shape())};                         \
  }
PL_BINARY_VJP(vjp_add, g, g)
PL_BINARY_VJP(vjp_sub, g, -g)
PL_BINARY_VJP(vjp_mul, g * b, g * a)
PL_BINARY_VJP(vjp_div, g / b, -g * y / b)
// rem(a, b) = a - b * trunc(a / b)
PL_BINARY_VJP(vjp_rem, g, -g * jnp::where(a / b >= 0, jnp::floor(a / b), jnp::ceil(a / b)))
PL_BINARY_VJP(vjp_pow, g * b * jnp::power(a, b - 1.0), g * jnp::where(a > 0, y * jnp::log(jnp::where(a > 0, a, 1.0)), 0.0))
// Ties split the cotangent evenly, as JAX does.
PL_BINARY_VJP(vjp_max, g * ((a > b).astype(g.dtype()) + (a == b).astype(g.dtype()) * 0.5),
              g * ((b > a).astype(g.dtype()) + (a == b).astype(g.dtype()) * 0.5))
PL_BINARY_VJP(vjp_min, g * ((a < b).astype(g.dtype()) + (a == b).astype(g.dtype()) * 0.5),
              g * ((b < a).astype(g.dtype()) + (a == b).astype(g.dtype()) * 0.5))
#undef PL_BINARY_VJP

Arrays vjp_select(const Eqn&, const Arrays& in, const Arrays& out, const Arrays& cts) {
  const Array g = ct0(cts, out);
  const Array zero = jnp::zeros_like(g);
  return {Array(), unbroadcast(jnp::where(in[0], g, zero), in[1].shape()),
          unbroadcast(jnp::where(in[0], zero, g), in[2].shape())};
}

Arrays vjp_convert(const Eqn&, const Arrays& in, const Arrays& out, const Arrays& cts) {
  if (!is_float(in[0].dtype())) return {Array()};
  return {ct0(cts, out).astype(in[0].dtype())};
}

Arrays vjp_broadcast(const Eqn&, const Arrays& in, const Arrays& out, const Arrays& cts) {
  return {unbroadcast(ct0(cts, out), in[0].shape())};
}

// The reduced result, reshaped with size-1 reduced axes and broadcast back to the operand.
Array expand_reduced(const Array& r, const Eqn& e, const Shape& shape) {
  Shape kept = shape;
  for (int64_t a : e.params.axes) kept[static_cast<size_t>(a)] = 1;
  return jnp::broadcast_to(jnp::reshape(r, kept), shape);
}

Arrays vjp_reduce_sum(const Eqn& e, const Arrays& in, const Arrays& out, const Arrays& cts) {
  return {expand_reduced(ct0(cts, out), e, in[0].shape())};
}

Arrays vjp_reduce_extremum(const Eqn& e, const Arrays& in, const Arrays& out, const Arrays& cts) {
  const Array hit = (in[0] == expand_reduced(out[0], e, in[0].shape())).astype(in[0].dtype());
  const Array count = expand_reduced(jnp::sum(hit, e.params.axes), e, in[0].shape());
  return {expand_reduced(ct0(cts, out), e, in[0].shape()) * hit / count};
}

Array swap_last(const Array& x) {
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.ndim(); ++d) perm.push_back(d);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return jnp::transpose(x, perm);
}

Arrays vjp_matmul(const Eqn&, const Arrays& in, const Arrays& out, const Arrays& cts) {
  const Array g = ct0(cts, out);
  return {jnp::matmul(g, swap_last(in[1])), jnp::matmul(swap_last(in[0]), g)};
}

Arrays vjp_reshape(const Eqn&, const Arrays& in, const Arrays& out, const Arrays& cts) {
  return {jnp::reshape(ct0(cts, out), in[0].shape())};
}

Arrays vjp_transpose(const Eqn& e, const Arrays&, const Arrays& out, const Arrays& cts) {
  std::vector<int64_t> inverse(e.params.axes.size());
  for (size_t k = 0; k < inverse.size(); ++k) inverse[static_cast<size_t>(e.params.axes[k])] = static_cast<int64_t>(k);
  return {jnp::transpose(ct0(cts, out), inverse)};
}

Arrays vjp_concatenate(const Eqn& e, const Arrays& in, const Arrays& out, const Arrays& cts) {
  const Array g = ct0(cts, out);
  Arrays r;
  int64_t off = 0;
  const size_t ax = static_cast<size_t>(e.params.axis);
  for (const Array& x : in) {
    std::vector<int64_t> lo(static_cast<size_t>(x.ndim()), 0), hi(g.shape().begin(), g.shape().end());
    lo[ax] = off;
    hi[ax] = off + x.shape()[ax];
    off = hi[ax];
    r.push_back(lax::slice(g, lo, hi));
  }
  return r;
}

// The cotangent goes back to the positions the slice read: along a strided dimension each value is
// followed by stride - 1 zeros (a pad of a new axis, then a reshape), then the whole is placed at
// the slice's start by a pad (ops that are themselves differentiable).
Arrays vjp_slice(const Eqn& e, const Arrays& in, const Arrays& out, const Arrays& cts) {
  Array g = ct0(cts, out);
  const size_t rank = e.params.lo.size();
  for (size_t d = 0; d < rank; ++d) {
    const int64_t lo = e.params.lo[d], step = e.params.step.empty() ? 1 : e.params.step[d];
    const int64_t size = in[0].shape()[d], n = g.shape()[d];
    int64_t len = n;
    if (step > 1) {
      std::vector<std::pair<int64_t, int64_t>> spread(rank + 1, {0, 0});
      spread[d + 1] = {0, step - 1};
      Array wide = jnp::pad(jnp::expand_dims(g, static_cast<int64_t>(d + 1)), spread, 0.0);
      Shape merged = g.shape();
      merged[d] = n * step;
      len = std::min(n * step, size - lo);
      std::vector<int64_t> start(rank, 0), limit = merged;
      limit[d] = len;
      g = lax::slice(jnp::reshape(wide, merged), start, limit);
    }
    std::vector<std::pair<int64_t, int64_t>> place(rank, {0, 0});
    place[d] = {lo, size - lo - len};
    g = jnp::pad(g, place, 0.0);
  }
  return {g};
}

Arrays vjp_pad(const Eqn& e, const Arrays& in, const Arrays& out, const Arrays& cts) {
  std::vector<int64_t> lo = e.params.lo, hi;
  for (size_t d = 0; d < lo.size(); ++d) hi.push_back(lo[d] + in[0].shape()[d]);
  return {lax::slice(ct0(cts, out), lo, hi)};
}

Arrays vjp_dynamic_slice(const Eqn&, const Arrays& in, const Arrays& out, const Arrays& cts) {
  Arrays starts(in.begin() + 1, in.end());
  Arrays r{lax::dynamic_update_slice(jnp::zeros_like(in[0]), ct0(cts, out), starts)};
  r.resize(in.size());
  return r;
}

Arrays vjp_dynamic_update_slice(const Eqn&, const Arrays& in, const Arrays& out, const Arrays& cts) {
  const Array g = ct0(cts, out);
  Arrays starts(in.begin() + 2, in.end());
  Arrays r{lax::dynamic_update_slice(g, jnp::zeros_like(in[1]), starts), lax::dynamic_slice(g, starts, in[1].shape())};
  r.resize(in.size());
  return r;
}

Arrays vjp_pallas_call(const Eqn& e, const Arrays&, const Arrays&, const Arrays&) {
  throw Error("grad of pallas_call '" + e.params.name +
              "': a kernel has no derivative rule of its own; wrap it in pl::custom_vjp with a backward kernel, as "
              "ops::mha does with the seed's backward kernels (transformation: vjp)");
}

[[noreturn]] Arrays missing(const Eqn& e, const char* why) {
  throw Error(std::string(prim_name(e.prim)) + ": no VJP rule (transformation: vjp): " + why);
}
Arrays vjp_custom_vjp(const Eqn& e, const Arrays&, const Arrays&, const Arrays&) { missing(e, "handled by vjp_program"); }
Arrays vjp_scan(const Eqn& e, const Arrays&, const Arrays&, const Arrays&) { missing(e, "handled by vjp_program"); }
Arrays vjp_while(const Eqn& e, const Arrays&, const Arrays&, const Arrays&) {
  missing(e, "reverse mode needs a trip count known before the loop runs; use fori_loop or scan");
}
// A cond of the branches' VJPs: the taken branch gives the cotangents of its operands, the other
// zeros (ins: pred, the true branch's operands (count), the false branch's).
Arrays vjp_cond(const Eqn& e, const Arrays& ins, const Arrays& outs, const Arrays& cts) {
  const size_t n_true = static_cast<size_t>(e.params.count), n_false = ins.size() - 1 - n_true;
  const Program& on_true = *e.params.regions.at(0);
  const Program& on_false = *e.params.regions.at(1);
  auto float_inputs = [](const Program& p) {
    std::vector<bool> w;
    for (int v : p.inputs) w.push_back(is_float(p.type(v).dtype));
    return w;
  };
  const std::vector<bool> wt = float_inputs(on_true), wf = float_inputs(on_false);
  const Device device = device_of(ins);
  const Program bt = optimize(vjp_program(on_true, wt, device));
  const Program bf = optimize(vjp_program(on_false, wf, device));
  Arrays operands(ins.begin() + 1, ins.end());
  for (size_t i = 0; i < cts.size(); ++i) operands.push_back(cts[i].defined() ? cts[i] : jnp::zeros_like(outs[i]));
  auto branch = [&](bool taken_true) -> detail::FlatFn {
    return [&, taken_true](const Arrays& a) {
      const Arrays t(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n_true));
      const Arrays f(a.begin() + static_cast<std::ptrdiff_t>(n_true),
                     a.begin() + static_cast<std::ptrdiff_t>(n_true + n_false));
      Arrays args = taken_true ? t : f;
      args.insert(args.end(), a.begin() + static_cast<std::ptrdiff_t>(n_true + n_false), a.end());
      const Arrays r = eval_program(taken_true ? bt : bf, args);
      size_t slot = (taken_true ? on_true : on_false).outputs.size();
      Arrays grads;
      for (size_t i = 0; i < n_true; ++i)
        if (wt[i]) grads.push_back(taken_true ? r[slot++] : jnp::zeros_like(t[i]));
      for (size_t i = 0; i < n_false; ++i)
        if (wf[i]) grads.push_back(taken_true ? jnp::zeros_like(f[i]) : r[slot++]);
      return grads;
    };
  };
  const Arrays g = detail::cond_flat(ins[0], branch(true), branch(false), operands);
  Arrays in_cts(ins.size());
  size_t k = 0;
  for (size_t i = 0; i < n_true; ++i)
    if (wt[i]) in_cts[1 + i] = g[k++];
  for (size_t i = 0; i < n_false; ++i)
    if (wf[i]) in_cts[1 + n_true + i] = g[k++];
  return in_cts;
}

// ---- partitioning: a constraint is an identity; each collective's transpose is its dual ----
// As the seed's deflinear2: the cotangent is constrained the same way.
Arrays vjp_sharding_constraint(const Eqn& e, const Arrays&, const Arrays&, const Arrays& cts) {
  return cts[0].defined() ? Arrays{bind1(Prim::sharding_constraint, e.params, {cts[0]})} : Arrays(1);
}
Arrays rebind_on_ct(const Eqn&, Prim prim, Params q, const Arrays& cts) {
  if (!cts[0].defined()) return Arrays(1);
  return {bind1(prim, std::move(q), {cts[0]})};
}
Arrays vjp_all_gather(const Eqn& e, const Arrays&, const Arrays&, const Arrays& cts) {
  Params q = e.params;
  q.name = "sum";  // every device's contribution to each piece, summed
  return rebind_on_ct(e, Prim::reduce_scatter, q, cts);
}
Arrays vjp_reduce_scatter(const Eqn& e, const Arrays&, const Arrays&, const Arrays& cts) {
  Params q = e.params;
  q.name.clear();
  return rebind_on_ct(e, Prim::all_gather, q, cts);
}
Arrays vjp_all_reduce(const Eqn& e, const Arrays&, const Arrays&, const Arrays& cts) {
  if (e.params.name != "sum") missing(e, "only a sum (psum) is linear");
  return rebind_on_ct(e, Prim::all_reduce, e.params, cts);
}
Arrays vjp_all_to_all(const Eqn& e, const Arrays&, const Arrays&, const Arrays& cts) {
  Params q = e.params;
  std::swap(q.axis, q.count);
  return rebind_on_ct(e, Prim::all_to_all, q, cts);
}
Arrays vjp_ppermute(const Eqn& e, const Arrays&, const Arrays&, const Arrays& cts) {
  Params q = e.params;
  std::swap(q.lo, q.hi);
  return rebind_on_ct(e, Prim::ppermute, q, cts);
}
Arrays vjp_shard_slice(const Eqn& e, const Arrays&, const Arrays&, const Arrays&) {
  missing(e, "the partitioner's slices are made after differentiation; take grad inside sharded_jit");
}

const VjpRule kRules[] = {
#define PL_PRIM(name, family, vjp, batch, shard) &vjp,
#include "program/prims.def"
#undef PL_PRIM
};

}  // namespace

VjpRule vjp_rule(Prim p) { return kRules[static_cast<size_t>(p)]; }

}  // namespace palladium::program
