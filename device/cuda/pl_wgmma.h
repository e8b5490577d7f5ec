// Palladium CUDA device prelude: Hopper warpgroup MMA (wgmma, sm_90a) helpers. The shared-memory
// operand tiles use one physical format, "swizzled": a tile of R rows whose contiguous dimension
// (C elements of 16 bits) is cut into 64-element column blocks of R x 128 bytes; within a block,
// each 8-row group is a 1024-byte atom whose 16-byte chunk c of row r sits at chunk c ^ (r % 8)
// (the 128-byte swizzle). A K-major operand (C = K) and an MN-major one (C = M or N) are the same
// bytes read through different descriptors (pl_wgmma_desc_*).
#pragma once
#include "cuda/pl_types.h"
#include "cuda/pl_mma.h"

// Byte offset of element (r, c) in a swizzled tile of `rows` rows.
PL_DEVICE int pl_swz_offset(int r, int c, int rows) {
  return (c >> 6) * rows * 128 + (r >> 3) * 1024 + (r & 7) * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4) + (c & 7) * 2;
}
// Byte offset of the 16-byte chunk holding elements (r, 8q .. 8q + 7).
PL_DEVICE int pl_swz_chunk(int r, int q, int rows) {
  return (q >> 3) * rows * 128 + (r >> 3) * 1024 + (r & 7) * 128 + (((q & 7) ^ (r & 7)) << 4);
}

// Two 32-bit halves joined as a register pair (written in C, ptxas added a carry and an or).
PL_DEVICE unsigned long long pl_join64(unsigned lo, unsigned hi) {
  unsigned long long r;
  asm("mov.b64 %0, {%1, %2};" : "=l"(r) : "r"(lo), "r"(hi));
  return r;
}
// Matrix descriptor (PTX "matrix-descriptor-encode"): start address >> 4 in bits 0-13, leading
// byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, swizzle mode in 62-63 (1: 128B).
// Built as two 32-bit halves (the upper one a constant).
PL_DEVICE unsigned long long pl_wgmma_desc(const void* smem, unsigned lbo, unsigned sbo) {
#ifdef PL_GENERIC_SMEM_ADDRESSES
  const unsigned long long a = pl_smem_addr(smem);
  return ((a & 0x3FFFFull) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
#else
  const unsigned lo = ((pl_smem_addr(smem) & 0x3FFFFu) >> 4) | (((lbo >> 4) & 0x3FFFu) << 16);
  return pl_join64(lo, ((sbo >> 4) & 0x3FFFu) | (1u << 30));
#endif
}
// The descriptor of the bytes `offset` past a descriptor's start: one 32-bit add to its address
// field (shared addresses stay below 2^18, so the field cannot carry), which the k16 steps of one
// tile share, instead of encoding each step's address again (about ten uniform-datapath
// instructions a wgmma in the attention loops). With pl_warpgroup (pl_types.h): H100, stop 36
// job 5 (`h100_stop36_job5_*`, same binary, through a switch since removed), forward d128 s8192
// blocks 128 x 128 2.006 -> 1.875-1.883 ms, s2048 0.565 -> 0.539-0.541, d64 causal s8192
// 1.641 -> 1.563-1.581; forward+backward d128 s8192 8.87 -> 8.49, s2048 2.36 -> 2.29.
PL_DEVICE unsigned long long pl_wgmma_desc_step(unsigned long long desc, int offset) {
  return pl_join64((unsigned)desc + ((unsigned)offset >> 4), (unsigned)(desc >> 32));
}
// K-major operand (C = K) at k16 step kk: 8-row groups 1024 bytes apart; the step moves 32 bytes
// along the 128-byte row, and to the next column block every four steps.
PL_DEVICE unsigned long long pl_wgmma_desc_k(const void* tile, int rows, int kk) {
  return pl_wgmma_desc_step(pl_wgmma_desc(tile, 16, 1024), (kk >> 2) * rows * 128 + (kk & 3) * 32);
}
// MN-major operand (C = M or N, the rows are K) at k16 step kk: 64-element MN blocks rows * 128
// bytes apart (leading offset), 8-K groups 1024 bytes apart (stride offset); the step is 16 rows.
PL_DEVICE unsigned long long pl_wgmma_desc_mn(const void* tile, int rows, int kk) {
  return pl_wgmma_desc_step(pl_wgmma_desc(tile, rows * 128, 1024), kk * 2048);
}

// wgmma.fence / commit_group / wait_group: order register use around the asynchronous MMAs.
PL_DEVICE void pl_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
PL_DEVICE void pl_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> PL_DEVICE void pl_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// fence.proxy.async.shared::cta: shared memory written by ordinary stores or cp.async becomes
// visible to the tensor cores' (async proxy) reads after the following barrier.
PL_DEVICE void pl_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
