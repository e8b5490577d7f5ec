// Palladium CUDA device prelude: atomic read-modify-write for every dtype the IR allows on
// atomics (32- and 64-bit ints and floats); each returns the old value. Float max/min follow the
// interpreter's std::max/std::min (a NaN operand keeps the old value).
#pragma once
#include "cuda/pl_types.h"

PL_DEVICE pl_i32 pl_atomic_add(pl_i32* p, pl_i32 v) { return atomicAdd(p, v); }
PL_DEVICE pl_u32 pl_atomic_add(pl_u32* p, pl_u32 v) { return atomicAdd(p, v); }
PL_DEVICE pl_i64 pl_atomic_add(pl_i64* p, pl_i64 v) {
  return (pl_i64)atomicAdd((pl_u64*)p, (pl_u64)v);
}
PL_DEVICE float pl_atomic_add(float* p, float v) { return atomicAdd(p, v); }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Two adjacent float32 adds in one reduction, old values unread (sm_90; p 8-byte aligned).
PL_DEVICE void pl_red_add_pair(float* p, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
}
// TMA bulk reduction of `bytes` (a multiple of 16) float32s from shared memory into global memory
// (both 16-byte aligned), in this thread's current bulk group; the group's commit, the wait until
// its reads of shared memory are done, and the wait until it has completed.
PL_DEVICE void pl_bulk_reduce_add(float* dst, const float* src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
               "r"((unsigned)__cvta_generic_to_shared(src)), "r"(bytes)
               : "memory");
}
PL_DEVICE void pl_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
PL_DEVICE void pl_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
PL_DEVICE void pl_bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
#endif
PL_DEVICE double pl_atomic_add(double* p, double v) { return atomicAdd(p, v); }

PL_DEVICE pl_i32 pl_atomic_max(pl_i32* p, pl_i32 v) { return atomicMax(p, v); }
PL_DEVICE pl_u32 pl_atomic_max(pl_u32* p, pl_u32 v) { return atomicMax(p, v); }
PL_DEVICE pl_i64 pl_atomic_max(pl_i64* p, pl_i64 v) { return atomicMax(p, v); }
PL_DEVICE pl_i32 pl_atomic_min(pl_i32* p, pl_i32 v) { return atomicMin(p, v); }
PL_DEVICE pl_u32 pl_atomic_min(pl_u32* p, pl_u32 v) { return atomicMin(p, v); }
PL_DEVICE pl_i64 pl_atomic_min(pl_i64* p, pl_i64 v) { return atomicMin(p, v); }

// Compare-and-swap loops for floating point max/min.
PL_DEVICE float pl_atomic_max(float* p, float v) {
  unsigned* a = (unsigned*)p;
  unsigned old = *a, assumed;
  do {
    assumed = old;
    const float cur = __uint_as_float(assumed);
    const float next = cur < v ? v : cur;
    if (__float_as_uint(next) == assumed) break;
    old = atomicCAS(a, assumed, __float_as_uint(next));
  } while (old != assumed);
  return __uint_as_float(old);
}
PL_DEVICE float pl_atomic_min(float* p, float v) {
  unsigned* a = (unsigned*)p;
  unsigned old = *a, assumed;
  do {
    assumed = old;
    const float cur = __uint_as_float(assumed);
    const float next = v < cur ? v : cur;
    if (__float_as_uint(next) == assumed) break;
    old = atomicCAS(a, assumed, __float_as_uint(next));
  } while (old != assumed);
  return __uint_as_float(old);
}
PL_DEVICE double pl_atomic_max(double* p, double v) {
  pl_u64* a = (pl_u64*)p;
  pl_u64 old = *a, assumed;
  do {
    assumed = old;
    const double cur = __longlong_as_double((pl_i64)assumed);
    const double next = cur < v ? v : cur;
    if ((pl_u64)__double_as_longlong(next) == assumed) break;
    old = atomicCAS(a, assumed, (pl_u64)__double_as_longlong(next));
  } while (old != assumed);
  return __longlong_as_double((pl_i64)old);
}
PL_DEVICE double pl_atomic_min(double* p, double v) {
  pl_u64* a = (pl_u64*)p;
  pl_u64 old = *a, assumed;
  do {
    assumed = old;
    const double cur = __longlong_as_double((pl_i64)assumed);
    const double next = v < cur ? v : cur;
    if ((pl_u64)__double_as_longlong(next) == assumed) break;
    old = atomicCAS(a, assumed, (pl_u64)__double_as_longlong(next));
  } while (old != assumed);
  return __longlong_as_double((pl_i64)old);
}

// Exchange (every atomic dtype), bitwise and/or/xor and compare-and-swap (integers).
PL_DEVICE pl_i32 pl_atomic_xchg(pl_i32* p, pl_i32 v) { return atomicExch(p, v); }
PL_DEVICE pl_u32 pl_atomic_xchg(pl_u32* p, pl_u32 v) { return atomicExch(p, v); }
PL_DEVICE pl_i64 pl_atomic_xchg(pl_i64* p, pl_i64 v) { return (pl_i64)atomicExch((pl_u64*)p, (pl_u64)v); }
PL_DEVICE float pl_atomic_xchg(float* p, float v) { return atomicExch(p, v); }
PL_DEVICE double pl_atomic_xchg(double* p, double v) {
  return __longlong_as_double((pl_i64)atomicExch((pl_u64*)p, (pl_u64)__double_as_longlong(v)));
}
PL_DEVICE pl_i32 pl_atomic_and(pl_i32* p, pl_i32 v) { return atomicAnd(p, v); }
PL_DEVICE pl_u32 pl_atomic_and(pl_u32* p, pl_u32 v) { return atomicAnd(p, v); }
PL_DEVICE pl_i64 pl_atomic_and(pl_i64* p, pl_i64 v) { return (pl_i64)atomicAnd((pl_u64*)p, (pl_u64)v); }
PL_DEVICE pl_i32 pl_atomic_or(pl_i32* p, pl_i32 v) { return atomicOr(p, v); }
PL_DEVICE pl_u32 pl_atomic_or(pl_u32* p, pl_u32 v) { return atomicOr(p, v); }
PL_DEVICE pl_i64 pl_atomic_or(pl_i64* p, pl_i64 v) { return (pl_i64)atomicOr((pl_u64*)p, (pl_u64)v); }
PL_DEVICE pl_i32 pl_atomic_xor(pl_i32* p, pl_i32 v) { return atomicXor(p, v); }
PL_DEVICE pl_u32 pl_atomic_xor(pl_u32* p, pl_u32 v) { return atomicXor(p, v); }
PL_DEVICE pl_i64 pl_atomic_xor(pl_i64* p, pl_i64 v) { return (pl_i64)atomicXor((pl_u64*)p, (pl_u64)v); }
PL_DEVICE pl_i32 pl_atomic_cas(pl_i32* p, pl_i32 cmp, pl_i32 v) { return atomicCAS(p, cmp, v); }
PL_DEVICE pl_u32 pl_atomic_cas(pl_u32* p, pl_u32 cmp, pl_u32 v) { return atomicCAS(p, cmp, v); }
PL_DEVICE pl_i64 pl_atomic_cas(pl_i64* p, pl_i64 cmp, pl_i64 v) { return (pl_i64)atomicCAS((pl_u64*)p, (pl_u64)cmp, (pl_u64)v); }
