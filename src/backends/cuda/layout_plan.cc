// Planning: threads per block, one layout per tile shape, shared-memory homes for dot operands,
// scratch offsets for tiles too large for registers. See emitter.h for what a layout is.
#include <cstdlib>
#include <algorithm>
#include <cstdint>
#include <functional>

#include "backends/cuda/emitter.h"
#include "palladium/error.h"

namespace palladium::cuda {
namespace {

constexpr int kMaxStridedSlots = 64;   // beyond this a tile lives in global scratch
constexpr int kMaxMmaSlots = 128;

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

void walk(const ir::Region& r, int depth, const std::function<void(const ir::Inst&, int)>& f) {
  for (const ir::Inst& in : r.body) {
    f(in, depth);
    const bool loop = in.op == ir::Op::For || in.op == ir::Op::While;
    for (const ir::Region& sub : in.regions) walk(sub, depth + (loop ? 1 : 0), f);
  }
}

}  // namespace

const ir::Inst* Emitter::def(ir::ValueId v) const { return def_.at(static_cast<size_t>(v)); }
int Emitter::loop_depth_of(ir::ValueId v) const { return depth_.at(static_cast<size_t>(v)); }
int Emitter::uses(ir::ValueId v) const { return use_count_.at(static_cast<size_t>(v)); }
const std::vector<const ir::Inst*>& Emitter::users(ir::ValueId v) const { return users_.at(static_cast<size_t>(v)); }

const Layout& Emitter::layout_for_shape(const Shape& s) const {
  auto it = layout_by_shape_.find(s);
  PL_ASSERT(it != layout_by_shape_.end(), "no layout planned for shape ", shape_str(s));
  return layouts_[static_cast<size_t>(it->second)];
}
const Layout& Emitter::layout_of(ir::ValueId v) const { return layout_for_shape(type(v).shape); }

// True when this dot can run on the tensor cores (its result is then given the Mma layout).
static bool mma_capable(const ir::Kernel& k, const ir::Inst& in, const CompilerParams& p) {
  const DType t = k.type(in.operands[0]).dtype;
  const Shape& a = k.type(in.operands[0]).shape;
  const int64_t kdim = in.i0 ? a[0] : a[1];
  if (is_16bit_float(t)) return kdim % 16 == 0;
  if (t == DType::float32 && p.allow_tf32) return kdim % 8 == 0;
  return false;
}

// The refs the kernel writes (stores, atomics), and among them those whose memory ops need
// barriers between them: loaded or updated atomically as well as written, or written from tiles
// of different layouts. Atomic adds, maxima, minima and bitwise updates whose old values nobody
// reads commute with one another, so a ref that only they update needs no barriers between them
// (the attention backward's dq: one barrier per key block saved); stores beside them still do.
bool Emitter::quiet_update(const ir::Inst& in) const {
  return ir::op_family(in.op) == ir::Family::Memory && in.op != ir::Op::Load && in.op != ir::Op::Store &&
         in.op != ir::Op::AtomicXchg && in.op != ir::Op::AtomicCas && uses(in.results[0]) == 0;
}

void Emitter::find_written_refs() {
  std::map<int, std::set<Shape>> store_shapes;
  std::set<int> reads, quiet_updates;
  std::function<void(const ir::Region&)> scan = [&](const ir::Region& r) {
    for (const ir::Inst& in : r.body) {
      if (ir::op_family(in.op) == ir::Family::Memory) {
        const int ref = static_cast<int>(in.i0);
        if (in.op == ir::Op::Store) {
          written_refs_.insert(ref);
          store_shapes[ref].insert(type(in.operands[in.index.size()]).shape);
        } else if (in.op == ir::Op::Load) {
          reads.insert(ref);
        } else {
          (quiet_update(in) ? quiet_updates : reads).insert(ref);
          written_refs_.insert(ref);
        }
      }
      for (const ir::Region& sub : in.regions) scan(sub);
    }
  };
  scan(k_.body);
  for (int ref : written_refs_)
    if (reads.count(ref) || store_shapes[ref].size() > 1 || (quiet_updates.count(ref) && !store_shapes[ref].empty()))
      outputs_loaded_.insert(ref);
}

// Plain loads in a For body whose indices depend only on the loop index and loop invariants
// (through scalar arithmetic in the body) are prefetched: issued with cp.async into a ring of
// stages_ buffers, prefetch_distance() iterations ahead. Not from a ref the kernel writes: such a
// load must see the stores before it (the iterations in between may write the rows it reads).
void Emitter::find_prefetches(const std::vector<std::pair<ir::ValueId, bool>>& homes) {
  std::function<void(const ir::Region&)> visit = [&](const ir::Region& r) {
    for (const ir::Inst& in : r.body) {
      for (const ir::Region& sub : in.regions) visit(sub);
      if (in.op != ir::Op::For) continue;
      const ir::Region& body = in.regions[0];
      std::map<ir::ValueId, const ir::Inst*> local;  // values defined directly in the body
      std::map<const ir::Inst*, size_t> position;
      for (size_t i = 0; i < body.body.size(); ++i) {
        position[&body.body[i]] = i;
        for (ir::ValueId v : body.body[i].results) local[v] = &body.body[i];
      }
      for (const auto& home : homes) {
        const ir::ValueId v = home.first;  // a plain variable: clang 14 cannot capture structured bindings
        if (!home.second || !local.count(v)) continue;
        const ir::Inst& load = *local[v];
        if (written_refs_.count(static_cast<int>(load.i0))) continue;
        std::set<const ir::Inst*> slice;
        std::function<bool(ir::ValueId)> pure = [&](ir::ValueId x) {
          if (x == body.args[0]) return true;
          for (size_t a = 1; a < body.args.size(); ++a)
            if (x == body.args[a]) return false;  // a carry changes from one iteration to the next
          auto it = local.find(x);
          if (it == local.end()) return loop_depth_of(x) < loop_depth_of(v);  // defined outside the loop
          const ir::Inst* d = it->second;
          const bool scalar_op = d->op == ir::Op::Const || is_index_arith(d->op);
          if (!scalar_op || numel(type(x).shape) != 1) return false;
          if (!slice.insert(d).second) return true;
          for (ir::ValueId o : d->operands)
            if (!pure(o)) return false;
          return true;
        };
        bool ok = true;
        for (size_t i = 0; i < load.index.size() && ok; ++i) ok = pure(load.operands[i]);
        if (!ok) continue;
        Prefetch p;
        p.loop = &in;
        p.slice.assign(slice.begin(), slice.end());
        std::sort(p.slice.begin(), p.slice.end(),
                  [&](const ir::Inst* a, const ir::Inst* b) { return position[a] < position[b]; });
        prefetch[v] = p;
      }
    }
  };
  visit(k_.body);
}

// The homes' offsets (a ring of stages_ buffers for each prefetched load), the stage count and
// the software-pipelined loops. Over budget: fewer stages (down to 2), then no prefetching, then
// no homes (operands are then staged per dot). Pipelining costs a stage and the registers of a
// dot in flight; it pays where a program has its SM to itself. Where two programs' shared memory
// (as planned without pipelining) fits one SM, they overlap each other's dots already (H100, the
// seed attention: +3..5% at d128 or block_k 128, -3% at d64 with block_k 64), so no loop is
// pipelined (still so with the producer warpgroup: d64 s2048 block_k 64 forced pipelined, one
// program per SM, ran 1.035 ms against 0.844; H100, stop 32 job 4). A pipelined loop prefetches
// stages - 2 iterations ahead: a fourth stage, where it fits and no stage count was asked for,
// keeps the distance of two that unpipelined loops have.
void Emitter::choose_stages(std::vector<std::pair<ir::ValueId, bool>>& homes) {
  // The headroom costs the d128, block_k 128 attention forward its third stage; given to the
  // stages it ran 4-6% slower on an H100 (stop 30, job 3), and with the producer warpgroup 3%
  // faster to 6% slower (stop 32 job 2: s8192 / causal). Since stop 33 that loop is pipelined on
  // two stages (a split ring, emit_producer.cc).
  const int64_t budget = target_.max_shared_bytes - kSharedReserve - kExchangeHeadroom;
  // Each home's live range in top-level instructions: from the one defining it to the last one
  // reading it. Homes whose ranges are disjoint share memory (the attention backward's two loops).
  std::map<ir::ValueId, std::pair<size_t, size_t>> span;
  for (const auto& h : homes) span[h.first] = {SIZE_MAX, 0};
  for (size_t i = 0; i < k_.body.body.size(); ++i) {
    auto extend = [&](const ir::Inst& in, int) {
      for (const std::vector<ir::ValueId>* vs : {&in.operands, &in.results})
        for (ir::ValueId v : *vs)
          if (auto it = span.find(unfolded(v)); it != span.end())
            it->second = {std::min(it->second.first, i), std::max(it->second.second, i)};
    };
    extend(k_.body.body[i], 0);
    for (const ir::Region& r : k_.body.body[i].regions) walk(r, 0, extend);
  }
  // Lays the homes out for stages_ (first fit by live range); whether they fit the budget.
  auto assign_offsets = [&] {
    smem_home.clear();
    skip_registers.clear();
    reuse_barriers_.clear();
    std::vector<std::pair<ir::ValueId, bool>> order = homes;
    std::stable_sort(order.begin(), order.end(), [&](const auto& x, const auto& y) {
      return span.at(x.first).first < span.at(y.first).first;
    });
    struct Placed {
      int64_t begin, end;
      std::pair<size_t, size_t> live;
    };
    std::vector<Placed> placed;
    int64_t top = 0;
    for (const auto& [v, plain_load] : order) {
      SmemTile tile;
      tile.rows = type(v).shape[0];
      tile.cols = type(v).shape[1];
      tile.swizzled = swizzled_homes_.count(v) > 0;
      const int64_t align = tile.swizzled ? 1024 : 128;  // swizzle atoms are 1024-byte aligned
      const int64_t bytes = align_up(tile.bytes() * (prefetch.count(v) ? stages_ : 1), 128);
      const auto live = span.at(v);
      auto overlaps_live = [&](const Placed& p) { return !(p.live.second < live.first || live.second < p.live.first); };
      // The lowest offset clear of every home live at the same time.
      int64_t offset = 0;
      for (bool moved = true; moved;) {
        moved = false;
        offset = align_up(offset, align);
        for (const Placed& p : placed)
          if (overlaps_live(p) && offset < p.end && p.begin < offset + bytes) {
            offset = p.end;
            moved = true;
          }
      }
      // Memory an earlier home used: every thread must be done with it before this home is written.
      for (const Placed& p : placed)
        if (!overlaps_live(p) && offset < p.end && p.begin < offset + bytes) reuse_barriers_.insert(live.first);
      tile.offset = offset;
      placed.push_back({offset, offset + bytes, live});
      top = std::max(top, offset + bytes);
      smem_home[v] = tile;
      if (plain_load) skip_registers.insert(v);
    }
    smem_homes_bytes_ = top;
    return top <= budget;
  };
  stages_ = params_.num_stages > 1 ? std::min(params_.num_stages, 8) : 3;
  bool fits = assign_offsets();
  while (!fits && !prefetch.empty() && stages_ > 2) {
    --stages_;
    fits = assign_offsets();
  }
  if (!fits) {
    prefetch.clear();
    fits = assign_offsets();
  }
  if (!fits) {
    homes.clear();
    wgmma_dots_.clear();
    swizzled_homes_.clear();
    assign_offsets();
  }

  find_pipelined_loops();
  if (pipelined_.empty()) return;
  if (2 * (smem_homes_bytes_ + kSharedReserve + kExchangeHeadroom) <= target_.max_shared_bytes) {
    pipelined_.clear();
    pipelined_by_dot_.clear();
    in_place_.clear();
    return;
  }
  if (params_.num_stages == 0 && stages_ == 3) {
    stages_ = 4;
    if (!assign_offsets()) {
      stages_ = 3;
      assign_offsets();
    }
  }
}

void Emitter::plan() {
  const size_t nv = k_.types.size();
  use_count_.assign(nv, 0);
  users_.assign(nv, {});
  def_.assign(nv, nullptr);
  depth_.assign(nv, 0);
  std::set<Shape> shapes;
  std::vector<const ir::Inst*> dots;
  int64_t max_dot_numel = 0, max_dot_rows = 0, max_numel = 1;
  order_.assign(nv, 0);
  int position = 0;
  walk(k_.body, 0, [&](const ir::Inst& in, int depth) {
    ++position;
    for (ir::ValueId v : in.operands) {
      ++use_count_[static_cast<size_t>(v)];
      users_[static_cast<size_t>(v)].push_back(&in);
    }
    for (ir::ValueId v : in.results) {
      def_[static_cast<size_t>(v)] = &in;
      depth_[static_cast<size_t>(v)] = depth;
      order_[static_cast<size_t>(v)] = position;
    }
    const bool loop = in.op == ir::Op::For || in.op == ir::Op::While;
    for (const ir::Region& r : in.regions)
      for (ir::ValueId a : r.args) {
        def_[static_cast<size_t>(a)] = &in;
        depth_[static_cast<size_t>(a)] = depth + (loop ? 1 : 0);
        order_[static_cast<size_t>(a)] = position;
      }
    if (in.op == ir::Op::Dot) {
      dots.push_back(&in);
      if (mma_capable(k_, in, params_)) {
        max_dot_numel = std::max(max_dot_numel, numel(type(in.results[0]).shape));
        max_dot_rows = std::max(max_dot_rows, type(in.results[0]).shape[0]);
      }
    }
  });
  for (const ir::Type& t : k_.types) {
    shapes.insert(t.shape);
    max_numel = std::max(max_numel, numel(t.shape));
  }
  for (const ir::RefParam& p : k_.refs) shapes.insert(p.ref_shape);
  find_written_refs();

  // Threads: the hint, else 1..8 warps by the largest tensor-core product (at most 64 of its
  // accumulators per thread, a warp per 16 of its rows), else about eight elements per thread of
  // the largest tile.
  if (params_.num_warps > 0) {
    threads_ = 32 * std::min(params_.num_warps, 32);
  } else if (max_dot_numel > 0) {
    threads_ = 32 * static_cast<int>(std::clamp<int64_t>(std::max(max_dot_numel / (32 * 64), max_dot_rows / 16), 1, 8));
  } else {
    int64_t t = 32;
    while (t < 256 && t * 16 <= max_numel) t *= 2;
    threads_ = static_cast<int>(t);
  }
  const int warps = threads_ / 32;

  // Mma candidates: results of tensor-core dots.
  std::set<Shape> mma_shapes;
  for (const ir::Inst* d : dots)
    if (mma_capable(k_, *d, params_)) mma_shapes.insert(type(d->results[0]).shape);
  // Results of dots that may run on wgmma get one warp per 16 rows (the wgmma accumulator layout).
  std::set<Shape> wgmma_shapes;
  for (const ir::Inst* d : dots)
    if (mma_capable(k_, *d, params_) && wgmma_candidate(*d)) wgmma_shapes.insert(type(d->results[0]).shape);
  // Rows that want a RowSlice layout: some rank-1 [M] (or [M, 1]) tile exists beside an [M, N] dot.
  auto wants_rows = [&](int64_t m) { return shapes.count(Shape{m}) || shapes.count(Shape{m, 1}); };

  int next_id = 0;
  auto add = [&](Layout l) {
    l.id = next_id++;
    l.numel = numel(l.shape);
    layout_by_shape_[l.shape] = l.id;
    layouts_.push_back(l);
  };
  std::map<int64_t, int> rowslice_warps_m;  // M -> warps_m of its Mma layouts (warps_n == 1)
  for (const Shape& s : mma_shapes) {
    const int64_t m = s[0], n = s[1];
    if (m % 16 || n % 8 || m * n / threads_ > kMaxMmaSlots) continue;
    int wm = 0;
    if ((wants_rows(m) && m / 16 >= warps) || wgmma_shapes.count(s)) {
      wm = warps;
    } else {  // the squarest warp tile that divides evenly
      int64_t best = -1;
      for (int c = 1; c <= warps; c *= 2) {
        const int cn = warps / c;
        if (m % (16 * c) || n % (8 * cn)) continue;
        const int64_t cost = m / c + n / cn;
        if (best < 0 || cost < best) { best = cost; wm = c; }
      }
      if (wm == 0) continue;
    }
    Layout l;
    l.kind = LayoutKind::Mma;
    l.shape = s;
    l.warps_m = wm;
    l.warps_n = warps / wm;
    l.tiles_m = static_cast<int>(m / 16 / wm);
    l.tiles_n = static_cast<int>(n / 8 / l.warps_n);
    l.slots = l.tiles_m * l.tiles_n * 4;
    if (l.warps_n == 1) rowslice_warps_m[m] = wm;
    add(l);
  }
  for (const Shape& s : shapes) {
    if (layout_by_shape_.count(s)) continue;
    Layout l;
    l.shape = s;
    const int64_t n = numel(s);
    const bool row_shape = (s.size() == 1 || (s.size() == 2 && s[1] == 1)) && rowslice_warps_m.count(s[0]);
    if (n == 1) {
      l.kind = LayoutKind::Replicated;
      l.slots = 1;
      l.replicated = true;
    } else if (row_shape) {
      l.kind = LayoutKind::RowSlice;
      l.warps_m = rowslice_warps_m[s[0]];
      l.tiles_m = static_cast<int>(s[0] / 16 / l.warps_m);
      l.slots = 2 * l.tiles_m;
      l.replicated = true;
    } else if (n <= static_cast<int64_t>(kMaxStridedSlots) * threads_) {
      l.kind = LayoutKind::Strided;
      const int64_t inner = s.empty() ? 1 : s.back();
      l.vec = 1;
      for (int v : {4, 2})
        if (inner % v == 0 && n >= static_cast<int64_t>(v) * threads_) { l.vec = v; break; }
      const int64_t per_round = static_cast<int64_t>(l.vec) * threads_;
      l.slots = static_cast<int>((n + per_round - 1) / per_round * l.vec);
      l.all_slots_valid = n % per_round == 0;
    } else {
      l.kind = LayoutKind::Memory;
      l.slots = 0;
    }
    add(l);
  }

  // Transposes that only feed tensor-core dots fold into the dot's operand orientation.
  auto fast_dot = [&](const ir::Inst* d) {
    return d->op == ir::Op::Dot && mma_capable(k_, *d, params_) &&
           layout_of(d->results[0]).kind == LayoutKind::Mma;
  };
  for (size_t i = 0; i < nv; ++i) {
    const ir::ValueId v = static_cast<ir::ValueId>(i);
    const ir::Inst* d = def(v);
    if (!d || d->op != ir::Op::Transpose || type(v).shape.size() != 2 || users(v).empty()) continue;
    bool only_dots = true;
    for (const ir::Inst* u : users(v)) only_dots = only_dots && fast_dot(u);
    if (only_dots) folded_transpose[v] = d->operands[0];
  }

  // Shared-memory homes: 16-bit dot operands loaded only for dots (loaded straight into shared
  // memory), or defined outside a loop that uses them in a dot (staged once, not per iteration).
  std::map<ir::ValueId, std::vector<const ir::Inst*>> dot_uses;  // operand (through transposes) -> dots
  for (const ir::Inst* d : dots)
    if (fast_dot(d))
      for (int o = 0; o < 2; ++o) dot_uses[unfolded(d->operands[static_cast<size_t>(o)])].push_back(d);
  auto all_uses_are_dots = [&](ir::ValueId v) {
    for (const ir::Inst* u : users(v)) {
      if (u->op == ir::Op::Transpose && folded_transpose.count(u->results[0])) continue;
      if (!fast_dot(u)) return false;
    }
    return true;
  };
  std::vector<std::pair<ir::ValueId, bool>> homes;  // value, loaded straight into shared memory
  for (const auto& [v, ds] : dot_uses) {
    const ir::Type& t = type(v);
    if (!is_16bit_float(t.dtype)) continue;
    const ir::Inst* d = def(v);
    const bool plain_load = d && d->op == ir::Op::Load && !(d->i1 & (ir::kHasMask | ir::kGather)) && all_uses_are_dots(v);
    bool invariant = false;
    for (const ir::Inst* u : ds) invariant = invariant || loop_depth_of(v) < loop_depth_of(u->results[0]);
    // Computed in the loop that reads it, where no dot can take it from registers (a B operand, or
    // an A operand read transposed, as P^T and dS^T in the attention backward): a home written
    // each iteration, so that the dots may run on wgmma, which reads such operands only from
    // shared memory.
    bool computed = false;
    if (!plain_load && !invariant && d && d->op != ir::Op::Load && all_uses_are_dots(v) && layout_of(v).registers() &&
        type(v).shape.size() == 2) {
      for (const ir::Inst* u : ds) {
        const DotOperands o = dot_operands(*u);
        computed = computed || o.b == v || (o.a == v && o.ta);
      }
    }
    if (plain_load || invariant || computed) homes.emplace_back(v, plain_load);
  }
  find_prefetches(homes);
  choose_wgmma(homes);

  // acc + dot(a, b): the dot accumulates onto acc directly when the add is its only use.
  for (const ir::Inst* d : dots) {
    if (!fast_dot(d)) continue;
    const ir::ValueId r = d->results[0];
    if (uses(r) != 1) continue;
    const ir::Inst* u = users(r)[0];
    if (u->op != ir::Op::Add || type(u->results[0]).dtype != DType::float32) continue;
    const ir::ValueId other = u->operands[0] == r ? u->operands[1] : u->operands[0];
    if (other == r || def(other) == nullptr) continue;
    // The addend must be defined before the dot (then it is in scope there): compare the
    // pre-order positions of their definitions.
    const bool before = order_[static_cast<size_t>(other)] < order_[static_cast<size_t>(r)];
    if (!before) continue;
    dot_addend[r] = other;
    alias_of[u->results[0]] = r;
  }
  choose_stages(homes);
  choose_tma();
  choose_producer();
  choose_cluster();
  find_uniform_selects();
  find_lazy_scales();

  // Global scratch: Memory tiles (each its own buffer), then the global staging area.
  scratch_offset_.assign(nv, -1);
  int64_t scratch = 0;
  for (size_t v = 0; v < nv; ++v) {
    if (!def_[v] || layout_of(static_cast<ir::ValueId>(v)).registers()) continue;
    scratch_offset_[v] = scratch;
    scratch = align_up(scratch + numel(k_.types[v].shape) * reg_size(k_.types[v].dtype), 256);
  }
  global_stage_offset_ = scratch;
}

}  // namespace palladium::cuda
