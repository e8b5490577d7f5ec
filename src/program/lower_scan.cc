// Scan fusion: a scan whose body is a chain of elementwise equations over the shape of its carries
// and x slices (the IndRNN recurrence) becomes one kernel. The grid tiles that shape; each program
// keeps its carries in registers across an in-kernel fori_loop over time, reading x[t] and writing
// y[t] of its block, as the hand-written IndRNN kernel does.
#include <map>

#include "palladium/control.h"
#include "palladium/lang.h"
#include "palladium/ref.h"
#include "program/families.h"
#include "program/kernel_util.h"
#include "program/lower.h"

namespace palladium::program {

std::optional<KernelStep> lower_fused_scan(const Program& p, const Eqn& e, const std::string& backend) {
  const Params& q = e.params;
  const Program& body = *q.regions.at(0);
  const size_t nc = static_cast<size_t>(q.count2), nk = static_cast<size_t>(q.count);
  const size_t nx = e.ins.size() - nc - nk, ny = e.outs.size() - nk;
  if (nk == 0 || q.axis == 0 || !body.consts.empty() || e.ins.size() + e.outs.size() > 24) return std::nullopt;
  for (const Eqn& b : body.eqns)
    if (!is_elementwise(b.prim) || b.prim == Prim::iota) return std::nullopt;
  // One shape S for carries, x slices and ys; loop-invariant operands broadcast to it.
  const Shape S = p.type(e.ins[nc]).shape;
  for (size_t i = 0; i < nk; ++i)
    if (p.type(e.ins[nc + i]).shape != S) return std::nullopt;
  for (size_t i = 0; i < nx; ++i) {
    Shape xs = p.type(e.ins[nc + nk + i]).shape;
    if (Shape(xs.begin() + 1, xs.end()) != S) return std::nullopt;
  }
  for (size_t j = 0; j < ny; ++j) {
    Shape ys = p.type(e.outs[nk + j]).shape;
    if (Shape(ys.begin() + 1, ys.end()) != S) return std::nullopt;
  }
  for (size_t i = 0; i < nc; ++i) {
    const Shape& c = p.type(e.ins[i]).shape;
    if (c.size() > S.size()) return std::nullopt;
    for (size_t d = 0; d < c.size(); ++d)
      if (c[d] != 1 && c[d] != S[S.size() - c.size() + d]) return std::nullopt;
  }
  const size_t r = S.size();
  // Each program runs the whole time loop: small blocks give the GPU enough programs to run side by
  // side (64 features, as the best block of the hand-written IndRNN kernel).
  const Tiling t = tile(S, backend == "cuda" ? 64 : block_budget(backend));
  const int64_t T = q.axis;
  const bool reverse = q.flag;
  KernelStep step;
  step.ins = e.ins;
  step.outs = e.outs;
  std::vector<BlockSpec> in_specs, out_specs;
  auto time_spec = [&]() {  // (T, block...) at (0, g...)
    std::vector<int64_t> blk{T};
    blk.insert(blk.end(), t.block.begin(), t.block.end());
    return make_spec(blk, [r](std::span<const Value> g) {
      Indexer idx;
      idx.args.emplace_back(Value(0));
      for (size_t d = 0; d < r; ++d) idx.args.emplace_back(g[d]);
      return idx;
    }, r);
  };
  for (size_t i = 0; i < e.ins.size(); ++i) {
    if (i < nc) {
      Shape view(r - p.type(e.ins[i]).shape.size(), 1);
      for (int64_t d : p.type(e.ins[i]).shape) view.push_back(d);
      std::vector<bool> broadcast(r);
      for (size_t d = 0; d < r; ++d) broadcast[d] = view[d] == 1 && S[d] != 1;
      step.in_views.push_back(view);
      in_specs.push_back(grid_spec(t, broadcast));
    } else if (i < nc + nk) {
      step.in_views.push_back(S);
      in_specs.push_back(grid_spec(t, std::vector<bool>(r, false)));
    } else {
      step.in_views.push_back(p.type(e.ins[i]).shape);
      in_specs.push_back(time_spec());
    }
  }
  std::vector<ShapeDtype> out_types;
  for (size_t o = 0; o < e.outs.size(); ++o) {
    out_types.emplace_back(p.type(e.outs[o]).shape, p.type(e.outs[o]).dtype);
    out_specs.push_back(o < nk ? grid_spec(t, std::vector<bool>(r, false)) : time_spec());
  }
  const Program b = body;
  const Shape block = t.block;
  const size_t n_in = e.ins.size();
  auto kernel = [b, block, r, nc, nk, nx, ny, T, reverse, n_in](Refs refs) {
    std::vector<Value> consts, init;
    for (size_t i = 0; i < nc; ++i) consts.push_back(refs[i][all]);
    for (size_t i = 0; i < nk; ++i) init.push_back(refs[nc + i][all]);
    auto row = [r](const Value& tt) {
      Indexer idx;
      idx.args.emplace_back(tt);
      for (size_t d = 0; d < r; ++d) idx.args.emplace_back(slice());
      return idx;
    };
    // Equations of the loop-invariant inputs alone (relu's zero, a scale of the weights) are
    // computed once before the loop: inside it they would split the body's elementwise chain.
    std::map<int, Value> invariant;
    for (size_t i = 0; i < nc; ++i) invariant[b.inputs[i]] = consts[i];
    std::vector<const Eqn*> per_step;
    for (const Eqn& eq : b.eqns) {
      bool fixed = true;
      for (int v : eq.ins) fixed = fixed && invariant.count(v);
      if (!fixed) {
        per_step.push_back(&eq);
        continue;
      }
      std::vector<Value> a;
      for (int v : eq.ins) a.push_back(invariant.at(v));
      invariant[eq.outs[0]] = apply_elementwise(eq, a, block, r);
    }
    std::vector<Value> final_carry = fori_loop(Value(0), Value(T), [&](Value it, std::vector<Value> carry) {
      Value tt = reverse ? Value(T - 1) - it : it;
      std::map<int, Value> env = invariant;
      for (size_t i = 0; i < nk; ++i) env[b.inputs[nc + i]] = carry[i];
      for (size_t i = 0; i < nx; ++i) env[b.inputs[nc + nk + i]] = load(refs[nc + nk + i], row(tt));
      for (const Eqn* eq : per_step) {
        std::vector<Value> a;
        for (int v : eq->ins) a.push_back(env.at(v));
        env[eq->outs[0]] = apply_elementwise(*eq, a, block, r);
      }
      std::vector<Value> next;
      for (size_t i = 0; i < nk; ++i) {
        Value v = env.at(b.outputs[i]);
        next.push_back(v.shape() == block ? v : jnp::broadcast_to(v, block));
      }
      for (size_t j = 0; j < ny; ++j) {
        Value y = env.at(b.outputs[nk + j]);
        store(refs[n_in + nk + j], row(tt), y.shape() == block ? y : jnp::broadcast_to(y, block));
      }
      return next;
    }, init);
    for (size_t i = 0; i < nk; ++i) store(refs[n_in + i], final_carry[i]);
  };
  step.call = make_kernel("scan_fused", kernel, out_types, t.grid, std::move(in_specs), std::move(out_specs), backend);
  return step;
}

}  // namespace palladium::program
