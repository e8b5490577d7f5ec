// Selects whose predicate one block decides at once. The attention kernels' causal mask,
// where(q_span[:, None] >= k_span[None, :], s, -inf), holds everywhere in a block below the
// diagonal and is mixed only in the diagonal blocks, which are all that a hand-written
// FlashAttention kernel masks. Here any select whose predicate compares index spans (scalars and
// iotas, through broadcasts, reshapes, transposes, adds, subtractions, constant multiples and
// divisions) gets a warp-uniform branch on the predicate's range: all true, the on-true value;
// otherwise the elementwise select. The predicate's own instructions are deferred into that
// branch (recomputed there from its scalars), so blocks that the predicate holds in whole do none
// of the mask's work. PALLADIUM_CUDA_UNIFORM_SELECT=0 keeps the plain select.
//
// H100, stop 35 jobs 3-4, same binary, ms, two rounds each, on / off: forward causal d64 blocks
// 128 x 128 s2048 0.562/0.561 -> 0.581/0.581 off, s8192 1.820/1.775 -> 1.958/1.918; d128 128 x 128
// s8192 1.230/1.222 -> 1.263/1.273; d64 128 x 64 (unpipelined, where the mask was computed while
// the dot ran) 0.522-0.531 against 0.517-0.523 off (the branch without deferring the mask, a
// switch since removed: 0.523/0.526); forward+backward
// causal d64 s2048 2.013 -> 2.118 off, s8192 6.885 -> 7.268, d128 unchanged.
// No branch of its own for all false (the elementwise select covers it; the attention loops never
// visit such a block): with it ptxas spilled 20 bytes in the pipelined d64 128 x 128 causal loop
// and the forward took 1-4 % longer on every causal row (stop 36 job 1, two rounds each, ms, with
// / without; the "without" runs also carried a tree for the row reductions, which the same job
// measured alone within noise: d64 128 x 128 s2048 0.557/0.558 -> 0.526/0.531, s8192
// 1.840/1.788 -> 1.770/1.728; 128 x 64 s2048 0.530/0.520 -> 0.509/0.508; d128 128 x 128 s8192
// 1.235/1.204 -> 1.208/1.185, 128 x 64 1.508/1.464 -> 1.450/1.433; the non-causal rows within
// noise).
#include <algorithm>
#include <utility>
#include <cstdlib>
#include <functional>

#include "backends/cuda/emitter.h"

namespace palladium::cuda {
namespace {

// Ranges are computed in 64 bits, for values of at most 32 (where one wraps, see `fits`).
bool signed_index(DType t) { return t == DType::int8 || t == DType::int16 || t == DType::int32; }

// lo and hi within the dtype's range: then every element's arithmetic (wrapping in the dtype)
// computed the value the 64-bit range has.
std::string fits(DType t, const std::string& ok, const std::string& lo, const std::string& hi) {
  const int bits = static_cast<int>(itemsize(t)) * 8;
  const std::string min = "(-" + std::to_string(1ll << (bits - 1)) + "ll)", max = "(" + std::to_string((1ll << (bits - 1)) - 1) + "ll)";
  return "(" + ok + " && " + lo + " >= " + min + " && " + hi + " <= " + max + ")";
}

std::string ll(int64_t c) { return "(" + std::to_string(c) + "ll)"; }

}  // namespace

// The least and greatest element of integer value `v` as expressions over scalars in scope, where
// index arithmetic computes it.
std::optional<Emitter::IndexRange> Emitter::index_range(ir::ValueId v) const {
  const ir::Type& t = type(v);
  if (!signed_index(t.dtype)) return std::nullopt;
  if (numel(t.shape) == 1 && layout_of(v).kind == LayoutKind::Replicated && !skip_registers.count(v)) {
    const std::string s = "((long long)" + name(v) + "[0])";
    return IndexRange{s, s, "true"};
  }
  const ir::Inst* d = def(v);
  if (!d || !d->regions.empty() || d->results.size() != 1 || alias_of.count(v)) return std::nullopt;
  auto constant = [&](ir::ValueId x) -> std::optional<int64_t> {
    const ir::Inst* c = def(x);
    if (c && c->op == ir::Op::Const && signed_index(type(x).dtype)) return c->i0;
    return std::nullopt;
  };
  switch (d->op) {
    case ir::Op::Const: return IndexRange{ll(d->i0), ll(d->i0), "true"};
    case ir::Op::Iota: {  // (an int8 iota past 127 wraps: no range)
      const int64_t last = t.shape.at(static_cast<size_t>(d->i0)) - 1;
      if (last >= (int64_t{1} << (itemsize(t.dtype) * 8 - 1))) return std::nullopt;
      return IndexRange{ll(0), ll(last), "true"};
    }
    case ir::Op::Broadcast: case ir::Op::Reshape: case ir::Op::Transpose: return index_range(d->operands[0]);
    case ir::Op::Add: case ir::Op::Sub: {
      const auto a = index_range(d->operands[0]), b = index_range(d->operands[1]);
      if (!a || !b) return std::nullopt;
      const bool add = d->op == ir::Op::Add;
      const std::string lo = add ? "(" + a->lo + " + " + b->lo + ")" : "(" + a->lo + " - " + b->hi + ")";
      const std::string hi = add ? "(" + a->hi + " + " + b->hi + ")" : "(" + a->hi + " - " + b->lo + ")";
      return IndexRange{lo, hi, fits(t.dtype, "(" + a->ok + " && " + b->ok + ")", lo, hi)};
    }
    case ir::Op::Mul: case ir::Op::Div: {
      // By a constant: monotone, increasing for a positive one (truncating division included).
      const bool div = d->op == ir::Op::Div;
      std::optional<int64_t> c = constant(d->operands[1]);
      ir::ValueId x = d->operands[0];
      if (!c && !div) {
        c = constant(d->operands[0]);
        x = d->operands[1];
      }
      const auto r = c ? index_range(x) : std::nullopt;
      if (!r || (div && *c <= 0)) return std::nullopt;
      const std::string op = div ? " / " : " * ";
      std::string lo = "(" + r->lo + op + ll(*c) + ")", hi = "(" + r->hi + op + ll(*c) + ")";
      if (*c < 0) std::swap(lo, hi);
      return IndexRange{lo, hi, fits(t.dtype, r->ok, lo, hi)};
    }
    default: return std::nullopt;
  }
}

// When boolean `pred` is true, and when false, at every element: expressions over scalars.
std::optional<Emitter::UniformTest> Emitter::uniform_test(ir::ValueId pred) const {
  const ir::Inst* d = def(pred);
  if (!d || type(pred).dtype != DType::bool_ || !d->regions.empty()) return std::nullopt;
  switch (d->op) {
    case ir::Op::Broadcast: case ir::Op::Reshape: case ir::Op::Transpose: return uniform_test(d->operands[0]);
    case ir::Op::Not: {
      const auto a = uniform_test(d->operands[0]);
      if (!a) return std::nullopt;
      return UniformTest{a->all_false, a->all_true};
    }
    case ir::Op::And: case ir::Op::Or: {
      const auto a = uniform_test(d->operands[0]), b = uniform_test(d->operands[1]);
      if (!a || !b) return std::nullopt;
      const std::string t = "(" + a->all_true + (d->op == ir::Op::And ? " && " : " || ") + b->all_true + ")";
      const std::string f = "(" + a->all_false + (d->op == ir::Op::And ? " || " : " && ") + b->all_false + ")";
      return UniformTest{t, f};
    }
    case ir::Op::Lt: case ir::Op::Le: case ir::Op::Gt: case ir::Op::Ge: case ir::Op::Eq: case ir::Op::Ne: {
      const auto a = index_range(d->operands[0]), b = index_range(d->operands[1]);
      if (!a || !b) return std::nullopt;
      // Only where no element's arithmetic wrapped (and evaluated in that order: a range is
      // computed only once the ranges inside it fit).
      const std::string ok = "(" + a->ok + " && " + b->ok + ")";
      auto cmp = [](const std::string& x, const char* op, const std::string& y) { return "(" + x + " " + op + " " + y + ")"; };
      auto both = [&](const std::string& test) { return "(" + ok + " && " + test + ")"; };
      const std::string disjoint = "(" + cmp(a->hi, "<", b->lo) + " || " + cmp(b->hi, "<", a->lo) + ")";
      const std::string single = "(" + cmp(a->lo, "==", a->hi) + " && " + cmp(b->lo, "==", b->hi) + " && " +
                                 cmp(a->lo, "==", b->lo) + ")";
      switch (d->op) {
        case ir::Op::Lt: return UniformTest{both(cmp(a->hi, "<", b->lo)), both(cmp(a->lo, ">=", b->hi))};
        case ir::Op::Le: return UniformTest{both(cmp(a->hi, "<=", b->lo)), both(cmp(a->lo, ">", b->hi))};
        case ir::Op::Gt: return UniformTest{both(cmp(a->lo, ">", b->hi)), both(cmp(a->hi, "<=", b->lo))};
        case ir::Op::Ge: return UniformTest{both(cmp(a->lo, ">=", b->hi)), both(cmp(a->hi, "<", b->lo))};
        case ir::Op::Eq: return UniformTest{both(single), both(disjoint)};
        default: return UniformTest{both(disjoint), both(single)};
      }
    }
    default: return std::nullopt;
  }
}

void Emitter::find_uniform_selects() {
  const char* env = std::getenv("PALLADIUM_CUDA_UNIFORM_SELECT");
  if (env && std::string(env) == "0") return;
  for (size_t i = 0; i < k_.types.size(); ++i) {
    const ir::ValueId r = static_cast<ir::ValueId>(i);
    const ir::Inst* s = def(r);
    if (!s || s->op != ir::Op::Select || s->results[0] != r) continue;
    const ir::ValueId pred = s->operands[0];
    const Layout& l = layout_of(r);
    if (!l.registers() || alias_of.count(r) || !uniform_test(pred)) continue;
    std::vector<std::string> coords;
    for (size_t d = 0; d < l.shape.size(); ++d) coords.push_back(coord(l, d));
    int budget = kRecomputeBudget;
    if (recompute(pred, coords, budget).empty()) continue;
    uniform_selects_.insert(s);
  }
  // The predicates' tiles (not their scalars) are deferred where nothing else reads them: a tile
  // stays when a reader other than a uniform select's predicate or another deferred tile needs
  // it, and then so do its operands.
  std::set<ir::ValueId> chain;
  std::function<void(ir::ValueId)> collect = [&](ir::ValueId v) {
    if (numel(type(v).shape) == 1 && layout_of(v).kind == LayoutKind::Replicated) return;
    if (!chain.insert(v).second) return;
    for (ir::ValueId o : def(v)->operands) collect(o);
  };
  for (const ir::Inst* s : uniform_selects_) collect(s->operands[0]);
  auto needed_by = [&](const ir::Inst* u, ir::ValueId v) {
    if (uniform_selects_.count(u)) return u->operands[1] == v || u->operands[2] == v;
    return !(u->results.size() == 1 && chain.count(u->results[0]));
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = chain.begin(); it != chain.end();) {
      const ir::ValueId v = *it;
      bool keep = layout_of(v).registers() && !smem_home.count(v) && !skip_registers.count(v);
      for (const ir::Inst* u : users(v)) keep = keep && !needed_by(u, v);
      if (keep) {
        ++it;
        continue;
      }
      it = chain.erase(it);
      changed = true;
    }
  }
  deferred_index_ = chain;
}

bool Emitter::deferred(const ir::Inst& in) const {
  if (in.results.empty()) return false;
  for (ir::ValueId r : in.results)
    if (!deferred_index_.count(r)) return false;
  return true;
}

void Emitter::emit_uniform_select(const ir::Inst& in) {
  const ir::ValueId r = in.results[0], pred = in.operands[0], x = in.operands[1], y = in.operands[2];
  const UniformTest test = *uniform_test(pred);
  const Layout& l = layout_of(r);
  std::string p = at(pred);
  if (deferred_index_.count(pred)) {
    std::vector<std::string> coords;
    for (size_t d = 0; d < l.shape.size(); ++d) coords.push_back(coord(l, d));
    int budget = kRecomputeBudget;
    p = recompute(pred, coords, budget);
  }
  line("// select " + name(r) + ": all true or mixed over the block");
  // In the on-true value's registers where the select is its only reader (the attention scores):
  // no copy, and no more registers live than without the mask. A lazily scaled select
  // (lazy_scale.cc) lives in its unscaled operand's registers and scales them in the mixed blocks
  // (that operand's dot is retired: its multiply, emitted as nothing, read it first).
  const ir::Inst* xd = def(x);
  const auto lazy = lazy_scaled_.find(r);
  const bool in_place = lazy != lazy_scaled_.end() ||
                        (uses(x) == 1 && x != y && layout_of(x).id == l.id && l.registers() && xd &&
                         std::find(xd->results.begin(), xd->results.end(), x) != xd->results.end() &&
                         !dots_in_flight_.count(x));
  if (in_place) {
    std::string all_true = test.all_true;
    if (lazy != lazy_scaled_.end()) {
      name_override_[r] = name(lazy->second.unscaled);
      line("const bool " + lazy->second.flag + " = " + all_true + ";");
      all_true = lazy->second.flag;
    } else {
      name_override_[r] = name(x);
    }
    open("if (!" + all_true + ")");
    open_slots(l);
    if (lazy != lazy_scaled_.end()) line(at(r) + " = " + at(r) + " * " + literal(DType::float32, lazy->second.c, 0) + ";");
    line("if (!(" + p + ")) " + at(r) + " = " + at(y) + ";");
    close();
    close();
    return;
  }
  declare(r);
  auto assign = [&](const std::string& value) {
    open_slots(l);
    line(at(r) + " = " + value + ";");
    close();
  };
  open("if (" + test.all_true + ")");
  assign(at(x));
  close("} else {");
  ++indent_;
  assign("(" + p + ") ? " + at(x) + " : " + at(y));
  close();
}

}  // namespace palladium::cuda
