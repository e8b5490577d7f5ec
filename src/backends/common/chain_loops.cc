#include "backends/common/chain_loops.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "palladium/error.h"

namespace palladium::backend {
namespace {

using ir::Inst;
using ir::Op;
using ir::Region;
using ir::ValueId;

void visit(const Region& r, const std::function<void(const Inst&)>& f) {
  for (const Inst& in : r.body) {
    f(in);
    for (const Region& s : in.regions) visit(s, f);
  }
}

void visit_mut(Region& r, const std::function<void(Inst&)>& f) {
  for (Inst& in : r.body) {
    f(in);
    for (Region& s : in.regions) visit_mut(s, f);
  }
}

bool touches(const Inst& in, int ref) {
  if (ir::op_family(in.op) == ir::Family::Memory && in.i0 == ref) return true;
  for (const Region& r : in.regions)
    for (const Inst& s : r.body)
      if (touches(s, ref)) return true;
  return false;
}

// How a ref's block moves along the axis in one array dimension: at step i its origin there is
// `offset` (i * block size, or i for a squeezed dimension), over `extent` elements in all.
struct Walk {
  ValueId offset = -1;
  int64_t extent = 0;
};

class ChainRewrite {
 public:
  explicit ChainRewrite(const ir::Kernel& k) : k_(k) {}

  std::optional<ir::Kernel> run() {
    if (!find_axis()) return std::nullopt;
    bool prints = false;
    visit_mut(k_.body, [&](Inst& in) {
      if (in.op == Op::DebugPrint) prints = true;  // they report program ids
      if (in.op == Op::NumPrograms && in.i0 == static_cast<int64_t>(axis_)) {
        in.op = Op::Const;  // the axis keeps its extent inside the loop
        in.i0 = steps_;
      }
      if (in.op == Op::ProgramId && in.i0 == static_cast<int64_t>(axis_)) step_ids_.insert(in.results[0]);
      if (in.op == Op::Const && !in.results.empty() && is_integer(k_.type(in.results[0]).dtype))
        int_consts_[in.results[0]] = in.i0;
    });
    if (prints) return std::nullopt;
    for (size_t i = 0; i < k_.body.body.size(); ++i)
      for (ValueId r : k_.body.body[i].results) top_pos_[r] = i;
    if (!find_walks() || !split_top()) return std::nullopt;
    if (!offset_accesses(body_)) return std::nullopt;
    if (!promote_written_refs()) return std::nullopt;
    for (const Inst& in : body_)
      if (in.op == Op::If && is_step_test(in.operands[0], steps_ - 1)) last_step_preds_.insert(in.operands[0]);
    finish();
    try {
      ir::verify(k_);
    } catch (const InternalError&) {
      return std::nullopt;  // a shape this pass does not handle: the chains stay as they are
    }
    return std::move(k_);
  }

 private:
  ValueId fresh(ir::Type t) {
    k_.types.push_back(std::move(t));
    return static_cast<ValueId>(k_.types.size() - 1);
  }
  ValueId constant(std::vector<Inst>& into, ir::Type t, int64_t value) {
    Inst c{.op = Op::Const, .results = {fresh(t)}};
    if (is_float(t.dtype)) c.f = static_cast<double>(value);
    else c.i0 = value;
    into.push_back(std::move(c));
    return into.back().results[0];
  }
  bool is_step_id(ValueId v) const { return step_ids_.count(v) > 0; }
  const Inst* top_def(ValueId v) const {
    auto it = top_pos_.find(v);
    return it == top_pos_.end() ? nullptr : &k_.body.body[it->second];
  }

  // One sequential axis with more than one step.
  bool find_axis() {
    int found = -1;
    for (size_t a = 0; a < k_.grid.size(); ++a) {
      if (!k_.is_sequential(a)) continue;
      if (found >= 0) return false;
      found = static_cast<int>(a);
    }
    if (found < 0 || k_.grid[static_cast<size_t>(found)] < 2) return false;
    axis_ = static_cast<size_t>(found);
    steps_ = k_.grid[axis_];
    return true;
  }

  // Which top-level values follow the step, and how each ref's block moves with it. Written refs
  // (outputs and scratch) must stay put.
  bool find_walks() {
    std::function<bool(const Inst&)> follows = [&](const Inst& in) {
      if (in.op == Op::ProgramId && in.i0 == static_cast<int64_t>(axis_)) return true;
      for (ValueId o : in.operands)
        if (stepped_.count(o)) return true;
      for (const Region& r : in.regions)
        for (const Inst& s : r.body)
          if (follows(s)) return true;
      return false;
    };
    for (const Inst& in : k_.body.body)
      if (follows(in)) stepped_.insert(in.results.begin(), in.results.end());
    walks_.assign(k_.refs.size(), std::vector<std::optional<Walk>>());
    for (size_t i = 0; i < k_.refs.size(); ++i) {
      const ir::RefParam& p = k_.refs[i];
      walks_[i].resize(p.origin.size());
      for (size_t d = 0; d < p.origin.size(); ++d) {
        const ValueId v = p.origin[d];
        if (!stepped_.count(v)) {
          fixed_origins_.push_back(v);
          continue;
        }
        if (p.is_output) return false;
        const Inst* def = top_def(v);
        int64_t unit = 0;
        if (p.squeezed[d] && is_step_id(v)) unit = 1;
        if (!p.squeezed[d] && def && def->op == Op::Mul) {
          for (size_t s : {0, 1}) {
            const ValueId id = def->operands[s], c = def->operands[1 - s];
            if (is_step_id(id) && int_consts_.count(c) && int_consts_.at(c) == p.block_shape[d]) unit = p.block_shape[d];
          }
        }
        if (unit == 0 || unit * steps_ > p.array_shape[d]) return false;
        walks_[i][d] = Walk{v, unit * steps_};
      }
    }
    return true;
  }

  // The fixed origins' computations stay before the loop; the rest of the body becomes the loop's.
  bool split_top() {
    std::set<size_t> hoisted;
    std::function<bool(ValueId)> need = [&](ValueId v) {
      auto it = top_pos_.find(v);
      if (it == top_pos_.end()) return false;
      if (!hoisted.insert(it->second).second) return true;
      const Inst& d = k_.body.body[it->second];
      if (!d.regions.empty() || ir::has_effects(d)) return false;
      if (d.op == Op::Load && k_.refs[static_cast<size_t>(d.i0)].is_output) return false;
      for (ValueId o : d.operands)
        if (!need(o)) return false;
      return true;
    };
    for (ValueId v : fixed_origins_)
      if (!need(v)) return false;
    for (size_t i = 0; i < k_.body.body.size(); ++i) {
      Inst& in = k_.body.body[i];
      if (hoisted.count(i)) {
        before_.push_back(std::move(in));
        continue;
      }
      if (in.op == Op::ProgramId && is_step_id(in.results[0])) continue;  // the loop index replaces it
      body_.push_back(std::move(in));
    }
    k_.body.body.clear();
    top_pos_.clear();
    return true;
  }

  // Accesses to walking refs add the step's offset; program ids of the axis become the loop index.
  bool offset_accesses(std::vector<Inst>& insts) {
    std::vector<Inst> out;
    for (Inst& in : insts) {
      if (in.op == Op::ProgramId && is_step_id(in.results[0])) continue;
      for (Region& r : in.regions)
        if (!offset_accesses(r.body)) return false;
      const bool memory = ir::op_family(in.op) == ir::Family::Memory;
      if (!memory || !walks(static_cast<size_t>(in.i0))) {
        out.push_back(std::move(in));
        continue;
      }
      if (in.i1 & ir::kGather) return false;
      const ir::RefParam& p = k_.refs[static_cast<size_t>(in.i0)];
      std::vector<ir::IndexEntry> index;
      std::vector<ValueId> starts;
      size_t j = 0;
      for (size_t d = 0; d < p.array_shape.size(); ++d) {
        const std::optional<Walk>& w = walks_[static_cast<size_t>(in.i0)][d];
        if (p.squeezed[d]) {
          if (w) {
            index.push_back(ir::IndexEntry{.scalar = true});
            starts.push_back(w->offset);
          }
          continue;
        }
        ValueId s = in.operands[j];
        index.push_back(in.index[j++]);
        if (w) {
          const ir::Type t = k_.type(s);
          if (!(t == k_.type(w->offset))) return false;
          out.push_back(Inst{.op = Op::Add, .results = {fresh(t)}, .operands = {s, w->offset}});
          s = out.back().results[0];
        }
        starts.push_back(s);
      }
      starts.insert(starts.end(), in.operands.begin() + static_cast<std::ptrdiff_t>(j), in.operands.end());
      in.index = std::move(index);
      in.operands = std::move(starts);
      out.push_back(std::move(in));
    }
    insts = std::move(out);
    return true;
  }

  bool walks(size_t ref) const {
    for (const auto& w : walks_[ref])
      if (w) return true;
    return false;
  }

  ir::Type block_type(int ref) const {
    const ir::RefParam& p = k_.refs[static_cast<size_t>(ref)];
    return {p.dtype, p.ref_shape};
  }

  // A plain load or store of the whole block (no mask, every index a slice from 0 of full size).
  bool whole_block(const Inst& in) const {
    if ((in.op != Op::Load && in.op != Op::Store) || in.i1 != 0) return false;
    const ir::RefParam& p = k_.refs[static_cast<size_t>(in.i0)];
    if (in.index.size() != p.ref_shape.size()) return false;
    for (size_t j = 0; j < in.index.size(); ++j) {
      const ir::IndexEntry& e = in.index[j];
      auto c = int_consts_.find(in.operands[j]);
      if (e.scalar || e.gather || e.stride != 1 || e.size != p.ref_shape[j] || c == int_consts_.end() || c->second != 0)
        return false;
    }
    const ir::Type t = block_type(static_cast<int>(in.i0));
    if (in.op == Op::Load) return k_.type(in.results[0]) == t;
    return in.operands.size() == in.index.size() + 1 && k_.type(in.operands.back()) == t;
  }

  // Every access of `ref` is a whole-block load or store, none inside a nested loop.
  bool promotable(const std::vector<Inst>& insts, int ref, bool in_loop) const {
    for (const Inst& in : insts) {
      if (ir::op_family(in.op) == ir::Family::Memory && in.i0 == ref && (in_loop || !whole_block(in))) return false;
      const bool loop = in.op == Op::For || in.op == Op::While;
      for (const Region& r : in.regions)
        if (!promotable(r.body, ref, in_loop || loop)) return false;
    }
    return true;
  }

  bool promote_written_refs() {
    std::set<int> written;
    std::function<void(const std::vector<Inst>&)> find = [&](const std::vector<Inst>& insts) {
      for (const Inst& in : insts) {
        if (ir::op_family(in.op) == ir::Family::Memory && in.op != Op::Load) written.insert(static_cast<int>(in.i0));
        for (const Region& r : in.regions) find(r.body);
      }
    };
    find(body_);
    std::vector<int> carried;
    for (int ref : written) {
      if (only_at_last_step(ref)) continue;  // no step reads what another wrote: it stays in memory
      if (!promotable(body_, ref, false)) return false;
      carried.push_back(ref);
    }
    for (int ref : carried) promote(ref);
    return true;
  }

  // Every access of `ref` is inside an `if (step == steps - 1)` at the loop's top level (the
  // output written from a scratch accumulator at the last step).
  bool only_at_last_step(int ref) const {
    for (const Inst& in : body_)
      if (touches(in, ref) && !(in.op == Op::If && is_step_test(in.operands[0], steps_ - 1))) return false;
    return true;
  }

  // The block's value at the loop's first step: the constant the first step stores under
  // `if (step == 0)` (that store is then dropped), anything where the first access is a plain
  // store, else the block's contents.
  ValueId initial_value(int ref) {
    const ir::Type t = block_type(ref);
    for (Inst& in : body_) {
      if (!touches(in, ref)) continue;
      if (in.op == Op::Store) return constant(before_, t, 0);
      if (in.op == Op::If && is_step_test(in.operands[0], 0)) {
        std::vector<Inst>& then = in.regions[0].body;
        const Inst* last = nullptr;
        bool only_stores = std::none_of(in.regions[1].body.begin(), in.regions[1].body.end(),
                                        [&](const Inst& s) { return touches(s, ref); });
        for (const Inst& s : then) {
          if (!touches(s, ref)) continue;
          if (s.op == Op::Store) last = &s;
          else only_stores = false;
        }
        if (only_stores && last) {
          const ValueId v = last->operands.back();
          const Inst* def = nullptr;
          for (const Inst& s : then)
            if (!s.results.empty() && s.results[0] == v) def = &s;
          const bool outside = std::any_of(before_.begin(), before_.end(), [&](const Inst& b) {
            return std::find(b.results.begin(), b.results.end(), v) != b.results.end();
          });
          if (outside || (def && def->op == Op::Const)) {
            ValueId init = v;
            if (!outside) {
              Inst c = *def;
              c.results = {fresh(t)};
              init = c.results[0];
              before_.push_back(std::move(c));
            }
            std::erase_if(then, [&](const Inst& s) { return s.op == Op::Store && s.i0 == ref; });
            return init;
          }
        }
      }
      break;
    }
    Inst load{.op = Op::Load, .results = {fresh(t)}, .i0 = ref};
    whole_access(load, ref);
    before_.push_back(std::move(load));
    return before_.back().results[0];
  }

  // Whether `pred`, defined at the loop's top level, is `step == at`.
  bool is_step_test(ValueId pred, int64_t at) const {
    const Inst* def = body_def(pred);
    if (!def || def->op != Op::Eq) return false;
    for (size_t s : {0, 1}) {
      const std::optional<int64_t> c = fold(def->operands[1 - s]);
      if (is_step_id(def->operands[s]) && c && *c == at) return true;
    }
    return false;
  }
  const Inst* body_def(ValueId v) const {
    for (const Inst& in : body_)
      if (std::find(in.results.begin(), in.results.end(), v) != in.results.end()) return &in;
    return nullptr;
  }
  // An integer scalar computed from constants by + - * at the loop's top level (num_programs of
  // the axis is a constant by now).
  std::optional<int64_t> fold(ValueId v) const {
    if (auto c = int_consts_.find(v); c != int_consts_.end()) return c->second;
    const Inst* def = body_def(v);
    if (!def || (def->op != Op::Add && def->op != Op::Sub && def->op != Op::Mul)) return std::nullopt;
    const std::optional<int64_t> a = fold(def->operands[0]), b = fold(def->operands[1]);
    if (!a || !b) return std::nullopt;
    return def->op == Op::Add ? *a + *b : def->op == Op::Sub ? *a - *b : *a * *b;
  }

  // Index entries and starts (constant zeros, defined before the loop) of a whole-block access.
  void whole_access(Inst& in, int ref) {
    const ir::RefParam& p = k_.refs[static_cast<size_t>(ref)];
    std::vector<ValueId> starts;
    for (int64_t n : p.ref_shape) {
      in.index.push_back(ir::IndexEntry{.size = n});
      starts.push_back(zero_index());
    }
    in.operands.insert(in.operands.begin(), starts.begin(), starts.end());
  }
  ValueId zero_index() {
    if (zero_ < 0) zero_ = constant(before_, {DType::int32, {}}, 0);
    return zero_;
  }

  // The block of `ref` becomes a carry: loads read the current value, stores replace it, an `if`
  // that stores yields it.
  void promote(int ref) {
    const ValueId init = initial_value(ref);
    const ValueId arg = fresh(block_type(ref));
    ValueId cur = arg;
    rename(body_, ref, cur);
    carries_.push_back({ref, init, arg, cur});
  }

  void rename(std::vector<Inst>& insts, int ref, ValueId& cur) {
    std::vector<Inst> out;
    for (Inst& in : insts) {
      if (ir::op_family(in.op) == ir::Family::Memory && in.i0 == ref) {
        if (in.op == Op::Load) subst_[in.results[0]] = cur;
        else cur = in.operands.back();
        continue;
      }
      if (in.op == Op::If && touches(in, ref)) {
        ValueId then_cur = cur, else_cur = cur;
        rename(in.regions[0].body, ref, then_cur);
        rename(in.regions[1].body, ref, else_cur);
        if (then_cur == else_cur) {  // only read in there
          cur = then_cur;
        } else {
          in.regions[0].body.back().operands.push_back(then_cur);
          in.regions[1].body.back().operands.push_back(else_cur);
          in.results.push_back(fresh(block_type(ref)));
          cur = in.results.back();
        }
      }
      out.push_back(std::move(in));
    }
    insts = std::move(out);
  }

  ValueId resolve(ValueId v) const {
    for (auto it = subst_.find(v); it != subst_.end(); it = subst_.find(v)) v = it->second;
    return v;
  }

  void finish() {
    const ValueId index = fresh({DType::int32, {}});
    for (ValueId v : step_ids_) subst_[v] = index;
    if (!carries_.empty()) zero_index();  // for the stores after the loop
    const ValueId lo = constant(before_, {DType::int32, {}}, 0);
    const ValueId hi = constant(before_, {DType::int32, {}}, steps_);
    Inst loop{.op = Op::For, .operands = {lo, hi}};
    Region body{.args = {index}};
    Inst yield{.op = Op::Yield};
    for (const Carry& c : carries_) {
      loop.operands.push_back(c.init);
      loop.results.push_back(fresh(block_type(c.ref)));
      body.args.push_back(c.arg);
      yield.operands.push_back(c.last);
    }
    body.body = std::move(body_);
    body.body.push_back(std::move(yield));
    loop.regions.push_back(std::move(body));
    std::vector<Inst> top = std::move(before_);
    before_.clear();
    const size_t loop_at = top.size();
    top.push_back(std::move(loop));
    const std::vector<ValueId> results = top.back().results;
    for (size_t i = 0; i < carries_.size(); ++i) {
      if (k_.refs[static_cast<size_t>(carries_[i].ref)].scratch) continue;  // dropped after the call
      Inst store{.op = Op::Store, .i0 = carries_[i].ref};
      whole_access(store, carries_[i].ref);
      store.operands.push_back(results[i]);
      top.push_back(std::move(store));
    }
    k_.body.body = std::move(top);
    visit_mut(k_.body, [&](Inst& in) {
      for (ValueId& o : in.operands) o = resolve(o);
    });
    sink_last_step(loop_at);
    ir::remove_dead_code(k_);  // such as the `if` that only initialised a promoted block
    // The walking refs see their whole walk; the axis has one program.
    for (size_t i = 0; i < k_.refs.size(); ++i) {
      ir::RefParam& p = k_.refs[i];
      if (!walks(i)) continue;
      for (size_t d = 0; d < p.origin.size(); ++d) {
        if (!walks_[i][d]) continue;
        p.block_shape[d] = walks_[i][d]->extent;
        p.squeezed[d] = false;
        p.origin[d] = lo;  // a constant zero defined before the loop
      }
      p.ref_shape.clear();
      for (size_t d = 0; d < p.block_shape.size(); ++d)
        if (!p.squeezed[d]) p.ref_shape.push_back(p.block_shape[d]);
    }
    k_.grid[axis_] = 1;
    k_.sequential.clear();
  }

  // An `if (step == steps - 1)` that reads only the step, this iteration's yielded values and
  // values from before the loop runs after it instead (the output written from the accumulator at
  // the last step): inside, it kept the accumulator's sum alive beside the next step's dots.
  void sink_last_step(size_t loop_at) {
    std::vector<Inst>& top = k_.body.body;
    Inst& loop = top[loop_at];
    Region& body = loop.regions[0];
    const std::vector<ValueId> yielded = body.body.back().operands;
    std::set<ValueId> inside(body.args.begin(), body.args.end());
    visit(body, [&](const Inst& in) { inside.insert(in.results.begin(), in.results.end()); });
    ValueId last = -1;
    // Whether `in` can run after the loop, and what its reads of the loop's values become there.
    auto sinkable = [&](const Inst& in, std::map<ValueId, ValueId>& to) {
      if (in.op != Op::If || !in.results.empty() || !last_step_preds_.count(in.operands[0])) return false;
      for (const Inst& s : in.regions[1].body)
        if (ir::has_effects(s)) return false;  // the other steps' branch does something
      std::set<ValueId> own;
      for (const Region& r : in.regions) visit(r, [&](const Inst& s) { own.insert(s.results.begin(), s.results.end()); });
      bool ok = true;
      std::function<void(const Inst&)> check = [&](const Inst& s) {
        for (ValueId o : s.operands) {
          if (own.count(o) || !inside.count(o)) continue;
          if (o == body.args[0]) {
            if (last < 0) last = constant(before_, {DType::int32, {}}, steps_ - 1);
            to[o] = last;
            continue;
          }
          auto y = std::find(yielded.begin(), yielded.end(), o);
          if (y == yielded.end()) ok = false;
          else to[o] = loop.results[static_cast<size_t>(y - yielded.begin())];
        }
      };
      for (const Region& r : in.regions) visit(r, check);
      return ok;
    };
    std::vector<Inst> kept, after;
    for (Inst& in : body.body) {
      std::map<ValueId, ValueId> to;
      if (!sinkable(in, to)) {
        kept.push_back(std::move(in));
        continue;
      }
      Region taken = std::move(in.regions[0]);  // the step == last branch, now unconditional
      visit_mut(taken, [&](Inst& s) {
        for (ValueId& o : s.operands)
          if (to.count(o)) o = to.at(o);
      });
      taken.body.pop_back();  // its yield
      for (Inst& s : taken.body) after.push_back(std::move(s));
    }
    body.body = std::move(kept);
    top.insert(top.begin() + static_cast<std::ptrdiff_t>(loop_at), before_.begin(), before_.end());
    before_.clear();
    top.insert(top.end(), std::make_move_iterator(after.begin()), std::make_move_iterator(after.end()));
  }

  struct Carry {
    int ref;
    ValueId init, arg, last;
  };

  ir::Kernel k_;
  size_t axis_ = 0;
  int64_t steps_ = 0;
  std::set<ValueId> step_ids_;            // program_id of the axis, wherever read
  std::map<ValueId, int64_t> int_consts_;  // integer constants
  std::map<ValueId, size_t> top_pos_;      // top-level definitions of the original body
  std::set<ValueId> stepped_;              // top-level values that follow the step
  std::vector<ValueId> fixed_origins_;
  std::vector<std::vector<std::optional<Walk>>> walks_;  // per ref, per array dimension
  std::vector<Inst> before_, body_;
  std::vector<Carry> carries_;
  std::map<ValueId, ValueId> subst_;
  std::set<ValueId> last_step_preds_;     // `step == steps - 1` tests of the loop body's top level
  ValueId zero_ = -1;
};

}  // namespace

std::optional<ir::Kernel> chains_as_loops(const ir::Kernel& kernel) {
  if (!kernel.any_sequential()) return std::nullopt;
  return ChainRewrite(kernel).run();
}

ir::Kernel kernel_for_codegen(const ir::Kernel& kernel, bool checks) {
  static const bool off = [] {
    const char* env = std::getenv("PALLADIUM_CHAIN_LOOPS");
    return env && std::string(env) == "0";
  }();
  if (checks || off) return kernel;
  if (std::optional<ir::Kernel> looped = chains_as_loops(kernel)) return std::move(*looped);
  return kernel;
}

}  // namespace palladium::backend
