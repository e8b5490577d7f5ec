// Operand tiles brought in by Hopper's tensor memory accelerator (TMA). A prefetched load whose
// home is swizzled (a wgmma operand) and whose tile is a plain 2-D box of an input array (unit
// strides, the tile's columns along the array's contiguous dimension) is copied by one thread:
// per 64-column block one cp.async.bulk.tensor, whose tensor map the host encodes at launch
// (tensor_map.cc) with the 128-byte swizzle, so the bytes land exactly as emit_home_fill would
// have put them, zeros outside the array included. Each loop's ring of stages_ buffers gets one
// mbarrier per buffer: thread 0 arrives with the round's byte count before issuing the copies and
// every thread waits on the slot's phase before reading it (the phase bits live in registers for
// the whole kernel, since a loop may run several times). Rounds still go out after the barrier
// that follows the wait, so the buffer they overwrite is free exactly as before. The other
// threads no longer compute addresses or issue copies. In a software-pipelined K loop
// (dot_pipeline.cc) the round goes out after the iteration's dot is committed, so that warp 0
// issues its MMAs first (H100, bf16 matmul 128 x 256 tiles: +1-2%; attention-shaped loops ran up
// to 8% slower that way and keep it at the loads; PALLADIUM_CUDA_TMA_AFTER_DOT=0 keeps it there
// for K loops too). A home loaded once per program (the attention's Q, or K and V in the
// backward's dK/dV loop) comes in the same way on a barrier of its own, awaited just before the
// first top-level loop reading it, after that loop's first rounds went out (H100: attention
// forward+backward d64 s2048 +17%, forward d128 s2048 +2-3%; PALLADIUM_CUDA_TMA_HOMES=0 copies it
// with cp.async and waits where it is loaded). PALLADIUM_CUDA_TMA=0 turns the TMA off.
#include <cstdlib>
#include <functional>

#include "backends/cuda/emitter.h"

namespace palladium::cuda {

// Whether the TMA can bring in `v`'s tile (a plain 2-D box of an input array into a swizzled
// home); if so its tensor map is added and the load recorded.
bool Emitter::tma_eligible(ir::ValueId v) {
  const ir::Inst& in = *def(v);
  const SmemTile& tile = smem_home.at(v);
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(in.i0));
  const size_t rank = p.array_shape.size();
  if (!tile.swizzled || p.is_output || !is_16bit_float(p.dtype) || rank < 2 || rank > 5) return false;
  if ((in.i1 & (ir::kHasMask | ir::kGather)) || tile.rows > 256 || tile.cols % 64 != 0) return false;
  if (p.array_shape.back() % 8 != 0) return false;  // every row stride a multiple of 16 bytes
  bool ok = true;
  for (int64_t d : p.array_shape) ok = ok && d >= 1 && d <= (int64_t{1} << 31) - 1;
  // The array dimensions of the tile's two dimensions; both must have unit index strides.
  const std::vector<ValueDim> dims = value_dims(in, p);
  for (const ValueDim& d : dims) ok = ok && d.stride == 1 && !d.gather;
  if (!ok || dims.size() != 2 || dims[1].array_dim != rank - 1) return false;
  TensorMapSpec spec;
  spec.ref = static_cast<int>(in.i0);
  spec.dtype = p.dtype;
  const std::vector<int64_t> stride = row_major_strides(p.array_shape);
  for (size_t i = 0; i < rank; ++i) {
    const size_t ad = rank - 1 - i;
    spec.dims.push_back(p.array_shape[ad]);
    if (i > 0) spec.byte_strides.push_back(stride[ad] * 2);
    spec.box.push_back(ad == rank - 1 ? 64 : ad == dims[0].array_dim ? tile.rows : 1);
  }
  tma_loads_[v] = TmaLoad{static_cast<int>(tensor_maps_.size())};
  tensor_maps_.push_back(spec);
  return true;
}

void Emitter::choose_tma() {
  const char* env = std::getenv("PALLADIUM_CUDA_TMA");
  if ((env && std::string(env) == "0") || !target_.tma || target_.sm < 90) return;
  for (const auto& [v, pf] : prefetch) tma_eligible(v);
  // Homes loaded once per program (top level, no sequential grid axis re-running the body).
  const char* homes = std::getenv("PALLADIUM_CUDA_TMA_HOMES");
  if (!(homes && std::string(homes) == "0") && !k_.any_sequential())
    for (ir::ValueId v : skip_registers)
      if (!prefetch.count(v) && loop_depth_of(v) == 0 && tma_eligible(v))
        tma_homes_[v] = static_cast<int>(tma_homes_.size());
  // The rings: per loop, the bytes of its TMA loads, and whether cp.async copies remain.
  for (const auto& [v, pf] : prefetch) {
    auto [it, fresh] = tma_rings_.try_emplace(pf.loop);
    if (fresh) it->second.index = static_cast<int>(tma_rings_.size()) - 1;
    if (tma_loads_.count(v)) it->second.bytes += smem_home.at(v).bytes();
    else it->second.cp_async = true;
  }
  for (auto it = tma_rings_.begin(); it != tma_rings_.end();)
    it = it->second.bytes == 0 ? tma_rings_.erase(it) : std::next(it);
  int index = 0;
  const char* late = std::getenv("PALLADIUM_CUDA_TMA_AFTER_DOT");  // =0: rounds where the loads stand
  for (auto& [loop, ring] : tma_rings_) {
    ring.first_set = ring.index = index++;
    const auto pipe = pipelined_.find(loop);
    if (!ring.cp_async && pipe != pipelined_.end() && !pipe->second.first_dot && !(late && std::string(late) == "0"))
      round_issue_[loop] = RoundIssue::AfterLastDot;
  }
}

// Before a top-level loop (its first rounds already issued): the TMA homes its dots read, so that
// no iteration waits again. A loop nested in a branch leaves the wait to each dot.
void Emitter::emit_tma_home_waits(const ir::Inst& loop) {
  const std::vector<ir::Inst>& top = k_.body.body;
  if (tma_homes_.empty() || top.empty() || &loop < &top.front() || &loop > &top.back()) return;
  std::set<ir::ValueId> read;
  std::function<void(const ir::Region&)> visit = [&](const ir::Region& r) {
    for (const ir::Inst& in : r.body) {
      if (in.op == ir::Op::Dot) {
        const DotOperands o = dot_operands(in);
        read.insert(o.a);
        read.insert(o.b);
      }
      for (const ir::Region& sub : in.regions) visit(sub);
    }
  };
  visit(loop.regions[0]);
  for (const auto& [v, index] : tma_homes_)
    if (read.count(v) && tma_homes_waited_.insert(v).second)
      line("pl_mbar_wait(pl_home_bar" + std::to_string(index) + ", pl_home_phase);");
}

int64_t Emitter::tma_barrier_bytes() const {
  const int64_t rings = static_cast<int64_t>(barrier_sets()) * stages_ * (producer_warps_ > 0 ? 2 : 1);
  return (rings + static_cast<int64_t>(tma_homes_.size()) * (producer_homes_ ? 2 : 1)) * 8;
}

int Emitter::barrier_sets() const {
  int sets = 0;
  for (const auto& [loop, ring] : tma_rings_) sets += ring.split ? 2 : 1;
  return sets;
}

int Emitter::barrier_set(const ir::Inst& loop, int group) const {
  const TmaRing& ring = tma_rings_.at(&loop);
  return ring.first_set + (ring.split && group > 0 ? 1 : 0);
}

int Emitter::load_group(const ir::Inst& loop, const ir::Inst& load) const {
  const TmaRing* ring = tma_ring(loop);
  const PipelinedLoop* pipe = pipelined_loop(loop);
  if (!ring || !ring->split || !pipe || !pipe->first_dot) return 0;
  const DotOperands o = dot_operands(*pipe->first_dot);
  return o.a == load.results[0] || o.b == load.results[0] ? 0 : 1;
}

// The barriers sit in dynamic shared memory at `offset` (8-byte aligned): a static __shared__
// array would be padded to the dynamic area's 1024-byte alignment, a kilobyte that cost the
// attention backward its second program per SM.
std::string Emitter::tma_kernel_setup(int64_t offset) const {
  if (tma_rings_.empty() && tma_homes_.empty()) return "";
  std::string out;
  const int64_t homes_at = offset + static_cast<int64_t>(barrier_sets()) * stages_ * 8;
  const int64_t empties_at = homes_at + static_cast<int64_t>(tma_homes_.size()) * 8;
  // The homes' full barriers, and, loaded by the producer, their empty ones after the rings'.
  const int64_t home_empties_at = empties_at + static_cast<int64_t>(barrier_sets()) * stages_ * 8;
  std::string home_init;
  if (!tma_homes_.empty()) out += "  unsigned pl_home_phase = 0;  // the homes' next parity: the block's programs so far, mod 2\n";
  for (const auto& [v, index] : tma_homes_) {
    const std::string h = std::to_string(index);
    out += "  unsigned long long* const pl_home_bar" + h + " = (unsigned long long*)(pl_smem + " +
           std::to_string(homes_at + index * 8) + ");\n";
    home_init += "    pl_mbar_init(pl_home_bar" + h + ", 1);\n";
    if (!producer_homes_) continue;
    out += "  unsigned long long* const pl_home_empty" + h + " = (unsigned long long*)(pl_smem + " +
           std::to_string(home_empties_at + index * 8) + ");\n";
    home_init += "    pl_mbar_init(pl_home_empty" + h + ", " + std::to_string(threads_ / 32) + ");\n";
  }
  // Per barrier set: its full barriers and phase bits, and, served by the producer, its empty barriers.
  std::string init;
  for (const auto& [loop, ring] : tma_rings_) {
    for (int set = ring.first_set; set < ring.first_set + (ring.split ? 2 : 1); ++set) {
      const std::string b = std::to_string(set);
      out += "  unsigned long long* const pl_full" + b + " = (unsigned long long*)(pl_smem + " +
             std::to_string(offset + set * stages_ * 8) + ");\n";
      out += "  unsigned pl_phase" + b + " = 0;  // bit s: the parity of slot s's next phase\n";
      init += "    for (int s = 0; s < " + std::to_string(stages_) + "; ++s) pl_mbar_init(&pl_full" + b + "[s], 1);\n";
      if (!producer_serves(*loop)) continue;
      out += "  unsigned long long* const pl_empty" + b + " = (unsigned long long*)(pl_smem + " +
             std::to_string(empties_at + set * stages_ * 8) + ");\n";
      // each consumer warp arrives once per use of a slot (in a cluster, the other block's too)
      init += "    for (int s = 0; s < " + std::to_string(stages_) + "; ++s) pl_mbar_init(&pl_empty" + b + "[s], " +
              std::to_string(threads_ / 32 * cluster_) + ");\n";
    }
    if (producer_serves(*loop))
      out += "  int pl_base" + std::to_string(ring.index) + " = 0;  // the ring's uses by earlier runs of its loop\n";
  }
  out += "  if (pl_tid() == 0) {\n";
  for (size_t m = 0; m < tensor_maps_.size(); ++m) out += "    pl_tma_prefetch_map(&pl_tmap" + std::to_string(m) + ");\n";
  out += init;
  out += home_init;
  out += "    pl_fence_mbar_init();\n  }\n";
  if (cluster_ > 1) out += "  const unsigned pl_cta_rank = pl_cluster_rank();  // 0 or 1: programs 2m and 2m + 1\n";
  out += cluster_ > 1 ? cluster_sync() : "  __syncthreads();\n";
  return out;
}

std::string Emitter::tma_parameters() const {
  std::string out;
  for (size_t m = 0; m < tensor_maps_.size(); ++m)
    out += ",\n    const __grid_constant__ pl_tensor_map pl_tmap" + std::to_string(m);
  return out;
}

}  // namespace palladium::cuda
