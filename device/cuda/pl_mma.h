// Palladium CUDA device prelude: tensor-core and shared-memory primitives, each a thin wrapper
// whose comment names the PTX instruction. Fragment layouts (g = lane / 4, t = lane % 4):
//   A 16x16 (row):  a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B 16x8  (col):  b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8.., n g)
//   C 16x8  (f32):  c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
// Each a/b register packs two 16-bit values, the lower k in the low half.
#pragma once
#include "cuda/pl_types.h"

// The kernel's dynamic shared memory (every generated kernel's one shared area).
extern __shared__ __align__(1024) unsigned char pl_smem[];
// Shared-memory address of a pointer into pl_smem: the area's address (one cvta.to.shared) plus
// the 32-bit offset, so that an address the code forms as pl_smem + offset costs an add, not
// 64-bit generic arithmetic and a conversion per use (every wgmma descriptor).
// PL_GENERIC_SMEM_ADDRESSES (PALLADIUM_CUDA_UNIFORM_ADDRESSES=0) converts each pointer instead.
PL_DEVICE unsigned pl_smem_addr(const void* p) {
#ifdef PL_GENERIC_SMEM_ADDRESSES
  unsigned long long a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return (unsigned)a;
#else
  return (unsigned)__cvta_generic_to_shared(pl_smem) + (unsigned)((const unsigned char*)p - pl_smem);
#endif
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 b16 matrices; lane l gives the address of
// row l % 8 of matrix l / 8.
PL_DEVICE void pl_ldmatrix_x4(unsigned r[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(pl_smem_addr(smem_row)));
}
// ldmatrix.sync.aligned.m8n8.x2.shared.b16: lanes 0..15 give the row addresses.
PL_DEVICE void pl_ldmatrix_x2(unsigned r[2], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(pl_smem_addr(smem_row)));
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: as pl_ldmatrix_x4, each 8x8 matrix transposed.
PL_DEVICE void pl_ldmatrix_x4_trans(unsigned r[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(pl_smem_addr(smem_row)));
}
// ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16
PL_DEVICE void pl_ldmatrix_x2_trans(unsigned r[2], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(pl_smem_addr(smem_row)));
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: c += a * b.
PL_DEVICE void pl_mma_bf16_16816(float c[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: c += a * b.
PL_DEVICE void pl_mma_f16_16816(float c[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: c += a * b with
//   a[0] = (g, t), a[1] = (g+8, t), a[2] = (g, t+4), a[3] = (g+8, t+4); b[0] = (k t, n g), b[1] = (k t+4, n g).
PL_DEVICE void pl_mma_tf32_1688(float c[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// cvt.rna.tf32.f32: round a float to TF32 (kept in a 32-bit register).
PL_DEVICE unsigned pl_to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// cp.async.cg.shared.global: copy 16 bytes global -> shared without registers; bytes past
// src_bytes (0..16) are zero-filled, so an out-of-range chunk reads zeros.
PL_DEVICE void pl_cp_async16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(pl_smem_addr(smem)), "l"(gmem), "r"(src_bytes)
               : "memory");
}
// cp.async.commit_group / cp.async.wait_group N: at most N groups of copies still in flight.
PL_DEVICE void pl_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> PL_DEVICE void pl_cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Packs two floats into a b32 of two 16-bit values (lo in the low half), for mma operands
// (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32 put their first source in the high half).
PL_DEVICE unsigned pl_pack_bf16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
PL_DEVICE unsigned pl_pack_f16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
