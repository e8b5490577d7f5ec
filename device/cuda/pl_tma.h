// Palladium CUDA device prelude: the tensor memory accelerator (TMA, sm_90). A prefetched operand
// tile is brought into its swizzled shared-memory home by one thread's cp.async.bulk.tensor per
// 64-column block (the tensor map, encoded by the host at launch, carries the array's shape and
// strides, the box and the 128-byte swizzle, so the bytes land in pl_wgmma.h's format), and its
// arrival is signalled on an mbarrier that every thread waits on.
#pragma once
#include "cuda/pl_types.h"
#include "cuda/pl_mma.h"

// The driver's CUtensorMap: 128 opaque bytes, passed as a __grid_constant__ kernel parameter.
struct __align__(64) pl_tensor_map {
  unsigned long long words[16];
};

PL_DEVICE void pl_mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(pl_smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (the TMA unit completes on them).
PL_DEVICE void pl_fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// One arrival that also expects `bytes` more bytes of transactions in the barrier's current phase.
PL_DEVICE void pl_mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
  unsigned long long state;
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 %0, [%1], %2;"
               : "=l"(state)
               : "r"(pl_smem_addr(bar)), "r"(bytes)
               : "memory");
  (void)state;
}
// One plain arrival (a consumer warp releasing a ring slot to the producer).
PL_DEVICE void pl_mbar_arrive(unsigned long long* bar) {
  unsigned long long state;
  asm volatile("mbarrier.arrive.shared.b64 %0, [%1];" : "=l"(state) : "r"(pl_smem_addr(bar)) : "memory");
  (void)state;
}
// Clusters (the matmul's pairs of blocks sharing an operand tile): this block's rank in its
// cluster, an arrival on the barrier at the same place in block `cta`'s shared memory (releasing
// this block's reads of the slot it guards), and a barrier of every thread of the cluster (not
// .aligned: at the kernel's end the warps come from diverged producer and consumer branches).
PL_DEVICE unsigned pl_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
PL_DEVICE void pl_mbar_arrive_cluster(unsigned long long* bar, unsigned cta) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(pl_smem_addr(bar)), "r"(cta));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
PL_DEVICE void pl_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// A barrier among the first `threads` threads only (named barrier 1): the consumer warps of a
// warp-specialised kernel synchronise without waiting for the producer warp.
template <int threads>
PL_DEVICE void pl_consumer_barrier() {
  asm volatile("bar.sync 1, %0;" ::"n"(threads) : "memory");
}
// Register rebalancing of a warp-specialised kernel (sm_90a): every warp of a warpgroup executes
// the same one. The producer warpgroup gives registers back to the block's pool, the consumer
// warpgroups then take them (an increase waits until the pool holds enough).
template <int regs>
PL_DEVICE void pl_regs_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(regs));
}
template <int regs>
PL_DEVICE void pl_regs_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(regs));
}
// Ping-pong of two consumer warpgroups (named barriers 2 and 3): warpgroup `wg` waits for its
// turn to issue tensor-core work, then passes the turn to the other one, so that the two issue
// their dots alternately and one's softmax runs while the other's dots hold the tensor cores.
// The barrier id is a register: a branch on the warpgroup put the wgmma after the wait on a
// divergent path, which ptxas serialises (C7520). So ptxas reserves all sixteen barriers, which
// costs nothing at the one block per multiprocessor of these kernels.
PL_DEVICE void pl_turn_wait(int wg) { asm volatile("bar.sync %0, 256;" ::"r"(2 + wg) : "memory"); }
PL_DEVICE void pl_turn_pass(int wg) { asm volatile("bar.arrive %0, 256;" ::"r"(3 - wg) : "memory"); }
// Waits until the phase of parity `parity` of the barrier has completed.
PL_DEVICE void pl_mbar_wait(unsigned long long* bar, unsigned parity) {
  const unsigned a = pl_smem_addr(bar);
  unsigned done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(a), "r"(parity)
                 : "memory");
  } while (!done);
}

// Brings a tensor map into the TMA unit's descriptor cache ahead of the first copy through it.
PL_DEVICE void pl_tma_prefetch_map(const pl_tensor_map* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// cp.async.bulk.tensor of one box at coordinates (innermost first) into shared memory at `dst`
// (1024-byte aligned for the 128-byte swizzle), completing `bytes` on `bar`.
PL_DEVICE void pl_tma_load_2d(void* dst, const pl_tensor_map* map, int c0, int c1, unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               ::"r"(pl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(pl_smem_addr(bar))
               : "memory");
}
PL_DEVICE void pl_tma_load_3d(void* dst, const pl_tensor_map* map, int c0, int c1, int c2, unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
               ::"r"(pl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(pl_smem_addr(bar))
               : "memory");
}
PL_DEVICE void pl_tma_load_4d(void* dst, const pl_tensor_map* map, int c0, int c1, int c2, int c3, unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
      ::"r"(pl_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(pl_smem_addr(bar))
      : "memory");
}
PL_DEVICE void pl_tma_load_5d(void* dst, const pl_tensor_map* map, int c0, int c1, int c2, int c3, int c4,
                              unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], "
      "[%7];" ::"r"(pl_smem_addr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(pl_smem_addr(bar))
      : "memory");
}

// The same box multicast: written at `dst` and completing on `bar` in every block of the cluster
// whose rank is set in `ctas` (the offsets are this block's; each block's are the same). Tiles of
// 2-D arrays only (emit_cluster.cc).
PL_DEVICE void pl_tma_load_multicast_2d(void* dst, const pl_tensor_map* map, int c0, int c1, unsigned long long* bar,
                                        unsigned short ctas) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], "
      "[%4], %5;" ::"r"(pl_smem_addr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(pl_smem_addr(bar)), "h"(ctas)
      : "memory");
}
