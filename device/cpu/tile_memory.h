// Tile <-> array transfers for loads, stores and atomics, with edge-block handling: an access
// selects `count` elements start + k*stride (k in [0, count)) per dimension; only those inside
// the array are touched. Loads fill the rest with `other` (or 0); stores and atomics drop them.
// Bounds are checked against the whole array, never against the block, so a kernel that indexes
// past its block reads or writes its neighbours' data (the interpreter reports that as an
// Error; the compiled backend does not check) but can never touch memory outside its arrays.
#pragma once
#include <stdint.h>

#include "abi.h"
#include "storage.h"

namespace pl_cpu {

// The k in [lo, hi) for which 0 <= start + k*stride < extent (stride >= 1), clipped to [0, count).
PL_INLINE void valid_range(int64_t start, int64_t stride, int64_t count, int64_t extent, int64_t& lo, int64_t& hi) {
  lo = start >= 0 ? 0 : (-start + stride - 1) / stride;
  hi = start >= extent ? 0 : (extent - start + stride - 1) / stride;
  hi = hi < count ? hi : count;
  lo = lo < hi ? lo : hi;
}

template <class C> PL_INLINE void fill(C* __restrict dst, int64_t n, C value) {
  for (int64_t k = 0; k < n; ++k) dst[k] = value;
}
template <class C> PL_INLINE void copy(C* __restrict dst, const C* __restrict src, int64_t n) {
  PL_NO_ALIAS_LOOP
  for (int64_t k = 0; k < n; ++k) dst[k] = src[k];
}

// One row of a load: dst[k] = array[offset + k*stride] for k in [lo, hi), else 0.
template <class C, class S>
PL_INLINE void load_row(C* __restrict dst, const S* __restrict base, int64_t offset, int64_t stride, int64_t count,
                        int64_t lo, int64_t hi) {
  for (int64_t k = 0; k < lo; ++k) dst[k] = C(0);
  PL_NO_ALIAS_LOOP
  for (int64_t k = lo; k < hi; ++k) dst[k] = to_compute(base[offset + k * stride]);
  for (int64_t k = hi; k < count; ++k) dst[k] = C(0);
}

// A masked row: lanes that are masked off or outside the array take other[k] (or 0 without other).
template <class C, class S>
PL_INLINE void load_row_masked(C* __restrict dst, const S* __restrict base, int64_t offset, int64_t stride,
                               int64_t count, int64_t lo, int64_t hi, const bool* __restrict mask,
                               const C* __restrict other) {
  if (lo >= hi) {
    for (int64_t k = 0; k < count; ++k) dst[k] = other ? other[k] : C(0);
    return;
  }
  PL_NO_ALIAS_LOOP
  for (int64_t k = 0; k < count; ++k) {
    const bool active = mask[k] && k >= lo && k < hi;
    const int64_t safe = k < lo ? lo : (k >= hi ? hi - 1 : k);  // never address outside the array
    const C fallback = other ? other[k] : C(0);
    dst[k] = active ? C(to_compute(base[offset + safe * stride])) : fallback;
  }
}

template <class S, class C>
PL_INLINE void store_row(S* __restrict base, int64_t offset, int64_t stride, int64_t count, int64_t lo, int64_t hi,
                         const C* __restrict src) {
  (void)count;
  PL_NO_ALIAS_LOOP
  for (int64_t k = lo; k < hi; ++k) base[offset + k * stride] = to_storage<S>(src[k]);
}

// Rows of outputs far larger than the caches (the backend decides, from the static array size)
// are written with non-temporal stores, as memcpy does for large copies: the lines are not read
// before being overwritten and do not evict the inputs. store_fence() must follow before the
// results are handed to another thread (palladium_cpu_run ends with it).
#if defined(__AVX512F__)
typedef float StreamVector __attribute__((vector_size(64)));
#elif defined(__AVX__)
typedef float StreamVector __attribute__((vector_size(32)));
#elif defined(__SSE2__)
typedef float StreamVector __attribute__((vector_size(16)));
#endif

#if defined(__SSE2__)
constexpr int64_t kStreamLanes = sizeof(StreamVector) / sizeof(float);

// One vector of floats from `src` to `dst` (aligned to the vector) past the caches.
PL_INLINE void stream_vector(float* __restrict dst, const float* __restrict src) {
  StreamVector v;
  __builtin_memcpy(&v, src, sizeof v);
#if defined(__clang__)
  __builtin_nontemporal_store(v, reinterpret_cast<StreamVector*>(dst));
#elif defined(__AVX512F__)
  __builtin_ia32_movntps512(dst, v);
#elif defined(__AVX__)
  __builtin_ia32_movntps256(dst, v);
#else
  __builtin_ia32_movntps(dst, v);
#endif
}
#endif

PL_INLINE void store_row_streaming(float* __restrict base, int64_t offset, int64_t lo, int64_t hi,
                                   const float* __restrict src) {
  if (lo >= hi) return;
  float* const row = base + offset + lo;  // inside the array: lo < hi
  const float* const from = src + lo;
  const int64_t n = hi - lo;
  int64_t k = 0;
#if defined(__SSE2__)
  for (; k < n && reinterpret_cast<uintptr_t>(row + k) % sizeof(StreamVector) != 0; ++k) row[k] = from[k];
  for (; k + kStreamLanes <= n; k += kStreamLanes) stream_vector(row + k, from + k);
#endif
  for (; k < n; ++k) row[k] = from[k];
}

// A whole chunk of 64 floats (four 64-byte lines) to a 64-byte-aligned `dst`, streamed with no
// checks: what store_row_streaming does for a chunk in the middle of a row, without its loops'
// bounds and alignment tests.
PL_INLINE void store_chunk_streaming(float* __restrict dst, const float* __restrict src) {
#if defined(__SSE2__)
  for (int64_t k = 0; k < 64; k += kStreamLanes) stream_vector(dst + k, src + k);
#else
  for (int64_t k = 0; k < 64; ++k) dst[k] = src[k];
#endif
}

// Software prefetch of a streamed row's inputs, one per 64-byte line of a 64-element chunk, 4096
// elements ahead into L2 (prefetcht2), where PL_CPU_STREAM_PREFETCH is 1 and one thread runs the
// launch (stream_prefetch). Opt-in, through PALLADIUM_CPU_CXXFLAGS=-DPL_CPU_STREAM_PREFETCH=1: on
// the H100 machine's Xeon the generated add of 2^26 float32 (block 65536) ran 37.9 ms at one
// thread with it (42.5 without, stop 33; memcpy 27.8; stop 34 job 3: 41.5 against 46.2) but 22.9
// against 18.6 ms at two threads (stop 34 job 2, same binary) and alike at 16; on the Zen 4 it
// cost 45% at one thread (20.4 -> 29.4-31.0 ms, stop 34). From stop 35 to 39 it was the default
// on Intel CPUs; stop 40 measured it costing 15-24% at one thread on a 2-core Xeon with AVX-512
// (40.3, 40.2, 40.9 ms against 32.8, 35.2, 33.0 without, alternating runs of one binary, memcpy
// 22-23 ms) while the H100 host (job 2) gave 51.9 and 37.7 ms with it against 39.7 and 47.3 without
// (shared, noisier than the difference), so the default is now off everywhere.
#if !defined(PL_CPU_STREAM_PREFETCH)
#define PL_CPU_STREAM_PREFETCH 0
#endif
PL_INLINE bool stream_prefetch(const Launch& launch) { return PL_CPU_STREAM_PREFETCH && launch.threads == 1; }

template <class T> PL_INLINE void prefetch_chunk_inputs(const T* p) {
  const char* const ahead = reinterpret_cast<const char*>(p + 4096);  // never dereferenced: a hint
  for (int64_t b = 0; b < 64 * static_cast<int64_t>(sizeof(T)); b += 64) __builtin_prefetch(ahead + b, 0, 1);
}

PL_INLINE void store_fence() {
#if defined(__SSE2__)
  __builtin_ia32_sfence();
#endif
}

template <class S, class C>
PL_INLINE void store_row_masked(S* __restrict base, int64_t offset, int64_t stride, int64_t lo, int64_t hi,
                                const C* __restrict src, const bool* __restrict mask) {
  for (int64_t k = lo; k < hi; ++k)
    if (mask[k]) base[offset + k * stride] = to_storage<S>(src[k]);
}

// ---- atomics (32- and 64-bit integer and float refs): return the old value ----
enum class AtomicOp { add, max, min, xchg, bit_and, bit_or, bit_xor };

template <AtomicOp op, class T> PL_INLINE T atomic_update(T* p, T v) {
  if constexpr (op == AtomicOp::add && (T(0.5) == T(0))) {  // integers: one instruction
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
  } else if constexpr (op == AtomicOp::xchg) {
    T old;
    __atomic_exchange(p, &v, &old, __ATOMIC_RELAXED);
    return old;
  } else if constexpr (op == AtomicOp::bit_and) {  // integer refs only (the IR checks)
    return __atomic_fetch_and(p, v, __ATOMIC_RELAXED);
  } else if constexpr (op == AtomicOp::bit_or) {
    return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
  } else if constexpr (op == AtomicOp::bit_xor) {
    return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);
  } else {
    T old;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    while (true) {
      // max/min as std::max(old, v) / std::min(old, v), the interpreter's rule.
      T desired = op == AtomicOp::add ? static_cast<T>(old + v) : op == AtomicOp::max ? (old < v ? v : old) : (v < old ? v : old);
      if (__atomic_compare_exchange(p, &old, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return old;
    }
  }
}

// Compare-and-swap (integer refs): the old value; `v` is stored where it equalled `cmp`.
template <class T> PL_INLINE T atomic_cas(T* p, T cmp, T v) {
  __atomic_compare_exchange(p, &cmp, &v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return cmp;  // on failure, the value found; on success, equal to it
}

template <class T>
PL_INLINE void atomic_cas_row(T* base, int64_t offset, int64_t stride, int64_t count, int64_t lo, int64_t hi,
                              const T* cmp, const T* values, T* result) {
  for (int64_t k = 0; k < count; ++k)
    result[k] = k >= lo && k < hi ? atomic_cas(base + offset + k * stride, cmp[k], values[k]) : T(0);
}

// One row of an atomic update; `result` gets the old values (0 for lanes not applied).
template <AtomicOp op, class T>
PL_INLINE void atomic_row(T* base, int64_t offset, int64_t stride, int64_t count, int64_t lo, int64_t hi,
                          const T* values, const bool* mask, T* result) {
  for (int64_t k = 0; k < count; ++k) {
    const bool active = k >= lo && k < hi && (!mask || mask[k]);
    result[k] = active ? atomic_update<op>(base + offset + k * stride, values[k]) : T(0);
  }
}

}  // namespace pl_cpu
