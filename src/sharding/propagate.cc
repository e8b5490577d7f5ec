// Sharding propagation: shardings flow along each equation's factors, backward from results to
// operands and forward from operands to results, seeded by the inputs and the sharding_constraint
// equations, until nothing changes; what is left unknown is replicated. The first sharding a value
// gets is kept (a constraint or an input always wins).
#include <set>

#include "sharding/sharding.h"

namespace palladium::sharding {

using program::Eqn;
using program::Prim;
using program::Program;

namespace {

using Known = std::vector<std::optional<Sharding>>;

int var_of(const Eqn& e, int value) {
  const int n = static_cast<int>(e.ins.size());
  return value < n ? e.ins[static_cast<size_t>(value)] : e.outs[static_cast<size_t>(value - n)];
}

// One direction of one equation: the values on the `from` side that are known lend their axes to
// each factor; the unknown values on the other side take them. Returns whether anything changed.
// With `defer_open`, forward flow leaves undecided a result that has a dimension no operand
// shares (broadcast's new dimensions): a consumer may still want it split there, which costs
// nothing to honour, where deciding it now would make it whole (and cut it after, as it did for
// the weights a batched matmul broadcasts over a split batch).
bool flow(const Eqn& e, const Program& p, Known& sh, const std::shared_ptr<const Mesh>& mesh, bool forward,
          bool defer_open) {
  const int n = static_cast<int>(e.ins.size());
  auto is_source = [&](int value) { return forward ? value < n : value >= n; };
  if (e.prim == Prim::sharding_constraint) {
    if (forward || sh[static_cast<size_t>(e.ins[0])]) return false;
    sh[static_cast<size_t>(e.ins[0])] = sh[static_cast<size_t>(e.outs[0])];
    return true;
  }
  bool any_source = false;
  for (int v = 0; v < n + static_cast<int>(e.outs.size()); ++v)
    any_source = any_source || (is_source(v) && sh[static_cast<size_t>(var_of(e, v))].has_value());
  if (!any_source) return false;
  const std::vector<Factor> factors = factor_rule(e.prim)(e, p);
  std::vector<std::vector<int>> axes(factors.size());
  for (size_t f = 0; f < factors.size(); ++f)
    for (auto [v, d] : factors[f].dims) {
      const auto& s = sh[static_cast<size_t>(var_of(e, v))];
      if (is_source(v) && s && s->dims[static_cast<size_t>(d)].size() > axes[f].size()) axes[f] = s->dims[static_cast<size_t>(d)];
    }
  auto open = [&](int value) {
    for (const Factor& f : factors) {
      bool mine = false, shared = false;
      for (auto [fv, d] : f.dims) (fv == value ? mine : shared) = true;
      if (mine && !shared) return true;
    }
    return false;
  };
  bool changed = false;
  for (int v = 0; v < n + static_cast<int>(e.outs.size()); ++v) {
    const int var = var_of(e, v);
    if (is_source(v) || sh[static_cast<size_t>(var)]) continue;
    if (forward && defer_open && open(v)) continue;
    Sharding s = Sharding::replicated(mesh, p.type(var).shape.size());
    std::set<int> used;
    for (size_t f = 0; f < factors.size(); ++f)
      for (auto [fv, d] : factors[f].dims) {
        if (fv != v) continue;
        bool clash = false;
        for (int a : axes[f]) clash = clash || used.count(a);
        if (clash) continue;
        s.dims[static_cast<size_t>(d)] = axes[f];
        used.insert(axes[f].begin(), axes[f].end());
      }
    sh[static_cast<size_t>(var)] = std::move(s);
    changed = true;
  }
  return changed;
}

}  // namespace

std::vector<Sharding> propagate(const Program& p, const std::vector<Sharding>& inputs,
                                const std::vector<std::optional<Sharding>>& outputs,
                                const std::shared_ptr<const Mesh>& mesh) {
  Known sh(p.types.size());
  for (size_t i = 0; i < inputs.size(); ++i) sh[static_cast<size_t>(p.inputs[i])] = inputs[i];
  for (int v : p.const_vars) sh[static_cast<size_t>(v)] = Sharding::replicated(mesh, p.type(v).shape.size());
  for (const Eqn& e : p.eqns)
    if (e.prim == Prim::sharding_constraint) {
      const auto* c = static_cast<const ConstraintSpec*>(e.params.callee.get());
      PL_ASSERT(c && c->named, "a sharding_constraint reached propagation unresolved");
      Sharding s = from_named(*c->named, p.type(e.outs[0]).shape.size(), "with_sharding_constraint");
      s.mesh = mesh;
      sh[static_cast<size_t>(e.outs[0])] = s;
    }
  // Constraints first (backward), then operands (forward): a value a constraint splits is computed
  // on pieces rather than whole and cut afterwards.
  // Results with dimensions of their own (open) wait for their consumers first; then the rest.
  for (bool defer_open : {true, false})
    for (int round = 0; round < 8; ++round) {
      bool changed = false;
      for (size_t i = p.eqns.size(); i-- > 0;) changed = flow(p.eqns[i], p, sh, mesh, false, defer_open) || changed;
      for (const Eqn& e : p.eqns) changed = flow(e, p, sh, mesh, true, defer_open) || changed;
      if (!changed) break;
    }
  // The wanted output shardings are met by the partitioner's last reshard; they decide only values
  // nothing else reached (an output made from constants).
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i] && !sh[static_cast<size_t>(p.outputs[i])]) sh[static_cast<size_t>(p.outputs[i])] = outputs[i];
  std::vector<Sharding> out;
  for (size_t v = 0; v < sh.size(); ++v)
    out.push_back(sh[v] ? *sh[v] : Sharding::replicated(mesh, p.types[v].shape.size()));
  return out;
}

}  // namespace palladium::sharding
