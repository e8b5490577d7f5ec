// Rerolling: a run of identical iterations that a C++ loop unrolled while it was traced (the IndRNN
// blog's naive loop under jit, as Python's loop is under jax.jit) becomes one scan again. Scan
// fusion then runs it as one kernel with the time loop inside, and the compiled program no longer
// grows with the trip count.
//
// A run is R >= kMinTrips consecutive blocks of L equations with equal signatures. Every operand of
// a block is classified the same way in every block: made earlier in the same block (internal), by
// the previous block (a carry; block 0 reads its initial value instead), or outside the run and the
// same in every block (loop-invariant). A slice whose start along axis 0 advances by one per block
// of one outside array reads that array as the scan's xs. Values of the run read after it are the
// last block's carries (the scan's final carry) or the blocks' pieces of one concatenate along axis
// 0 in order (the scan's ys, reshaped). Anything else leaves the run unrolled, as does a body that
// would not be one elementwise kernel (where rerolling would only trade launches for a host loop).
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

#include "program/families.h"
#include "transforms/transforms.h"

namespace palladium::program {

namespace {

constexpr size_t kMinTrips = 4;     // shorter runs gain little over the unrolled code
constexpr size_t kMaxBodyEqns = 256;
constexpr size_t kPeriodCandidates = 8;

// A slice's params with its start and limit along axis 0 replaced by the extent: the slices of
// x[t] for different t then share one signature.
Params masked(const Eqn& e) {
  Params q = e.params;
  if (e.prim == Prim::slice && !q.lo.empty()) {
    q.hi[0] -= q.lo[0];
    q.lo[0] = 0;
  }
  return q;
}

std::string signature(const Program& p, const Eqn& e) {
  std::string s = std::to_string(static_cast<int>(e.prim)) + masked(e).key();
  for (int v : e.ins) s += "|" + type_str(p.type(v));
  for (int v : e.outs) s += ">" + type_str(p.type(v));
  return s;
}

struct Pos {
  size_t block, k, o;
};

enum class Kind { internal, carry, invariant, older };
struct Operand {
  Kind kind;
  size_t k = 0, o = 0;  // internal / carry: the defining equation and result within a block
  int var = -1;         // invariant: the outside var
};

// The reading of x[a + i] along axis 0 by block i's slice equation k.
struct XsSlice {
  size_t k;
  int array;
  std::vector<int64_t> lo, hi;  // of the whole run: [a, ...) to [a + R, ...)
};

struct Run {
  size_t start, period, trips;
};

class Reroller {
 public:
  Reroller(const Program& p, Run r) : p_(p), r_(r) {}

  // The program with the run replaced by a scan, or nothing when the run does not qualify.
  std::optional<Program> apply() {
    index_run();
    if (!classify() || !classify_uses()) return std::nullopt;
    std::optional<Program> body = make_body();
    if (!body) return std::nullopt;
    return splice(std::make_shared<Program>(std::move(*body)));
  }

 private:
  const Eqn& eqn(size_t block, size_t k) const { return p_.eqns[r_.start + block * r_.period + k]; }
  size_t end() const { return r_.start + r_.trips * r_.period; }

  void index_run() {
    for (size_t i = 0; i < r_.trips; ++i)
      for (size_t k = 0; k < r_.period; ++k) {
        const Eqn& e = eqn(i, k);
        for (size_t o = 0; o < e.outs.size(); ++o) where_[e.outs[o]] = {i, k, o};
      }
  }

  const Eqn* made_by_full(int v) const {
    for (size_t x = 0; x < r_.start; ++x)
      for (int o : p_.eqns[x].outs)
        if (o == v) return p_.eqns[x].prim == Prim::full ? &p_.eqns[x] : nullptr;
    return nullptr;
  }

  Operand operand_in(size_t i, int v) const {
    auto it = where_.find(v);
    if (it == where_.end()) return {Kind::invariant, 0, 0, v};
    const Pos& d = it->second;
    if (d.block == i) return {Kind::internal, d.k, d.o, -1};
    if (d.block + 1 == i) return {Kind::carry, d.k, d.o, -1};
    return {Kind::older};  // two blocks back: not a loop a scan can express
  }

  // A slice equation whose start along axis 0 is a + i in block i, one row, unit steps.
  std::optional<XsSlice> xs_slice(size_t k) const {
    const Eqn& e0 = eqn(0, k);
    if (e0.prim != Prim::slice || e0.params.lo.empty()) return std::nullopt;
    const int x = e0.ins[0];
    if (where_.count(x)) return std::nullopt;
    for (int64_t s : e0.params.step)
      if (s != 1) return std::nullopt;
    const int64_t a = e0.params.lo[0];
    if (e0.params.hi[0] != a + 1) return std::nullopt;
    for (size_t i = 1; i < r_.trips; ++i) {
      const Eqn& e = eqn(i, k);
      if (e.ins[0] != x || e.params.lo[0] != a + static_cast<int64_t>(i)) return std::nullopt;
    }
    XsSlice s{k, x, e0.params.lo, e0.params.hi};
    s.hi[0] = a + static_cast<int64_t>(r_.trips);
    return s;
  }

  bool classify() {
    ops_.assign(r_.period, {});
    xs_index_.assign(r_.period, -1);
    for (size_t k = 0; k < r_.period; ++k) {
      const Eqn& e0 = eqn(0, k);
      bool same_params = true;
      for (size_t i = 1; i < r_.trips && same_params; ++i) same_params = eqn(i, k).params.key() == e0.params.key();
      if (!same_params) {
        std::optional<XsSlice> s = xs_slice(k);
        if (!s) return false;
        xs_index_[k] = static_cast<int>(xs_.size());
        xs_.push_back(*s);
        continue;
      }
      for (size_t j = 0; j < e0.ins.size(); ++j) {
        const Operand later = operand_in(1, eqn(1, k).ins[j]);
        if (later.kind == Kind::older) return false;
        for (size_t i = 2; i < r_.trips; ++i) {
          const Operand o = operand_in(i, eqn(i, k).ins[j]);
          if (o.kind != later.kind || o.k != later.k || o.o != later.o || o.var != later.var) return false;
        }
        const Operand first = operand_in(0, e0.ins[j]);
        if (later.kind == Kind::carry) {
          if (first.kind != Kind::invariant) return false;
          auto [it, fresh] = carry_init_.emplace(std::make_pair(later.k, later.o), first.var);
          if (!fresh && it->second != first.var) return false;
          if (p_.type(first.var) != p_.type(eqn(0, later.k).outs[later.o])) return false;
        } else if (first.kind != later.kind || first.k != later.k || first.o != later.o || first.var != later.var) {
          return false;
        }
        ops_[k].push_back(later);
      }
    }
    return true;
  }

  // Reads of the run's values after it: the last block's carries, or one concatenate along axis 0
  // of every block's piece, in order.
  bool classify_uses() {
    std::map<int, int> uses;  // var -> number of reads after the run
    for (size_t x = end(); x < p_.eqns.size(); ++x)
      for (int v : p_.eqns[x].ins)
        if (where_.count(v)) ++uses[v];
    for (int v : p_.outputs)
      if (where_.count(v)) ++uses[v];
    for (size_t x = end(); x < p_.eqns.size(); ++x) {
      const Eqn& c = p_.eqns[x];
      if (c.prim != Prim::concatenate || c.params.axis != 0) continue;
      for (size_t j = 0; j + r_.trips <= c.ins.size(); ++j) {
        auto it = where_.find(c.ins[j]);
        if (it == where_.end() || it->second.block != 0) continue;
        const Pos piece = it->second;
        bool whole = true;
        for (size_t i = 0; i < r_.trips && whole; ++i) {
          auto w = where_.find(c.ins[j + i]);
          whole = w != where_.end() && w->second.block == i && w->second.k == piece.k && w->second.o == piece.o;
        }
        if (!whole) continue;
        for (size_t i = 0; i < r_.trips; ++i) --uses[c.ins[j + i]];
        stacked_.push_back({x, j, piece.k, piece.o});
        j += r_.trips - 1;
      }
    }
    for (const auto& [v, n] : uses) {
      if (n <= 0) continue;
      const Pos& d = where_.at(v);
      if (d.block + 1 != r_.trips || !carry_init_.count({d.k, d.o})) return false;
    }
    return true;
  }

  std::optional<Program> make_body() {
    Program b;
    b.name = p_.name + "_rerolled";
    std::map<int, int> invariant_in;  // outside var -> body input (or a constant made inside)
    std::vector<Eqn> constants;         // `full` operands are made again inside the body
    for (const auto& ops : ops_)
      for (const Operand& o : ops) {
        if (o.kind != Kind::invariant || invariant_in.count(o.var)) continue;
        invariant_in[o.var] = b.new_var(p_.type(o.var));
        if (const Eqn* f = made_by_full(o.var)) {
          Eqn c = *f;
          c.outs = {invariant_in[o.var]};
          constants.push_back(std::move(c));
        } else {
          invariants_.push_back(o.var);
        }
      }
    b.eqns = std::move(constants);
    std::map<std::pair<size_t, size_t>, int> carry_in;
    for (const auto& [ko, init] : carry_init_) {
      carries_.push_back(ko);
      carry_in[ko] = b.new_var(p_.type(init));
    }
    std::vector<int> xs_in;
    for (const XsSlice& s : xs_) {
      Type t = p_.type(eqn(0, s.k).outs[0]);
      t.shape.erase(t.shape.begin());
      xs_in.push_back(b.new_var(t));
    }
    for (int v : invariants_) b.inputs.push_back(invariant_in[v]);
    for (const auto& ko : carries_) b.inputs.push_back(carry_in[ko]);
    b.inputs.insert(b.inputs.end(), xs_in.begin(), xs_in.end());

    std::map<std::pair<size_t, size_t>, int> made;  // (k, o) -> body var
    const size_t first = b.eqns.size();               // block equation k is body equation first + k
    for (size_t k = 0; k < r_.period; ++k) {
      const Eqn& src = eqn(0, k);
      Eqn e;
      if (xs_index_[k] >= 0) {
        e.prim = Prim::reshape;
        e.params.shape = p_.type(src.outs[0]).shape;
        e.ins = {xs_in[static_cast<size_t>(xs_index_[k])]};
      } else {
        e.prim = src.prim;
        e.params = src.params;
        for (const Operand& o : ops_[k])
          e.ins.push_back(o.kind == Kind::internal ? made.at({o.k, o.o})
                          : o.kind == Kind::carry  ? carry_in.at({o.k, o.o})
                                                   : invariant_in.at(o.var));
      }
      for (size_t o = 0; o < src.outs.size(); ++o) {
        const int v = b.new_var(p_.type(src.outs[o]));
        e.outs.push_back(v);
        made[{k, o}] = v;
      }
      b.eqns.push_back(std::move(e));
    }
    for (const auto& ko : carries_) b.outputs.push_back(made.at(ko));
    // A piece that is a reshape of a body value (a stacked row made [1, F]) is stacked before the
    // reshape, which the concatenate's reshape after the scan absorbs.
    for (const Stacked& s : stacked_) {
      const Eqn& e = b.eqns[first + s.k];
      b.outputs.push_back(e.prim == Prim::reshape && xs_index_[s.k] < 0 ? e.ins[0] : made.at({s.k, s.o}));
    }
    b = optimize(fold_reshapes(b));
    for (const Eqn& e : b.eqns)
      if (!is_elementwise(e.prim) || e.prim == Prim::iota) return std::nullopt;
    return b;
  }

  // A reshape of a reshape reads the first one's operand; a reshape to its operand's shape is that
  // operand. (x[t] is a row slice reshaped twice: [1, F] from the xs row, then back to [F].)
  static Program fold_reshapes(Program b) {
    std::unordered_map<int, int> rename, reshaped_from;
    auto resolve = [&](int v) {
      auto it = rename.find(v);
      return it == rename.end() ? v : it->second;
    };
    std::vector<Eqn> kept;
    for (Eqn e : b.eqns) {
      for (int& v : e.ins) v = resolve(v);
      if (e.prim == Prim::reshape) {
        if (auto it = reshaped_from.find(e.ins[0]); it != reshaped_from.end()) e.ins[0] = it->second;
        if (b.type(e.ins[0]) == b.type(e.outs[0])) {
          rename[e.outs[0]] = e.ins[0];
          continue;
        }
        reshaped_from[e.outs[0]] = e.ins[0];
      }
      kept.push_back(std::move(e));
    }
    b.eqns = std::move(kept);
    for (int& v : b.outputs) v = resolve(v);
    return b;
  }

  Program splice(std::shared_ptr<const Program> body) {
    Program q = p_;
    std::vector<Eqn> before(p_.eqns.begin(), p_.eqns.begin() + static_cast<std::ptrdiff_t>(r_.start));
    const int64_t trips = static_cast<int64_t>(r_.trips);
    // xs: the rows a .. a + R of each sliced array (the array itself when that is all of it).
    std::vector<int> xs_vars;
    for (const XsSlice& s : xs_) {
      const Type& whole = p_.type(s.array);
      bool all = true;
      for (size_t d = 0; d < whole.shape.size(); ++d) all = all && s.lo[d] == 0 && s.hi[d] == whole.shape[d];
      if (all) {
        xs_vars.push_back(s.array);
        continue;
      }
      Eqn sl;
      sl.prim = Prim::slice;
      sl.params.lo = s.lo;
      sl.params.hi = s.hi;
      sl.params.step.assign(s.lo.size(), 1);
      Type t{{}, whole.dtype};
      for (size_t d = 0; d < s.lo.size(); ++d) t.shape.push_back(s.hi[d] - s.lo[d]);
      sl.ins = {s.array};
      sl.outs = {q.new_var(t)};
      xs_vars.push_back(sl.outs[0]);
      before.push_back(std::move(sl));
    }
    Eqn scan;
    scan.prim = Prim::scan;
    scan.params.count = static_cast<int64_t>(carries_.size());
    scan.params.count2 = static_cast<int64_t>(invariants_.size());
    scan.params.axis = trips;
    scan.ins = invariants_;
    for (const auto& ko : carries_) scan.ins.push_back(carry_init_.at(ko));
    scan.ins.insert(scan.ins.end(), xs_vars.begin(), xs_vars.end());
    std::unordered_map<int, int> rename;  // last block's carries -> the scan's final carries
    for (size_t c = 0; c < carries_.size(); ++c) {
      const Type t = body->type(body->outputs[c]);
      scan.params.out_types.push_back(t);
      const int v = q.new_var(t);
      scan.outs.push_back(v);
      rename[eqn(r_.trips - 1, carries_[c].first).outs[carries_[c].second]] = v;
    }
    std::vector<int> ys;
    for (size_t j = 0; j < stacked_.size(); ++j) {
      Type t = body->type(body->outputs[carries_.size() + j]);
      t.shape.insert(t.shape.begin(), trips);
      scan.params.out_types.push_back(t);
      ys.push_back(q.new_var(t));
      scan.outs.push_back(ys.back());
    }
    scan.params.regions.push_back(std::move(body));
    before.push_back(std::move(scan));
    // Each stacked piece list becomes one operand of its concatenate: ys reshaped to the pieces
    // laid end to end along axis 0.
    std::map<size_t, std::vector<std::pair<size_t, int>>> concat_parts;  // eqn -> (operand index, var)
    for (size_t j = 0; j < stacked_.size(); ++j) {
      const Stacked& s = stacked_[j];
      Type piece = p_.type(eqn(0, s.k).outs[s.o]);
      Shape whole = piece.shape;
      whole[0] *= trips;
      if (whole == q.type(ys[j]).shape) {  // ys is already the concatenation
        concat_parts[s.concat].push_back({s.operand, ys[j]});
        continue;
      }
      Eqn re;
      re.prim = Prim::reshape;
      re.params.shape = piece.shape;
      re.params.shape[0] *= trips;
      re.ins = {ys[j]};
      re.outs = {q.new_var({re.params.shape, piece.dtype})};
      concat_parts[s.concat].push_back({s.operand, re.outs[0]});
      before.push_back(std::move(re));
    }
    for (size_t x = end(); x < p_.eqns.size(); ++x) {
      Eqn e = p_.eqns[x];
      if (auto it = concat_parts.find(x); it != concat_parts.end()) {
        std::vector<int> ins;
        size_t j = 0;
        for (const auto& [at, var] : it->second) {
          ins.insert(ins.end(), e.ins.begin() + static_cast<std::ptrdiff_t>(j), e.ins.begin() + static_cast<std::ptrdiff_t>(at));
          ins.push_back(var);
          j = at + r_.trips;
        }
        ins.insert(ins.end(), e.ins.begin() + static_cast<std::ptrdiff_t>(j), e.ins.end());
        e.ins = std::move(ins);
        if (e.ins.size() == 1) {  // the whole concatenate was the stack
          rename[e.outs[0]] = e.ins[0];
          continue;
        }
      }
      for (int& v : e.ins)
        if (auto r = rename.find(v); r != rename.end()) v = r->second;
      before.push_back(std::move(e));
    }
    for (int& v : q.outputs)
      if (auto r = rename.find(v); r != rename.end()) v = r->second;
    q.eqns = std::move(before);
    return q;
  }

  struct Stacked {
    size_t concat, operand, k, o;
  };

  const Program& p_;
  const Run r_;
  std::unordered_map<int, Pos> where_;
  std::vector<std::vector<Operand>> ops_;
  std::vector<int> xs_index_;
  std::vector<XsSlice> xs_;
  std::map<std::pair<size_t, size_t>, int> carry_init_;
  std::vector<std::pair<size_t, size_t>> carries_;
  std::vector<int> invariants_;
  std::vector<Stacked> stacked_;
};

// The number of consecutive blocks of `period` equations from `start` whose signatures repeat.
size_t trips_of(const std::vector<int>& sig, size_t start, size_t period) {
  size_t r = 1;
  while (start + (r + 1) * period <= sig.size()) {
    for (size_t k = 0; k < period; ++k)
      if (sig[start + r * period + k] != sig[start + k]) return r;
    ++r;
  }
  return r;
}

Program flatten_concatenates(const Program& in) {
  Program p = in;
  std::vector<int> uses(p.types.size(), 0), producer(p.types.size(), -1);
  for (int v : p.outputs) uses[static_cast<size_t>(v)] += 2;  // returned: keep it
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    for (int v : p.eqns[i].ins) ++uses[static_cast<size_t>(v)];
    for (int v : p.eqns[i].outs) producer[static_cast<size_t>(v)] = static_cast<int>(i);
  }
  std::vector<bool> inlined(p.eqns.size(), false);
  for (Eqn& e : p.eqns) {
    if (e.prim != Prim::concatenate) continue;
    std::vector<int> ins;
    for (int v : e.ins) {
      const int from = producer[static_cast<size_t>(v)];
      const Eqn* inner = from >= 0 ? &p.eqns[static_cast<size_t>(from)] : nullptr;
      if (inner && inner->prim == Prim::concatenate && inner->params.axis == e.params.axis && uses[static_cast<size_t>(v)] == 1) {
        ins.insert(ins.end(), inner->ins.begin(), inner->ins.end());
        inlined[static_cast<size_t>(from)] = true;
      } else {
        ins.push_back(v);
      }
    }
    e.ins = std::move(ins);
  }
  std::vector<Eqn> kept;
  for (size_t i = 0; i < p.eqns.size(); ++i)
    if (!inlined[i]) kept.push_back(std::move(p.eqns[i]));
  p.eqns = std::move(kept);
  return p;
}

// The inverse for what is left after rerolling: concatenates of more operands than a generated
// kernel takes are split into chunks again.
Program chunk_concatenates(const Program& in) {
  Program p = in;
  std::vector<Eqn> out;
  std::function<void(Eqn)> emit = [&](Eqn e) {
    if (e.prim != Prim::concatenate || e.ins.size() <= kMaxConcatOperands) {
      out.push_back(std::move(e));
      return;
    }
    const size_t axis = static_cast<size_t>(e.params.axis);
    std::vector<int> parts;
    for (size_t i = 0; i < e.ins.size(); i += kMaxConcatOperands) {
      Eqn c;
      c.prim = Prim::concatenate;
      c.params = e.params;
      c.ins.assign(e.ins.begin() + static_cast<std::ptrdiff_t>(i),
                   e.ins.begin() + static_cast<std::ptrdiff_t>(std::min(e.ins.size(), i + kMaxConcatOperands)));
      if (c.ins.size() == 1) {
        parts.push_back(c.ins[0]);
        continue;
      }
      Type t = p.type(c.ins[0]);
      t.shape[axis] = 0;
      for (int v : c.ins) t.shape[axis] += p.type(v).shape[axis];
      c.outs = {p.new_var(t)};
      parts.push_back(c.outs[0]);
      out.push_back(std::move(c));
    }
    e.ins = std::move(parts);
    emit(std::move(e));
  };
  for (const Eqn& e : in.eqns) emit(e);
  p.eqns = std::move(out);
  return p;
}

// The order the search sees: equations computed from constants alone (`full` and what is made of
// it) first, and each reshape right after the equation that makes its operand, so that the
// iterations of a loop are contiguous blocks (jnp::stack reshapes every row after the loop; relu's
// zero is made in the first iteration only, CSE sharing it with the others).
// Also: a concatenate of concatenates along one axis becomes one (jnp::concatenate chunks long
// lists, so a stack of T rows arrives as a tree).
Program canonical_order(const Program& in) {
  Program p = flatten_concatenates(in);
  std::vector<bool> constant(p.types.size(), false);
  for (int v : p.const_vars) constant[static_cast<size_t>(v)] = true;
  std::vector<int> producer(p.types.size(), -1);
  std::vector<size_t> front, rest;
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    bool c = is_elementwise(e.prim) || e.prim == Prim::reshape;
    for (int v : e.ins) c = c && constant[static_cast<size_t>(v)];
    for (int v : e.outs) {
      constant[static_cast<size_t>(v)] = c;
      producer[static_cast<size_t>(v)] = static_cast<int>(i);
    }
    (c ? front : rest).push_back(i);
  }
  std::vector<std::vector<size_t>> attached(p.eqns.size());
  std::vector<bool> is_attached(p.eqns.size(), false);
  for (size_t i : rest) {
    const Eqn& e = p.eqns[i];
    if (e.prim != Prim::reshape || constant[static_cast<size_t>(e.ins[0])]) continue;
    if (const int from = producer[static_cast<size_t>(e.ins[0])]; from >= 0) {
      attached[static_cast<size_t>(from)].push_back(i);
      is_attached[i] = true;
    }
  }
  Program q = p;
  q.eqns.clear();
  std::function<void(size_t)> emit = [&](size_t i) {
    q.eqns.push_back(p.eqns[i]);
    for (size_t r : attached[i]) emit(r);
  };
  for (size_t i : front) q.eqns.push_back(p.eqns[i]);
  for (size_t i : rest)
    if (!is_attached[i]) emit(i);
  return q;
}

}  // namespace

Program reroll_loops(const Program& in) {
  Program p = canonical_order(in);
  bool rerolled = false;
  size_t s = 0;
  while (s < p.eqns.size()) {
    std::unordered_map<std::string, int> ids;
    std::vector<int> sig;
    for (const Eqn& e : p.eqns) sig.push_back(ids.emplace(signature(p, e), static_cast<int>(ids.size())).first->second);
    std::unordered_map<int, std::vector<size_t>> at;
    for (size_t i = 0; i < sig.size(); ++i) at[sig[i]].push_back(i);
    bool changed = false;
    for (; s < p.eqns.size() && !changed; ++s) {
      const std::vector<size_t>& same = at[sig[s]];
      auto next = std::upper_bound(same.begin(), same.end(), s);
      size_t skip = 0;
      for (size_t c = 0; c < kPeriodCandidates && next != same.end() && !changed; ++c, ++next) {
        const size_t period = *next - s;
        if (period > kMaxBodyEqns) break;
        const size_t trips = trips_of(sig, s, period);
        if (trips < kMinTrips) continue;
        // The loop may begin a little later (a first iteration that differs, e.g. made a value
        // that the later ones share through CSE): try each start within two blocks.
        for (size_t off = 0; off < 2 * period && !changed; ++off) {
          const size_t t = trips_of(sig, s + off, period);
          if (t < kMinTrips) break;
          if (std::optional<Program> q = Reroller(p, {s + off, period, t}).apply()) {
            p = optimize(*q);
            changed = rerolled = true;
          }
        }
        if (!changed) skip = std::max(skip, trips * period);
      }
      if (!changed && skip > 1) s += skip - 1;
    }
    if (!changed) break;
    s = 0;  // indices moved: search again (a rerolled run no longer repeats)
  }
  return rerolled ? chunk_concatenates(p) : in;
}

}  // namespace palladium::program
