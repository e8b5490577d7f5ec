// The partitioner: a global program and the propagated shardings of its values become one SPMD
// program over local shapes. Each equation gets its factors' mesh axes (a result's from its
// propagated sharding, a contracting factor's from how its operand already lies), its operands are
// resharded to match (collectives, or a local slice where an axis is added), it is re-emitted on
// the pieces, and split contracting factors leave partial results that an all_reduce (or a
// reduce_scatter, when the result is wanted split along those axes) combines.
#include <algorithm>
#include <map>
#include <set>

#include "core/grid_mapping.h"
#include "program/families.h"
#include "transforms/transforms.h"
#include "sharding/sharding.h"

namespace palladium::sharding {

using program::Eqn;
using program::Family;
using program::Params;
using program::Prim;
using program::Program;
using program::Type;

namespace {

// custom_vjp equations replaced by their primal regions (outside differentiation a custom_vjp is
// its primal), so the partitioner sees ordinary equations.
Program inline_custom_vjps(const Program& in) {
  bool any = false;
  for (const Eqn& e : in.eqns) any = any || e.prim == Prim::custom_vjp;
  if (!any) return in;
  Program p = in;
  p.eqns.clear();
  std::vector<int> rename(in.types.size());
  for (size_t v = 0; v < rename.size(); ++v) rename[v] = static_cast<int>(v);
  for (const Eqn& e0 : in.eqns) {
    Eqn e = e0;
    for (int& v : e.ins) v = rename[static_cast<size_t>(v)];
    if (e.prim != Prim::custom_vjp) {
      p.eqns.push_back(std::move(e));
      continue;
    }
    const Program region = inline_custom_vjps(*e.params.regions.at(0));
    std::vector<int> map(region.types.size(), -1);
    for (size_t i = 0; i < region.inputs.size(); ++i) map[static_cast<size_t>(region.inputs[i])] = e.ins.at(i);
    for (size_t i = 0; i < region.consts.size(); ++i) {
      const int v = p.new_var(region.type(region.const_vars[i]));
      p.const_vars.push_back(v);
      p.consts.push_back(region.consts[i]);
      map[static_cast<size_t>(region.const_vars[i])] = v;
    }
    auto mapped = [&](int v) {
      int& m = map[static_cast<size_t>(v)];
      if (m < 0) m = p.new_var(region.type(v));
      return m;
    };
    for (const Eqn& r : region.eqns) {
      Eqn c = r;
      for (int& v : c.ins) v = mapped(v);
      for (int& v : c.outs) v = mapped(v);
      p.eqns.push_back(std::move(c));
    }
    for (size_t o = 0; o < e.outs.size(); ++o) rename[static_cast<size_t>(e.outs[o])] = mapped(region.outputs.at(o));
  }
  for (int& v : p.outputs) v = rename[static_cast<size_t>(v)];
  return p;
}

class Partitioner {
 public:
  Partitioner(const Program& g, std::vector<Sharding> sh, std::shared_ptr<const Mesh> mesh)
      : g_(g), sh_(std::move(sh)), mesh_(std::move(mesh)), local_(g.types.size(), -1), cur_(sh_) {
    l_.name = g.name + "_per_device";
  }

  Partitioned run(const std::vector<Sharding>& inputs, const std::vector<std::optional<Sharding>>& outputs) {
    Partitioned r;
    for (size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i]) wanted_.emplace(g_.outputs[i], *outputs[i]);
    for (size_t i = 0; i < g_.inputs.size(); ++i) {
      const int v = g_.inputs[i];
      cur_[static_cast<size_t>(v)] = inputs[i];
      local_[static_cast<size_t>(v)] = l_.new_var({inputs[i].local_shape(g_.type(v).shape), g_.type(v).dtype});
      l_.inputs.push_back(local_[static_cast<size_t>(v)]);
      r.in.push_back(inputs[i]);
    }
    for (size_t i = 0; i < g_.consts.size(); ++i) {
      const int v = g_.const_vars[i];
      cur_[static_cast<size_t>(v)] = Sharding::replicated(mesh_, g_.type(v).shape.size());
      local_[static_cast<size_t>(v)] = l_.new_var(g_.type(v));
      l_.const_vars.push_back(local_[static_cast<size_t>(v)]);
      l_.consts.push_back(g_.consts[i]);
    }
    for (const Eqn& e : g_.eqns) equation(e);
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      const int v = g_.outputs[i];
      const Sharding want = outputs[i] ? *outputs[i] : sh_[static_cast<size_t>(v)];
      l_.outputs.push_back(reshard(local_[static_cast<size_t>(v)], g_.type(v), cur_[static_cast<size_t>(v)], want));
      r.out.push_back(want);
    }
    r.local = std::move(l_);
    r.global_vars = sh_;
    return r;
  }

 private:
  int emit(Prim prim, Params q, const std::vector<int>& ins) {
    return emit_all(prim, std::move(q), ins).at(0);
  }
  std::vector<int> emit_all(Prim prim, Params q, const std::vector<int>& ins) {
    std::vector<Type> types;
    for (int v : ins) types.push_back(l_.type(v));
    Eqn e{prim, std::move(q), ins, {}};
    for (const Type& t : program::infer_types(prim, e.params, types)) e.outs.push_back(l_.new_var(t));
    l_.eqns.push_back(e);
    return e.outs;
  }
  Params collective(const std::vector<int>& axes) const {
    Params q;
    q.callee = mesh_;
    for (int a : axes) q.axes.push_back(a);
    return q;
  }
  int64_t group_size(const std::vector<int>& axes) const {
    int64_t n = 1;
    for (int a : axes) n *= mesh_->shape()[static_cast<size_t>(a)];
    return n;
  }

  // Moves a local value from one sharding to another: an axis moving between two dimensions is
  // one all_to_all; an axis leaving a dimension is an all_gather; one arriving is a local slice.
  // With `cost`, nothing is emitted: the bytes a device would receive are added to *cost.
  int reshard(int lv, const Type& global, Sharding from, const Sharding& to, double* cost = nullptr) {
    if (from == to) return lv;
    const size_t rank = from.dims.size();
    const double item = static_cast<double>(itemsize(global.dtype));
    auto local_bytes = [&](const Sharding& s) { return static_cast<double>(numel(s.local_shape(global.shape))) * item; };
    auto moved = [&](const Sharding& s, const std::vector<int>& axes) {
      const double g = static_cast<double>(group_size(axes));
      return local_bytes(s) * (g - 1) / g;
    };
    for (size_t a = 0; a < rank; ++a)
      for (size_t b = 0; b < rank; ++b) {
        if (a == b || from.dims[a].empty() || from.dims[a] != to.dims[b] || !from.dims[b].empty() || !to.dims[a].empty())
          continue;
        if (from.local_shape(global.shape)[b] % group_size(from.dims[a]) != 0) continue;
        if (cost) *cost += moved(from, from.dims[a]);
        else {
          Params q = collective(from.dims[a]);
          q.axis = static_cast<int64_t>(b);   // split
          q.count = static_cast<int64_t>(a);  // concatenated
          lv = emit(Prim::all_to_all, q, {lv});
        }
        from.dims[b] = from.dims[a];
        from.dims[a].clear();
      }
    for (size_t d = 0; d < rank; ++d) {
      if (from.dims[d].empty() || from.dims[d] == to.dims[d]) continue;
      const std::vector<int> axes = from.dims[d];
      from.dims[d].clear();
      if (cost) *cost += moved(from, axes);
      else {
        Params q = collective(axes);
        q.axis = static_cast<int64_t>(d);
        q.flag = true;  // tiled
        lv = emit(Prim::all_gather, q, {lv});
      }
    }
    for (size_t d = 0; d < rank; ++d) {
      if (to.dims[d].empty() || from.dims[d] == to.dims[d]) continue;
      if (!cost) {
        Params q = collective(to.dims[d]);
        q.axis = static_cast<int64_t>(d);
        lv = emit(Prim::shard_slice, q, {lv});
      }
      from.dims[d] = to.dims[d];
    }
    PL_ASSERT(cost || l_.type(lv).shape == to.local_shape(global.shape), "reshard to ", to.str(), " of ",
              type_str(global));
    return lv;
  }

  int var_of(const Eqn& e, int value) const {
    const int n = static_cast<int>(e.ins.size());
    return value < n ? e.ins[static_cast<size_t>(value)] : e.outs[static_cast<size_t>(value - n)];
  }

  // How a result should end up: as the caller wants it for a program output, else as propagated.
  const Sharding& wanted(int var) const {
    auto it = wanted_.find(var);
    return it != wanted_.end() ? it->second : sh_[static_cast<size_t>(var)];
  }

  // The mesh axes of each factor: result factors take the results' propagated axes, contracting
  // factors the axes their operands already have; an axis that two factors of one value claim goes
  // to the factor processed first (contracting ones first or last, as `contracting_first` says),
  // and a factor whose axes do not divide a member's size is not split.
  std::vector<std::vector<int>> assign(const Eqn& e, const std::vector<Factor>& factors, bool contracting_first) const {
    const int n = static_cast<int>(e.ins.size());
    std::vector<std::vector<int>> axes(factors.size());
    for (size_t f = 0; f < factors.size(); ++f)
      for (auto [v, d] : factors[f].dims) {
        const int var = var_of(e, v);
        if (v >= n) { axes[f] = sh_[static_cast<size_t>(var)].dims[static_cast<size_t>(d)]; break; }
        const auto& have = cur_[static_cast<size_t>(var)].dims[static_cast<size_t>(d)];
        if (factors[f].contracting && axes[f].empty()) axes[f] = have;
      }
    std::vector<size_t> order;
    for (int pass = 0; pass < 2; ++pass)
      for (size_t f = 0; f < factors.size(); ++f)
        if (factors[f].contracting == (contracting_first == (pass == 0))) order.push_back(f);
    std::map<int, std::set<int>> used;  // value -> axes taken by earlier factors
    for (size_t f : order) {
      bool ok = true;
      for (auto [v, d] : factors[f].dims) {
        for (int a : axes[f]) ok = ok && !used[v].count(a);
        ok = ok && g_.type(var_of(e, v)).shape[static_cast<size_t>(d)] % group_size(axes[f]) == 0;
      }
      if (!ok) axes[f].clear();
      for (auto [v, d] : factors[f].dims) used[v].insert(axes[f].begin(), axes[f].end());
    }
    return axes;
  }

  Sharding layout(const Eqn& e, const std::vector<Factor>& factors, const std::vector<std::vector<int>>& axes, int v) const {
    Sharding s = Sharding::replicated(mesh_, g_.type(var_of(e, v)).shape.size());
    for (size_t f = 0; f < factors.size(); ++f)
      for (auto [fv, d] : factors[f].dims)
        if (fv == v) s.dims[static_cast<size_t>(d)] = axes[f];
    return s;
  }

  // The dimension that a reduce_scatter over `partial` could split the result along (-1: none).
  int scatter_dim(int out_var, const Sharding& made, const std::vector<int>& partial, const char* op) const {
    if (std::string(op) != "sum") return -1;
    const Sharding& want = wanted(out_var);
    const Shape local = made.local_shape(g_.type(out_var).shape);
    for (size_t d = 0; d < made.dims.size(); ++d)
      if (made.dims[d].empty() && want.dims[d] == partial && local[d] % group_size(partial) == 0) return static_cast<int>(d);
    return -1;
  }

  // Bytes a device receives under one assignment of axes: operands resharded, partial results
  // combined, results resharded to what is wanted.
  double plan_cost(const Eqn& e, const std::vector<Factor>& factors, const std::vector<std::vector<int>>& axes) {
    const int n = static_cast<int>(e.ins.size());
    double cost = 0;
    for (int k = 0; k < n; ++k) {
      const int var = e.ins[static_cast<size_t>(k)];
      reshard(-1, g_.type(var), cur_[static_cast<size_t>(var)], layout(e, factors, axes, k), &cost);
    }
    std::vector<int> partial;
    for (size_t f = 0; f < factors.size(); ++f)
      if (factors[f].contracting) partial.insert(partial.end(), axes[f].begin(), axes[f].end());
    for (int o = 0; o < static_cast<int>(e.outs.size()); ++o) {
      const int var = e.outs[static_cast<size_t>(o)];
      Sharding made = layout(e, factors, axes, n + o);
      if (!partial.empty()) {
        const double g = static_cast<double>(group_size(partial));
        const double bytes = static_cast<double>(numel(made.local_shape(g_.type(var).shape))) *
                             static_cast<double>(itemsize(g_.type(var).dtype));
        const int d = scatter_dim(var, made, partial, partial_reduction(e.prim));
        cost += (d >= 0 ? 1.0 : 2.0) * bytes * (g - 1) / g;
        if (d >= 0) made.dims[static_cast<size_t>(d)] = partial;
      }
      reshard(-1, g_.type(var), made, wanted(var), &cost);
    }
    return cost;
  }

  void equation(const Eqn& e) {
    const int n = static_cast<int>(e.ins.size());
    if (e.prim == Prim::sharding_constraint) {
      const int in = e.ins[0], out = e.outs[0];
      const Sharding& want = sh_[static_cast<size_t>(out)];
      local_[static_cast<size_t>(out)] = reshard(local_[static_cast<size_t>(in)], g_.type(in), cur_[static_cast<size_t>(in)], want);
      cur_[static_cast<size_t>(out)] = want;
      return;
    }
    if (e.prim == Prim::scan) return scan_equation(e);
    if (e.prim == Prim::while_loop) return while_equation(e);
    if (e.prim == Prim::cond) return cond_equation(e);
    const std::vector<Factor> factors = factor_rule(e.prim)(e, g_);
    // Of the two ways to settle clashes, the one that moves fewer bytes.
    std::vector<std::vector<int>> axes = assign(e, factors, false);
    const std::vector<std::vector<int>> other = assign(e, factors, true);
    if (other != axes && plan_cost(e, factors, other) < plan_cost(e, factors, axes)) axes = other;
    std::vector<int> ins;
    for (int k = 0; k < n; ++k) {
      const int var = e.ins[static_cast<size_t>(k)];
      ins.push_back(reshard(local_[static_cast<size_t>(var)], g_.type(var), cur_[static_cast<size_t>(var)],
                            layout(e, factors, axes, k)));
    }
    std::vector<Sharding> made;
    for (int o = 0; o < static_cast<int>(e.outs.size()); ++o) made.push_back(layout(e, factors, axes, n + o));
    std::vector<int> outs = emit_all(e.prim, local_params(e, made, factors, axes), ins);
    // Partial results of split contracting factors.
    std::vector<int> partial;
    for (size_t f = 0; f < factors.size(); ++f)
      if (factors[f].contracting) partial.insert(partial.end(), axes[f].begin(), axes[f].end());
    if (!partial.empty()) {
      PL_ASSERT(outs.size() == 1, "a contracting factor on a multi-result equation");
      const char* op = partial_reduction(e.prim);
      Params q = collective(partial);
      q.name = op;
      if (const int d = scatter_dim(e.outs[0], made[0], partial, op); d >= 0) {
        q.axis = d;
        q.flag = true;
        outs[0] = emit(Prim::reduce_scatter, q, {outs[0]});
        made[0].dims[static_cast<size_t>(d)] = partial;
      } else {
        outs[0] = emit(Prim::all_reduce, q, {outs[0]});
      }
    }
    for (size_t o = 0; o < e.outs.size(); ++o) {
      const int var = e.outs[o];
      local_[static_cast<size_t>(var)] = reshard(outs[o], g_.type(var), made[o], wanted(var));
      cur_[static_cast<size_t>(var)] = wanted(var);
    }
  }

  // A scan runs on pieces when its body does: the body is partitioned with the carries laid out as
  // their propagated shardings (and made to return them so, for the next step), the consts as
  // they are, and each x slice as its xs without the time dimension (which stays whole).
  void scan_equation(const Eqn& e) {
    const size_t n_const = static_cast<size_t>(e.params.count2), n_carry = static_cast<size_t>(e.params.count);
    const Program& body = *e.params.regions.at(0);
    std::vector<Sharding> body_in;
    std::vector<std::optional<Sharding>> body_out(body.outputs.size());
    std::vector<int> ins;
    for (size_t i = 0; i < e.ins.size(); ++i) {
      const int var = e.ins[i];
      Sharding want = cur_[static_cast<size_t>(var)];
      if (i >= n_const && i < n_const + n_carry) want = sh_[static_cast<size_t>(e.outs[i - n_const])];
      if (i >= n_const + n_carry) want.dims[0].clear();  // time
      ins.push_back(reshard(local_[static_cast<size_t>(var)], g_.type(var), cur_[static_cast<size_t>(var)], want));
      Sharding step = want;
      if (i >= n_const + n_carry) step.dims.erase(step.dims.begin());
      body_in.push_back(step);
      if (i >= n_const && i < n_const + n_carry) body_out[i - n_const] = step;
    }
    std::vector<Sharding> made;
    Params q = e.params;
    q.regions = {partitioned(body, body_in, body_out, &made)};
    for (size_t o = n_carry; o < made.size(); ++o) made[o].dims.insert(made[o].dims.begin(), std::vector<int>{});
    emit_control(e, std::move(q), ins, made);
  }

  // Emits a control-flow equation with partitioned regions and records its results, produced as
  // `made`, resharded to what is wanted of them.
  void emit_control(const Eqn& e, Params q, const std::vector<int>& ins, const std::vector<Sharding>& made) {
    q.out_types.clear();
    for (size_t o = 0; o < e.outs.size(); ++o)
      q.out_types.push_back({made[o].local_shape(g_.type(e.outs[o]).shape), g_.type(e.outs[o]).dtype});
    std::vector<int> outs = emit_all(e.prim, std::move(q), ins);
    for (size_t o = 0; o < e.outs.size(); ++o) {
      const int var = e.outs[o];
      local_[static_cast<size_t>(var)] = reshard(outs[o], g_.type(var), made[o], wanted(var));
      cur_[static_cast<size_t>(var)] = wanted(var);
    }
  }
  std::shared_ptr<const Program> partitioned(const Program& region, const std::vector<Sharding>& in,
                                             const std::vector<std::optional<Sharding>>& out, std::vector<Sharding>* made) {
    Partitioned part = partition(region, in, out, mesh_);
    if (made) *made = part.out;
    return std::make_shared<Program>(program::optimize(part.local));
  }

  // while_loop (ins: cond consts (count), body consts (count2), carries): the carries keep their
  // propagated layout through the body; the condition's result is wanted replicated, so every
  // device computes the same predicate (collectives inside it make it so) and they stop together.
  void while_equation(const Eqn& e) {
    const size_t nc = static_cast<size_t>(e.params.count), nb = static_cast<size_t>(e.params.count2);
    std::vector<int> ins;
    std::vector<Sharding> lay;
    for (size_t i = 0; i < e.ins.size(); ++i) {
      const int var = e.ins[i];
      const Sharding want = i < nc + nb ? cur_[static_cast<size_t>(var)] : sh_[static_cast<size_t>(e.outs[i - nc - nb])];
      ins.push_back(reshard(local_[static_cast<size_t>(var)], g_.type(var), cur_[static_cast<size_t>(var)], want));
      lay.push_back(want);
    }
    std::vector<Sharding> carries(lay.begin() + static_cast<std::ptrdiff_t>(nc + nb), lay.end());
    std::vector<Sharding> cond_in(lay.begin(), lay.begin() + static_cast<std::ptrdiff_t>(nc));
    cond_in.insert(cond_in.end(), carries.begin(), carries.end());
    std::vector<Sharding> body_in(lay.begin() + static_cast<std::ptrdiff_t>(nc), lay.begin() + static_cast<std::ptrdiff_t>(nc + nb));
    body_in.insert(body_in.end(), carries.begin(), carries.end());
    Params q = e.params;
    q.regions = {partitioned(*e.params.regions.at(0), cond_in, {Sharding::replicated(mesh_, 0)}, nullptr),
                 partitioned(*e.params.regions.at(1), body_in,
                             std::vector<std::optional<Sharding>>(carries.begin(), carries.end()), nullptr)};
    emit_control(e, std::move(q), ins, carries);
  }

  // cond (ins: pred, the true branch's operands (count), the false branch's): the predicate is
  // replicated (every device takes the same branch); the operands stay as they lie; the false
  // branch returns its results laid out as the true branch's.
  void cond_equation(const Eqn& e) {
    const size_t nt = static_cast<size_t>(e.params.count);
    std::vector<int> ins;
    std::vector<Sharding> lay;
    for (size_t i = 0; i < e.ins.size(); ++i) {
      const int var = e.ins[i];
      const Sharding want = i == 0 ? Sharding::replicated(mesh_, g_.type(var).shape.size()) : cur_[static_cast<size_t>(var)];
      ins.push_back(reshard(local_[static_cast<size_t>(var)], g_.type(var), cur_[static_cast<size_t>(var)], want));
      lay.push_back(want);
    }
    std::vector<Sharding> made;
    Params q = e.params;
    auto on_true = partitioned(*e.params.regions.at(0), std::vector<Sharding>(lay.begin() + 1, lay.begin() + 1 + static_cast<std::ptrdiff_t>(nt)),
                               std::vector<std::optional<Sharding>>(e.outs.size()), &made);
    auto on_false = partitioned(*e.params.regions.at(1), std::vector<Sharding>(lay.begin() + 1 + static_cast<std::ptrdiff_t>(nt), lay.end()),
                                std::vector<std::optional<Sharding>>(made.begin(), made.end()), nullptr);
    q.regions = {on_true, on_false};
    emit_control(e, std::move(q), ins, made);
  }

  // The equation's params on local shapes.
  Params local_params(const Eqn& e, const std::vector<Sharding>& made, const std::vector<Factor>& factors,
                      const std::vector<std::vector<int>>& axes) const {
    Params q = e.params;
    if (e.prim == Prim::pallas_call) {
      // The same kernel over this device's slice of the split grid axes, on its pieces.
      bool split = false;
      for (size_t f = 0; f < factors.size(); ++f) split = split || (factors[f].grid_axis >= 0 && !axes[f].empty());
      if (!split) return q;
      for (size_t o = 0; o < made.size(); ++o) q.out_types.at(o).shape = made[o].local_shape(g_.type(e.outs[o]).shape);
      // `call` over this device's slice of each split grid axis (factor f's at axis_of[f]).
      auto local_call = [&](const detail::CallImpl& call, const std::vector<int>& axis_of) {
        CallOptions options = call.options;
        for (size_t f = 0; f < factors.size(); ++f)
          if (axis_of[f] >= 0) options.grid.at(static_cast<size_t>(axis_of[f])) /= group_size(axes[f]);
        std::vector<ShapeDtype> outs = call.out_shapes;
        for (size_t o = 0; o < made.size(); ++o) outs.at(o).shape = q.out_types.at(o).shape;
        return detail::make_call(call.kernel, std::move(outs), std::move(options));
      };
      std::vector<int> split_axis(factors.size(), -1);
      for (size_t f = 0; f < factors.size(); ++f)
        if (factors[f].grid_axis >= 0 && !axes[f].empty()) split_axis[f] = factors[f].grid_axis;
      const auto* callee = static_cast<const detail::CallImpl*>(q.callee.get());
      if (callee->choices.empty()) {
        q.callee = local_call(*callee, split_axis);
        return q;
      }
      // An autotune was split as its first candidate: each candidate whose grid splits the same
      // way (a grid axis whose blocks follow the same operand and result dimensions, divisible by
      // the group) stays a candidate, over its own slice.
      std::vector<std::string> labels;
      std::vector<std::shared_ptr<detail::CallImpl>> calls;
      for (size_t i = 0; i < callee->choices.size(); ++i) {
        const detail::CallImpl& c = *callee->choices[i];
        if (c.inner || !c.choices.empty()) continue;
        std::vector<std::vector<std::pair<int, int>>> dims = pallas_grid_dims(&c, e, g_);
        for (auto& d : dims) std::sort(d.begin(), d.end());
        std::vector<int> axis_of(factors.size(), -1);
        bool same = true;
        for (size_t f = 0; f < factors.size() && same; ++f) {
          if (split_axis[f] < 0) continue;
          std::vector<std::pair<int, int>> want = factors[f].dims;
          std::sort(want.begin(), want.end());
          for (size_t a = 0; a < dims.size() && axis_of[f] < 0; ++a)
            if (dims[a] == want && c.options.grid.at(a) % group_size(axes[f]) == 0) axis_of[f] = static_cast<int>(a);
          same = axis_of[f] >= 0;
        }
        if (!same) continue;
        labels.push_back(callee->choice_labels[i]);
        calls.push_back(local_call(c, axis_of));
      }
      PL_ASSERT(!calls.empty(), "the first candidate of autotune '", callee->choice_name, "' splits as its factors say");
      q.callee = calls.size() == 1 ? calls[0] : detail::make_choice(callee->choice_name, std::move(labels), std::move(calls));
      return q;
    }
    const Shape out_local = made[0].local_shape(g_.type(e.outs[0]).shape);
    switch (program::family_of(e.prim)) {
      case Family::broadcast: case Family::full: case Family::iota: case Family::reshape: case Family::dynamic_slice:
        q.shape = out_local;
        break;
      case Family::slice:
        for (size_t d = 0; d < out_local.size(); ++d)
          if (!made[0].dims[d].empty()) q.hi[d] = out_local[d];
        break;
      default:
        break;
    }
    return q;
  }

  const Program& g_;
  std::vector<Sharding> sh_;
  std::shared_ptr<const Mesh> mesh_;
  Program l_;
  std::vector<int> local_;     // global var -> local var
  std::vector<Sharding> cur_;  // how the local var lies
  std::map<int, Sharding> wanted_;  // program outputs: the sharding the caller wants
};

}  // namespace

Partitioned partition(const Program& global, const std::vector<Sharding>& inputs,
                      const std::vector<std::optional<Sharding>>& outputs, const std::shared_ptr<const Mesh>& mesh) {
  const Program g = inline_custom_vjps(global);
  std::vector<Sharding> sh = propagate(g, inputs, outputs, mesh);
  Partitioner p(g, sh, mesh);
  return p.run(inputs, outputs);
}

}  // namespace palladium::sharding
