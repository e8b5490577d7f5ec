// Thread-block clusters with TMA multicast (sm_90a). In a warp-specialised K loop (the matmul),
// programs 2m and 2m + 1 of the walk (program_order.cc) differ along one grid axis only, so the
// operand tiles whose block index does not depend on that axis are the same for both: the
// 128 x 256 matmul's B tile (64 x 256, 32 KB a k-step) is read by two row blocks of one column.
// Launched as clusters of two blocks, each block's producer issues half of such a tile's 64-column
// boxes (box j of k-step i by the block of rank (i + j) % 2), each box multicast into both
// blocks' slots and completing on both blocks' full barriers; the tiles that differ are loaded as
// before. The L2 then serves each shared tile once per pair instead of twice (Nsight Compute on
// the bf16 matmul 4096^3, H100, stop 37 job 3: ours read 1.47 GB from L2 where cuBLASLt's kernel,
// clusters of two, read 1.03 GB). Because a block's slot is now also written by the other block's
// producer, a slot goes back to both: each consumer warp arrives on its own block's empty barrier
// and on the other's (twice the arrivals per phase), and a producer refills a slot once both
// blocks' consumers are done with it. Both blocks walk the same programs' loops (bounds free of
// program ids), so their rings stay in step; a cluster barrier after the barriers' initialisation
// and one at the kernel's end keep either block from touching the other's shared memory before it
// exists or after it is gone.
// Opt-in (PALLADIUM_CUDA_CLUSTER=1): slower than single blocks so far. H100, stop 38, same binary,
// bf16 matmul 128 x 256 x 64 tiles, ms single -> clustered: job 2, with the remote arrival at
// cluster scope (.release.cluster), 4096^3 4 stages 0.180 -> 0.329, 3 stages 0.182 -> 0.317; job 3,
// at CTA scope (as CUTLASS arrives), 4096^3 0.179 -> 0.187 (4 stages), 0.182 -> 0.206 (3 stages),
// 8192^3 1.389 -> 1.441 and 1.386 -> 1.547. Nsight Compute on the clustered kernel (job 3): tensor
// pipes 89.8% busy, 1.35 GB through L2, not the 1.0 GB of a shared tile read once per pair (single
// blocks were not profiled in this stop; stop 37 job 3, before the 16-byte stores: 1.47 GB). The more stages, the smaller the loss: each refill now
// waits for the slower block of the pair.
#include <cstdlib>

#include "backends/cuda/emitter.h"

namespace palladium::cuda {

void Emitter::choose_cluster() {
  const char* env = std::getenv("PALLADIUM_CUDA_CLUSTER");
  if (!(env && std::string(env) == "1") || target_.sm < 90 || !target_.arch_specific) return;
  // Every ring served by the producer, whole (not split into groups), without turns and with the
  // same trip count in every program; no homes and no checked run (which may stop a program).
  if (producer_warps_ == 0 || tma_rings_.empty() || !tma_homes_.empty() || params_.checks || k_.any_sequential())
    return;
  const int axis = pair_axis();
  if (axis < 0 || k_.parallel_programs() % 2 != 0 || k_.parallel_programs() > (int64_t{1} << 30)) return;
  std::set<ir::ValueId> shared;
  for (const auto& [loop, ring] : tma_rings_) {
    if (!producer_serves(*loop) || ring.split || ring.cp_async || pingpong_loops_.count(loop) || !runs_alike(*loop))
      return;
    for (const ir::Inst* load : prefetched_loads(*loop)) {
      const ir::RefParam& ref = k_.refs.at(static_cast<size_t>(load->i0));
      if (program_axes_of(load->operands).count(static_cast<size_t>(axis)) ||
          program_axes_of(ref.origin).count(static_cast<size_t>(axis)))
        continue;
      // Only tiles of 2-D arrays: the multicast copy exists (and was run) for those alone.
      if (ref.array_shape.size() != 2) return;
      shared.insert(load->results[0]);
    }
  }
  if (shared.empty()) return;
  cluster_ = 2;
  multicast_ = std::move(shared);
}

// A barrier of all threads of the cluster's blocks, releasing their shared-memory writes (the
// barriers' initialisation) to the other block and acquiring its.
std::string Emitter::cluster_sync() const { return cluster_ > 1 ? "  pl_cluster_sync();\n" : ""; }

}  // namespace palladium::cuda
