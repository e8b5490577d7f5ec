// The sharding rule of every primitive, named in prims.def: the factors of an equation, i.e. which
// dimensions of its operands (value index < number of operands) and results (value index counted
// on from there) are one index space. Dimensions in no factor stay whole on every device.
#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "core/grid_mapping.h"
#include "ir/ir.h"
#include "program/families.h"
#include "sharding/sharding.h"

namespace palladium::sharding {

using program::Eqn;
using program::Prim;
using program::Program;

namespace {

using Factors = std::vector<Factor>;

int operands(const Eqn& e) { return static_cast<int>(e.ins.size()); }
const Shape& in_shape(const Eqn& e, const Program& p, size_t i) { return p.type(e.ins[i]).shape; }
const Shape& out_shape(const Eqn& e, const Program& p, size_t i) { return p.type(e.outs[i]).shape; }

// NumPy broadcasting: result dimension i and every operand dimension aligned to it from the right
// with the same size (an operand's size-1 dimension that broadcasts is not part of it).
Factors factors_elementwise(const Eqn& e, const Program& p) {
  const Shape& out = out_shape(e, p, 0);
  const int r = static_cast<int>(out.size());
  Factors fs;
  for (int i = 0; i < r; ++i) {
    Factor f;
    for (int k = 0; k < operands(e); ++k) {
      const Shape& s = in_shape(e, p, static_cast<size_t>(k));
      const int j = i - (r - static_cast<int>(s.size()));
      if (j >= 0 && s[static_cast<size_t>(j)] == out[static_cast<size_t>(i)]) f.dims.push_back({k, j});
    }
    f.dims.push_back({operands(e), i});
    fs.push_back(f);
  }
  return fs;
}

Factors factors_full(const Eqn& e, const Program& p) {
  Factors fs;
  for (int i = 0; i < static_cast<int>(out_shape(e, p, 0).size()); ++i) fs.push_back({{{0, i}}, false});
  return fs;
}

// Along its axis an iota's values depend on the position: that dimension stays whole.
Factors factors_iota(const Eqn& e, const Program& p) {
  Factors fs;
  for (int i = 0; i < static_cast<int>(out_shape(e, p, 0).size()); ++i)
    if (i != e.params.axis) fs.push_back({{{0, i}}, false});
  return fs;
}

bool reduced(const Eqn& e, int d, size_t rank) {
  for (int64_t a : e.params.axes)
    if ((a < 0 ? a + static_cast<int64_t>(rank) : a) == d) return true;
  return false;
}

Factors reduce_factors(const Eqn& e, const Program& p, bool split_reduced) {
  const size_t rank = in_shape(e, p, 0).size();
  Factors fs;
  int o = 0;
  for (int d = 0; d < static_cast<int>(rank); ++d) {
    if (!reduced(e, d, rank)) fs.push_back({{{0, d}, {1, o++}}, false});
    else if (split_reduced) fs.push_back({{{0, d}}, true});
  }
  return fs;
}
// A sum, max or min over a split dimension is a partial result per device, then combined.
Factors factors_reduce(const Eqn& e, const Program& p) { return reduce_factors(e, p, true); }
// The position of an extremum is not combined that way: the reduced dimension stays whole.
Factors factors_argreduce(const Eqn& e, const Program& p) { return reduce_factors(e, p, false); }

// (..., m, k) @ (..., k, n): batch, m and n carry over; k is contracting (partial sums).
Factors factors_matmul(const Eqn& e, const Program& p) {
  const int r = static_cast<int>(in_shape(e, p, 0).size());
  Factors fs;
  for (int d = 0; d < r - 2; ++d) fs.push_back({{{0, d}, {1, d}, {2, d}}, false});
  fs.push_back({{{0, r - 2}, {2, r - 2}}, false});
  fs.push_back({{{1, r - 1}, {2, r - 1}}, false});
  fs.push_back({{{0, r - 1}, {1, r - 2}}, true});
  return fs;
}

// Dimensions group where the running element counts of input and output meet; within a group the
// major (first non-unit) input and output dimensions can be split alike: the local reshape of
// (a/k, rest) into (b/k, rest') is then the same reshape of the pieces.
Factors factors_reshape(const Eqn& e, const Program& p) {
  const Shape& in = in_shape(e, p, 0);
  const Shape& out = out_shape(e, p, 0);
  Factors fs;
  size_t i = 0, j = 0;
  while (i < in.size() && j < out.size()) {
    while (i < in.size() && in[i] == 1) ++i;
    while (j < out.size() && out[j] == 1) ++j;
    if (i >= in.size() || j >= out.size()) break;
    fs.push_back({{{0, static_cast<int>(i)}, {1, static_cast<int>(j)}}, false});
    int64_t a = in[i++], b = out[j++];
    while (a != b) {
      if (a < b) a *= in.at(i++);
      else b *= out.at(j++);
    }
  }
  return fs;
}

Factors factors_transpose(const Eqn& e, const Program& p) {
  Factors fs;
  for (int i = 0; i < static_cast<int>(out_shape(e, p, 0).size()); ++i)
    fs.push_back({{{0, static_cast<int>(e.params.axes[static_cast<size_t>(i)])}, {1, i}}, false});
  return fs;
}

Factors factors_concatenate(const Eqn& e, const Program& p) {
  Factors fs;
  for (int d = 0; d < static_cast<int>(out_shape(e, p, 0).size()); ++d) {
    if (d == e.params.axis) continue;
    Factor f;
    for (int k = 0; k < operands(e); ++k) f.dims.push_back({k, d});
    f.dims.push_back({operands(e), d});
    fs.push_back(f);
  }
  return fs;
}

// slice, pad, dynamic_slice, dynamic_update_slice: the dimensions they take whole.
Factors factors_unchanged_dims(const Eqn& e, const Program& p) {
  const Shape& in = in_shape(e, p, 0);
  const program::Params& q = e.params;
  Factors fs;
  for (int d = 0; d < static_cast<int>(in.size()); ++d) {
    const size_t u = static_cast<size_t>(d);
    bool whole = false;
    switch (e.prim) {
      case Prim::slice: whole = q.lo[u] == 0 && q.hi[u] == in[u] && q.step[u] == 1; break;
      case Prim::pad: whole = q.lo[u] == 0 && q.hi[u] == 0; break;
      case Prim::dynamic_slice: whole = q.shape[u] == in[u]; break;
      case Prim::dynamic_update_slice: whole = in_shape(e, p, 1)[u] == in[u]; break;
      default: break;
    }
    if (!whole) continue;
    Factor f{{{0, d}}, false};
    if (e.prim == Prim::dynamic_update_slice) f.dims.push_back({1, d});
    f.dims.push_back({operands(e), d});
    fs.push_back(f);
  }
  return fs;
}

// pallas_call: grid axis g is a factor when every block's origin along some dimensions is exactly
// program_id(g) * block (the index_map returns program_id(g) there), the grid covers those
// dimensions exactly, every output follows g (no program of g revisits another's output), and
// nothing else in the kernel reads program_id(g) or num_programs(g), and g is parallel. Then each
// device can run its slice of g on its own pieces, unchanged: the index maps give local block indices.
std::vector<std::vector<std::pair<int, int>>> grid_factor_dims(const detail::CallImpl& call,
                                                               const detail::CallDesc& d, const ir::Kernel& k) {
  std::map<ir::ValueId, const ir::Inst*> def;
  std::map<ir::ValueId, int> uses;
  std::vector<const ir::Inst*> pid_insts;
  bool reads_num_programs = false;
  std::function<void(const ir::Region&)> walk = [&](const ir::Region& r) {
    for (const ir::Inst& i : r.body) {
      for (ir::ValueId v : i.results) def[v] = &i;
      for (ir::ValueId v : i.operands) ++uses[v];
      if (i.op == ir::Op::ProgramId) pid_insts.push_back(&i);
      if (i.op == ir::Op::NumPrograms) reads_num_programs = true;
      for (const ir::Region& sub : i.regions) walk(sub);
    }
  };
  walk(k.body);
  auto const_int = [&](ir::ValueId v, int64_t* out) {
    auto it = def.find(v);
    if (it == def.end() || it->second->op != ir::Op::Const) return false;
    *out = is_float(k.type(v).dtype) ? static_cast<int64_t>(it->second->f) : it->second->i0;
    return true;
  };
  // The grid axis an origin follows (-1: none); `via` receives the mul it goes through, if any.
  auto follows = [&](ir::ValueId origin, int64_t block, const ir::Inst** via) -> int {
    auto it = def.find(origin);
    if (it == def.end()) return -1;
    const ir::Inst* i = it->second;
    *via = nullptr;
    if (i->op == ir::Op::ProgramId) return block == 1 ? static_cast<int>(i->i0) : -1;
    if (i->op != ir::Op::Mul || i->operands.size() != 2) return -1;
    for (int side = 0; side < 2; ++side) {
      auto p = def.find(i->operands[static_cast<size_t>(side)]);
      int64_t c = 0;
      if (p != def.end() && p->second->op == ir::Op::ProgramId && const_int(i->operands[static_cast<size_t>(1 - side)], &c) &&
          c == block) {
        *via = i;
        return static_cast<int>(p->second->i0);
      }
    }
    return -1;
  };
  std::vector<std::vector<std::pair<int, int>>> out(k.grid.size());
  if (reads_num_programs || call.inner) return out;
  // Operand index of each ref in the equation (None inputs are not operands).
  std::vector<int> operand_of_input(d.inputs.size(), -1);
  int next = 0;
  for (size_t i = 0; i < d.inputs.size(); ++i)
    if (d.inputs[i]) operand_of_input[i] = next++;
  const int num_operands = next;
  for (size_t g = 0; g < k.grid.size(); ++g) {
    if (k.is_sequential(g)) continue;  // its programs run in order on one device
    std::set<const ir::Inst*> origin_muls;  // the muls that compute origins
    std::vector<std::pair<int, int>> dims;
    bool ok = true;
    for (const ir::RefParam& r : k.refs) {
      if (r.is_output && r.operand >= static_cast<int>(d.num_results())) continue;  // scratch: per device anyway
      int following = 0;
      for (size_t dim = 0; dim < r.origin.size(); ++dim) {
        const ir::Inst* via = nullptr;
        if (follows(r.origin[dim], r.block_shape[dim], &via) != static_cast<int>(g)) continue;
        ++following;
        if (via) origin_muls.insert(via);
        ok = ok && r.array_shape[dim] == k.grid[g] * r.block_shape[dim] && uses[r.origin[dim]] == 0;
        const int value = r.is_output ? num_operands + r.operand : operand_of_input.at(static_cast<size_t>(r.operand));
        dims.push_back({value, static_cast<int>(dim)});
      }
      if (following > 1 || (r.is_output && following == 0)) ok = false;
    }
    // program_id(g) feeds nothing but those origins.
    for (const ir::Inst* p : pid_insts) {
      if (p->i0 != static_cast<int64_t>(g)) continue;
      int allowed = 0;
      for (const ir::Inst* mul : origin_muls) {
        for (ir::ValueId v : mul->operands) allowed += v == p->results[0] ? 1 : 0;
      }
      ok = ok && uses[p->results[0]] == allowed;
    }
    if (ok && !dims.empty()) out[g] = std::move(dims);
  }
  return out;
}

}  // namespace

std::vector<std::vector<std::pair<int, int>>> pallas_grid_dims(const detail::CallImpl* call, const Eqn& e,
                                                               const Program& p) {
  if (call == nullptr || call->inner || !call->choices.empty()) return {};
  // Traced once per call and operand types (rules are asked several times per partitioning).
  detail::InputTypes types;
  size_t next = 0;
  const size_t total = e.ins.size() + e.params.axes.size();
  for (size_t i = 0; i < total; ++i) {
    if (std::find(e.params.axes.begin(), e.params.axes.end(), static_cast<int64_t>(i)) != e.params.axes.end()) {
      types.push_back(std::nullopt);
      continue;
    }
    const program::Type& t = p.type(e.ins.at(next++));
    types.push_back(ShapeDtype(t.shape, t.dtype));
  }
  static std::mutex mu;
  static std::map<std::pair<const void*, std::string>, std::vector<std::vector<std::pair<int, int>>>> cache;
  std::string key;
  for (const auto& t : types) key += t ? std::string(dtype_short_name(t->dtype)) + shape_str(t->shape) : "none";
  std::vector<std::vector<std::pair<int, int>>> grid_dims;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find({call, key});
    if (it != cache.end()) grid_dims = it->second, found = true;
  }
  if (!found) {
    const detail::CallDesc d = detail::describe(*call, types);
    grid_dims = grid_factor_dims(*call, d, detail::trace_kernel(*call, d));
    std::lock_guard<std::mutex> lock(mu);
    cache[{call, key}] = grid_dims;
  }
  return grid_dims;
}

namespace {

Factors factors_pallas_call(const Eqn& e, const Program& p) {
  const auto* call = static_cast<const detail::CallImpl*>(e.params.callee.get());
  // An autotune's candidates compute one function: the first one's grid tells how it splits (the
  // partitioner keeps the candidates whose grids split the same way).
  while (call != nullptr && !call->choices.empty()) call = call->choices[0].get();
  const std::vector<std::vector<std::pair<int, int>>> grid_dims = pallas_grid_dims(call, e, p);
  Factors fs;
  for (size_t g = 0; g < grid_dims.size(); ++g)
    if (!grid_dims[g].empty()) fs.push_back({grid_dims[g], false, static_cast<int>(g)});
  return fs;
}

// scan (ins: consts, carries, xs; outs: carries, ys): a carry's result lies as its initial value
// (the partitioner makes the body keep it so); the time dimension stays whole. For propagation
// only, a ys that has the shape of an xs (or of a carry, per step) is guessed to lie as that one;
// the partitioner takes the body's real layout and reshards if the guess was wrong.
Factors factors_scan(const Eqn& e, const Program& p) {
  const int n_in = operands(e);
  const int n_const = static_cast<int>(e.params.count2), n_carry = static_cast<int>(e.params.count);
  Factors fs;
  for (int k = 0; k < n_carry; ++k)
    for (int d = 0; d < static_cast<int>(in_shape(e, p, static_cast<size_t>(n_const + k)).size()); ++d)
      fs.push_back({{{n_const + k, d}, {n_in + k, d}}, false});
  for (int j = n_carry; j < static_cast<int>(e.outs.size()); ++j) {
    const Shape& ys = out_shape(e, p, static_cast<size_t>(j));
    for (int i = n_const + n_carry; i < n_in; ++i) {
      if (in_shape(e, p, static_cast<size_t>(i)) != ys) continue;
      for (int d = 1; d < static_cast<int>(ys.size()); ++d) fs.push_back({{{i, d}, {n_in + j, d}}, false});
      break;
    }
  }
  return fs;
}

// while_loop (ins: cond consts, body consts, carries; outs: carries): a carry's result lies as its
// initial value (the partitioner makes the body keep it so).
Factors factors_while(const Eqn& e, const Program& p) {
  const int n_in = operands(e);
  const int first = static_cast<int>(e.params.count + e.params.count2);
  Factors fs;
  for (int k = 0; first + k < n_in; ++k)
    for (int d = 0; d < static_cast<int>(in_shape(e, p, static_cast<size_t>(first + k)).size()); ++d)
      fs.push_back({{{first + k, d}, {n_in + k, d}}, false});
  return fs;
}

// cond (ins: pred, the true branch's operands (count), the false branch's): for propagation only,
// a result with the shape of a true-branch operand is guessed to lie as it; the partitioner takes
// the branches' real layout.
Factors factors_cond(const Eqn& e, const Program& p) {
  const int n_in = operands(e), n_true = static_cast<int>(e.params.count);
  Factors fs;
  for (int o = 0; o < static_cast<int>(e.outs.size()); ++o) {
    const Shape& out = out_shape(e, p, static_cast<size_t>(o));
    for (int i = 1; i <= n_true; ++i) {
      if (in_shape(e, p, static_cast<size_t>(i)) != out) continue;
      for (int d = 0; d < static_cast<int>(out.size()); ++d) fs.push_back({{{i, d}, {n_in + o, d}}, false});
      break;
    }
  }
  return fs;
}

Factors factors_none(const Eqn&, const Program&) { return {}; }

const FactorRule kRules[] = {
#define PL_PRIM(name, family, vjp, batch, shard) &shard,
#include "program/prims.def"
#undef PL_PRIM
};

}  // namespace

FactorRule factor_rule(Prim p) { return kRules[static_cast<size_t>(p)]; }

const char* partial_reduction(Prim p) {
  switch (p) {
    case Prim::reduce_max: return "max";
    case Prim::reduce_min: return "min";
    default: return "sum";  // reduce_sum, matmul
  }
}

}  // namespace palladium::sharding
