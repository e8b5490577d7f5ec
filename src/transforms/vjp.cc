// Reverse mode as a program rewrite: the forward equations are re-bound into a new trace (custom_vjp
// calls its fwd, scan also stacks its carries), then the rules of prims.def run in reverse order,
// accumulating cotangents. grad, value_and_grad, vjp and jvp are built on it.
#include "palladium/numpy.h"
#include "program/executor.h"
#include "program/families.h"
#include "program/trace.h"
#include "transforms/transforms.h"

namespace palladium::program {

namespace {

bool differentiable(const Type& t) { return is_float(t.dtype); }

Array accumulate(const Array& acc, const Array& g) { return acc.defined() ? acc + g : g; }

std::vector<Array> slice_of(const std::vector<Array>& v, size_t from, size_t n) {
  return std::vector<Array>(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(from + n));
}

// The VJP of one scan equation: forward again with the carry history as extra ys, then a reverse
// scan of the body's VJP over (x, carry history, y cotangents).
struct ScanVjp {
  std::vector<Array> outs;
  std::vector<Array> carry_hist;
};

ScanVjp scan_forward(const Eqn& e, const std::vector<Array>& ins) {
  const Params& q = e.params;
  const size_t nc = static_cast<size_t>(q.count2), nk = static_cast<size_t>(q.count);
  auto body = q.regions[0];
  std::vector<Array> consts = slice_of(ins, 0, nc);
  detail::FlatFn aug = [body, consts, nk](const std::vector<Array>& in) {
    std::vector<Array> all = consts;
    all.insert(all.end(), in.begin(), in.end());
    std::vector<Array> o = eval_program(*body, all);
    o.insert(o.end(), in.begin(), in.begin() + static_cast<std::ptrdiff_t>(nk));  // carry in, stacked
    return o;
  };
  std::vector<Array> r = detail::scan_flat(aug, nk, slice_of(ins, nc, nk), slice_of(ins, nc + nk, ins.size() - nc - nk),
                                           q.axis, q.flag);
  ScanVjp s;
  s.outs = slice_of(r, 0, e.outs.size());
  s.carry_hist = slice_of(r, e.outs.size(), nk);
  return s;
}

std::vector<Array> scan_backward(const Eqn& e, const std::vector<Array>& ins, const ScanVjp& fwd,
                                 const std::vector<Array>& cts, Device device) {
  const Params& q = e.params;
  const Program& body = *q.regions[0];
  const size_t nc = static_cast<size_t>(q.count2), nk = static_cast<size_t>(q.count);
  const size_t nx = ins.size() - nc - nk, ny = e.outs.size() - nk;
  // The body's VJP with respect to everything float: consts, carries, xs.
  std::vector<bool> wrt;
  for (int v : body.inputs) wrt.push_back(differentiable(body.type(v)));
  auto bwd = std::make_shared<Program>(optimize(vjp_program(body, wrt, device)));
  std::vector<Array> consts = slice_of(ins, 0, nc);
  auto zero_or = [](const Array& ct, const Array& like) { return ct.defined() ? ct : jnp::zeros_like(like); };
  // Carry: (carry cotangent, const cotangents); xs: (x, carry history, y cotangents).
  std::vector<Array> init;
  for (size_t i = 0; i < nk; ++i) init.push_back(zero_or(cts[i], ins[nc + i]));
  for (size_t i = 0; i < nc; ++i) init.push_back(jnp::zeros_like(consts[i]));
  std::vector<Array> xs = slice_of(ins, nc + nk, nx);
  xs.insert(xs.end(), fwd.carry_hist.begin(), fwd.carry_hist.end());
  for (size_t j = 0; j < ny; ++j) xs.push_back(zero_or(cts[nk + j], fwd.outs[nk + j]));
  detail::FlatFn step = [bwd, consts, nc, nk, nx, ny, &body, wrt](const std::vector<Array>& in) {
    std::vector<Array> ct_carry = slice_of(in, 0, nk), ct_consts = slice_of(in, nk, nc);
    std::vector<Array> x = slice_of(in, nk + nc, nx), carry_in = slice_of(in, nk + nc + nx, nk);
    std::vector<Array> ct_y = slice_of(in, nk + nc + nx + nk, ny);
    std::vector<Array> args = consts;
    args.insert(args.end(), carry_in.begin(), carry_in.end());
    args.insert(args.end(), x.begin(), x.end());
    args.insert(args.end(), ct_carry.begin(), ct_carry.end());
    args.insert(args.end(), ct_y.begin(), ct_y.end());
    std::vector<Array> r = eval_program(*bwd, args);
    const size_t n_out = body.outputs.size();
    // Gradients come only for the float inputs, in order.
    auto g = [&](size_t i, const Array& like) {
      if (!wrt[i]) return jnp::zeros_like(like);
      size_t slot = n_out;
      for (size_t j = 0; j < i; ++j) slot += wrt[j] ? 1 : 0;
      return r[slot];
    };
    std::vector<Array> next;
    for (size_t i = 0; i < nk; ++i) next.push_back(g(nc + i, carry_in[i]));
    for (size_t i = 0; i < nc; ++i) next.push_back(ct_consts[i] + g(i, consts[i]));
    for (size_t i = 0; i < nx; ++i) next.push_back(g(nc + nk + i, x[i]));
    return next;
  };
  std::vector<Array> r = detail::scan_flat(step, nk + nc, init, xs, q.axis, !q.flag);
  std::vector<Array> in_cts(ins.size());
  for (size_t i = 0; i < nc; ++i) in_cts[i] = r[nk + i];
  for (size_t i = 0; i < nk; ++i) in_cts[nc + i] = r[i];
  for (size_t i = 0; i < nx; ++i) in_cts[nc + nk + i] = r[nk + nc + i];
  return in_cts;
}

}  // namespace

Program vjp_program(const Program& p, const std::vector<bool>& wrt, Device device) {
  Trace t(p.name + "_vjp", device);
  std::vector<Array> env(p.types.size());
  std::vector<bool> active(p.types.size(), false);
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const int v = p.inputs[i];
    env[static_cast<size_t>(v)] = t.add_input(p.type(v));
    active[static_cast<size_t>(v)] = i < wrt.size() && wrt[i] && differentiable(p.type(v));
  }
  std::vector<Array> out_cts;
  for (int v : p.outputs) out_cts.push_back(t.add_input(p.type(v)));
  for (size_t i = 0; i < p.consts.size(); ++i) env[static_cast<size_t>(p.const_vars[i])] = p.consts[i];

  struct Saved {
    std::vector<Array> residuals;
    ScanVjp scan;
    const CustomVjp* custom = nullptr;
    size_t n_args = 0;
  };
  std::vector<Saved> saved(p.eqns.size());
  std::vector<bool> eqn_active(p.eqns.size(), false);
  for (size_t k = 0; k < p.eqns.size(); ++k) {
    const Eqn& e = p.eqns[k];
    std::vector<Array> ins;
    bool act = false;
    for (int v : e.ins) {
      ins.push_back(env[static_cast<size_t>(v)]);
      act = act || active[static_cast<size_t>(v)];
    }
    eqn_active[k] = act;
    std::vector<Array> outs;
    if (act && e.prim == Prim::custom_vjp) {
      const auto* cv = static_cast<const CustomVjp*>(e.params.callee.get());
      const size_t n_args = static_cast<size_t>(e.params.count);
      for (size_t i = n_args; i < ins.size(); ++i)
        PL_CHECK(!active[static_cast<size_t>(e.ins[i])], "custom_vjp '", cv->name,
                 "': the function closes over a traced Array that is being differentiated; pass it as an argument");
      std::vector<Array> fo = cv->fwd(slice_of(ins, 0, n_args));
      PL_CHECK(fo.size() >= e.outs.size(), "custom_vjp '", cv->name, "': fwd returned ", fo.size(), " arrays, fewer than the ",
               e.outs.size(), " outputs of the function");
      outs = slice_of(fo, 0, e.outs.size());
      for (size_t o = 0; o < outs.size(); ++o)
        PL_CHECK(outs[o].shape() == p.type(e.outs[o]).shape && outs[o].dtype() == p.type(e.outs[o]).dtype, "custom_vjp '",
                 cv->name, "': fwd output ", o, " is ", type_str({outs[o].shape(), outs[o].dtype()}),
                 " but the function returns ", type_str(p.type(e.outs[o])));
      saved[k].residuals = slice_of(fo, e.outs.size(), fo.size() - e.outs.size());
      saved[k].custom = cv;
      saved[k].n_args = n_args;
    } else if (act && e.prim == Prim::scan) {
      saved[k].scan = scan_forward(e, ins);
      outs = saved[k].scan.outs;
    } else {
      outs = bind_eqn(e, ins);
    }
    for (size_t o = 0; o < e.outs.size(); ++o) {
      env[static_cast<size_t>(e.outs[o])] = outs[o];
      active[static_cast<size_t>(e.outs[o])] = act && differentiable(p.type(e.outs[o]));
    }
  }

  std::vector<Array> ct(p.types.size());
  for (size_t i = 0; i < p.outputs.size(); ++i)
    if (active[static_cast<size_t>(p.outputs[i])])
      ct[static_cast<size_t>(p.outputs[i])] = accumulate(ct[static_cast<size_t>(p.outputs[i])], out_cts[i]);
  for (size_t k = p.eqns.size(); k-- > 0;) {
    if (!eqn_active[k]) continue;
    const Eqn& e = p.eqns[k];
    std::vector<Array> cts, ins, outs;
    bool any = false;
    for (int v : e.outs) {
      cts.push_back(ct[static_cast<size_t>(v)]);
      any = any || ct[static_cast<size_t>(v)].defined();
      outs.push_back(env[static_cast<size_t>(v)]);
    }
    if (!any) continue;
    for (int v : e.ins) ins.push_back(env[static_cast<size_t>(v)]);
    std::vector<Array> in_cts;
    if (e.prim == Prim::custom_vjp) {
      const Saved& s = saved[k];
      std::vector<Array> full_cts;
      for (size_t o = 0; o < cts.size(); ++o) full_cts.push_back(cts[o].defined() ? cts[o] : jnp::zeros_like(outs[o]));
      in_cts = s.custom->bwd(s.residuals, full_cts);
      PL_CHECK(in_cts.size() == s.n_args, "custom_vjp '", s.custom->name, "': bwd returned ", in_cts.size(),
               " cotangents for a function of ", s.n_args, " arguments");
      for (size_t i = 0; i < in_cts.size(); ++i) {
        const Type want = p.type(e.ins[i]);
        PL_CHECK(!in_cts[i].defined() || (in_cts[i].shape() == want.shape && in_cts[i].dtype() == want.dtype),
                 "custom_vjp '", s.custom->name, "': bwd's cotangent ", i, " is ",
                 type_str({in_cts[i].shape(), in_cts[i].dtype()}), " but argument ", i, " is ", type_str(want));
      }
      in_cts.resize(ins.size());
    } else if (e.prim == Prim::scan) {
      in_cts = scan_backward(e, ins, saved[k].scan, cts, device);
    } else {
      in_cts = vjp_rule(e.prim)(e, ins, outs, cts);
    }
    for (size_t i = 0; i < e.ins.size() && i < in_cts.size(); ++i) {
      const size_t v = static_cast<size_t>(e.ins[i]);
      if (!active[v] || !in_cts[i].defined()) continue;
      PL_ASSERT(in_cts[i].shape() == p.type(e.ins[i]).shape, "VJP rule of ", prim_name(e.prim), " returned ",
                shape_str(in_cts[i].shape()), " for an operand of ", type_str(p.type(e.ins[i])));
      ct[v] = accumulate(ct[v], in_cts[i].astype(p.type(e.ins[i]).dtype));
    }
  }
  std::vector<Array> results;
  for (int v : p.outputs) results.push_back(env[static_cast<size_t>(v)]);
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (i >= wrt.size() || !wrt[i]) continue;
    const int v = p.inputs[i];
    Array g = ct[static_cast<size_t>(v)];
    results.push_back(g.defined() ? g : jnp::zeros_like(env[static_cast<size_t>(v)]));
  }
  return t.finish(results);
}

}  // namespace palladium::program

namespace palladium::detail {

using namespace program;

VjpResult vjp_flat(const FlatFn& f, const std::vector<Array>& primals, const std::vector<bool>& wrt_in, const char*) {
  const Device device = device_of(primals);
  Traced tr = trace_flat("vjp", f, types_of(primals), device);
  std::vector<bool> wrt;
  for (size_t i = 0; i < primals.size(); ++i) wrt.push_back(wrt_in[i] && is_float(primals[i].dtype()));
  auto q = std::make_shared<Program>(optimize(vjp_program(tr.program, wrt, device)));
  std::vector<Array> ins = primals;
  ins.insert(ins.end(), tr.captured.begin(), tr.captured.end());
  VjpResult r;
  r.outs = eval_program(tr.program, ins);
  const size_t n_out = tr.program.outputs.size();
  r.backward = [q, ins, wrt, n_out](const std::vector<Array>& cts) {
    PL_CHECK(cts.size() == n_out, "vjp: ", cts.size(), " cotangents for ", n_out, " outputs");
    std::vector<Array> all = ins;
    all.insert(all.end(), cts.begin(), cts.end());
    std::vector<Array> res = eval_program(*q, all);
    std::vector<Array> g;
    size_t pos = n_out;
    for (size_t i = 0; i < wrt.size(); ++i) g.push_back(wrt[i] ? res[pos++] : Array());
    return g;
  };
  return r;
}

std::vector<Array> grad_flat(const FlatFn& f, const std::vector<Array>& primals, const std::vector<bool>& wrt,
                             const char* what) {
  for (size_t i = 0; i < primals.size(); ++i)
    PL_CHECK(!wrt[i] || is_float(primals[i].dtype()), what, ": argument leaf ", i, " has dtype ",
             dtype_name(primals[i].dtype()), "; gradients are defined for floating-point inputs (cast it with astype)");
  const Device device = device_of(primals);
  Traced tr = trace_flat(what, f, types_of(primals), device);
  const Program& p = tr.program;
  PL_CHECK(!p.outputs.empty(), what, ": the function returned no Array");
  const Type out = p.type(p.outputs[0]);
  PL_CHECK(out.shape.empty() && is_float(out.dtype), what, ": the function must return a float scalar, got ",
           type_str(out), " (take a sum or mean, or use vjp for non-scalar outputs)");
  Program q = optimize(vjp_program(p, wrt, device));
  std::vector<Array> ins = primals;
  ins.insert(ins.end(), tr.captured.begin(), tr.captured.end());
  // The seed cotangent (and the aux outputs' zero cotangents) on the primals' device: a host seed
  // would broadcast into host Arrays that then meet device ones.
  auto on_device = [&](Array a) { return a.is_tracer() ? a : program::placed(a, device); };
  ins.push_back(on_device(lax::full({}, 1.0, out.dtype)));
  for (size_t o = 1; o < p.outputs.size(); ++o) {
    const Type t = p.type(p.outputs[o]);
    ins.push_back(on_device(jnp::zeros_like(lax::full(t.shape, 0.0, t.dtype))));
  }
  std::vector<Array> res = eval_program(q, ins);
  std::vector<Array> result(res.begin(), res.begin() + static_cast<std::ptrdiff_t>(p.outputs.size()));
  size_t pos = p.outputs.size();
  for (size_t i = 0; i < primals.size(); ++i) result.push_back(wrt[i] ? res[pos++] : Array());
  return result;
}

std::pair<std::vector<Array>, std::vector<Array>> jvp_flat(const FlatFn& f, const std::vector<Array>& primals,
                                                           const std::vector<Array>& tangents) {
  PL_CHECK(tangents.size() == primals.size(), "jvp: ", tangents.size(), " tangents for ", primals.size(), " primals");
  for (size_t i = 0; i < primals.size(); ++i)
    PL_CHECK(tangents[i].shape() == primals[i].shape() && tangents[i].dtype() == primals[i].dtype(),
             "jvp: tangent ", i, " is ", dtype_name(tangents[i].dtype()), shape_str(tangents[i].shape()), " but its primal is ",
             dtype_name(primals[i].dtype()), shape_str(primals[i].shape()));
  // J t is the transpose of the (linear) map u -> J^T u, i.e. the VJP of the VJP.
  VjpResult first = vjp_flat(f, primals, std::vector<bool>(primals.size(), true), "jvp");
  std::vector<Array> zero_cts;
  for (const Array& o : first.outs) zero_cts.push_back(jnp::zeros_like(o));
  std::vector<bool> float_leaf;
  for (const Array& x : primals) float_leaf.push_back(is_float(x.dtype()));
  FlatFn transpose_me = [&first, &primals, float_leaf](const std::vector<Array>& u) {
    std::vector<Array> g = first.backward(u), out;
    for (size_t i = 0; i < g.size(); ++i)
      if (float_leaf[i]) out.push_back(g[i].defined() ? g[i] : jnp::zeros_like(primals[i]));
    return out;
  };
  VjpResult second = vjp_flat(transpose_me, zero_cts, std::vector<bool>(zero_cts.size(), true), "jvp");
  std::vector<Array> t_float;
  for (size_t i = 0; i < tangents.size(); ++i)
    if (float_leaf[i]) t_float.push_back(tangents[i]);
  std::vector<Array> touts = second.backward(t_float);
  for (size_t i = 0; i < touts.size(); ++i)
    if (!touts[i].defined()) touts[i] = jnp::zeros_like(first.outs[i]);
  return {first.outs, touts};
}

std::vector<Array> custom_vjp_call(const std::string& name, const FlatFn& primal, const FlatFn& fwd,
                                   const std::function<std::vector<Array>(const std::vector<Array>&,
                                                                          const std::vector<Array>&)>& bwd,
                                   const std::vector<Array>& args) {
  const Device device = device_of(args);
  Traced tr = trace_flat(name, primal, types_of(args), device);
  auto cv = std::make_shared<CustomVjp>();
  cv->name = name;
  cv->fwd = fwd;
  cv->bwd = bwd;
  Params q;
  q.name = name;
  q.callee = cv;
  q.count = static_cast<int64_t>(args.size());
  for (int v : tr.program.outputs) q.out_types.push_back(tr.program.type(v));
  q.regions.push_back(std::make_shared<Program>(std::move(tr.program)));
  std::vector<Array> ins = args;
  ins.insert(ins.end(), tr.captured.begin(), tr.captured.end());
  return bind(Prim::custom_vjp, std::move(q), ins);
}

std::vector<Array> scan_flat(const FlatFn& body, size_t n_carry, const std::vector<Array>& init,
                             const std::vector<Array>& xs, int64_t length, bool reverse) {
  for (const Array& x : xs)
    PL_CHECK(x.ndim() >= 1 && x.shape()[0] == length, "scan: every xs array must have leading dimension ", length,
             ", got ", shape_str(x.shape()), trace_location());
  std::vector<Type> in = types_of(init);
  for (const Array& x : xs) in.push_back({Shape(x.shape().begin() + 1, x.shape().end()), x.dtype()});
  const Device device = device_of(init.empty() ? xs : init);
  Traced tr = trace_flat("scan_body", body, in, device);
  Program& b = tr.program;
  for (size_t i = 0; i < n_carry; ++i) {
    PL_CHECK(i < b.outputs.size() && b.type(b.outputs[i]) == in[i], "scan: the body's carry output ", i, " is ",
             i < b.outputs.size() ? type_str(b.type(b.outputs[i])) : std::string("missing"), " but the carry is ",
             type_str(in[i]), "; a carry keeps its shape and dtype", trace_location());
  }
  // Captured values become loop-invariant inputs in front: the region's inputs are reordered to
  // (captured, carries, xs).
  const size_t n_cap = tr.captured.size();
  std::vector<int> reordered(b.inputs.end() - static_cast<std::ptrdiff_t>(n_cap), b.inputs.end());
  reordered.insert(reordered.end(), b.inputs.begin(), b.inputs.end() - static_cast<std::ptrdiff_t>(n_cap));
  b.inputs = reordered;
  Params q;
  q.count = static_cast<int64_t>(n_carry);
  q.count2 = static_cast<int64_t>(n_cap);
  q.axis = length;
  q.flag = reverse;
  for (size_t i = 0; i < b.outputs.size(); ++i) {
    Type t = b.type(b.outputs[i]);
    if (i >= n_carry) t.shape.insert(t.shape.begin(), length);
    q.out_types.push_back(t);
  }
  q.regions.push_back(std::make_shared<Program>(std::move(b)));
  std::vector<Array> ins = tr.captured;
  ins.insert(ins.end(), init.begin(), init.end());
  ins.insert(ins.end(), xs.begin(), xs.end());
  return bind(Prim::scan, std::move(q), ins);
}

std::vector<Array> while_flat(const FlatFn& cond, const FlatFn& body, const std::vector<Array>& init) {
  const Device device = device_of(init);
  const std::vector<Type> in = types_of(init);
  Traced c = trace_flat("while_cond", cond, in, device);
  const Type bool_scalar{{}, DType::bool_};
  PL_CHECK(c.program.outputs.size() == 1 && c.program.type(c.program.outputs[0]) == bool_scalar,
           "while_loop: the condition must return one bool scalar", trace_location());
  Traced b = trace_flat("while_body", body, in, device);
  for (size_t i = 0; i < in.size(); ++i)
    PL_CHECK(b.program.type(b.program.outputs.at(i)) == in[i], "while_loop: the body's carry output ", i, " is ",
             type_str(b.program.type(b.program.outputs[i])), " but the carry is ", type_str(in[i]), trace_location());
  auto front = [](Traced& t) {
    const size_t n = t.captured.size();
    std::vector<int> r(t.program.inputs.end() - static_cast<std::ptrdiff_t>(n), t.program.inputs.end());
    r.insert(r.end(), t.program.inputs.begin(), t.program.inputs.end() - static_cast<std::ptrdiff_t>(n));
    t.program.inputs = r;
  };
  front(c);
  front(b);
  Params q;
  q.count = static_cast<int64_t>(c.captured.size());
  q.count2 = static_cast<int64_t>(b.captured.size());
  q.out_types = in;
  q.regions = {std::make_shared<Program>(std::move(c.program)), std::make_shared<Program>(std::move(b.program))};
  std::vector<Array> ins = c.captured;
  ins.insert(ins.end(), b.captured.begin(), b.captured.end());
  ins.insert(ins.end(), init.begin(), init.end());
  return bind(Prim::while_loop, std::move(q), ins);
}

std::vector<Array> cond_flat(const Array& pred, const FlatFn& on_true, const FlatFn& on_false,
                             const std::vector<Array>& operands) {
  PL_CHECK(pred.shape().empty(), "cond: the predicate must be a scalar, got ", shape_str(pred.shape()), trace_location());
  const Device device = device_of(operands.empty() ? std::vector<Array>{pred} : operands);
  Traced t = trace_flat("cond_true", on_true, types_of(operands), device);
  Traced f = trace_flat("cond_false", on_false, types_of(operands), device);
  PL_CHECK(t.program.outputs.size() == f.program.outputs.size(), "cond: the branches return ", t.program.outputs.size(),
           " and ", f.program.outputs.size(), " arrays", trace_location());
  Params q;
  for (size_t i = 0; i < t.program.outputs.size(); ++i) {
    const Type a = t.program.type(t.program.outputs[i]), b = f.program.type(f.program.outputs[i]);
    PL_CHECK(a == b, "cond: output ", i, " is ", type_str(a), " in the true branch but ", type_str(b), " in the false branch",
             trace_location());
    q.out_types.push_back(a);
  }
  q.count = static_cast<int64_t>(operands.size() + t.captured.size());
  q.regions = {std::make_shared<Program>(std::move(t.program)), std::make_shared<Program>(std::move(f.program))};
  std::vector<Array> ins{pred.dtype() == DType::bool_ ? pred : pred != 0};
  ins.insert(ins.end(), operands.begin(), operands.end());
  ins.insert(ins.end(), t.captured.begin(), t.captured.end());
  ins.insert(ins.end(), operands.begin(), operands.end());
  ins.insert(ins.end(), f.captured.begin(), f.captured.end());
  return bind(Prim::cond, std::move(q), ins);
}

}  // namespace palladium::detail
