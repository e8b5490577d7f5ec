// Reductions and scans over one axis of a row-major tile viewed as [outer, len, inner].
// Contiguous reductions (inner == 1) keep 16 independent partial results so they vectorise
// without reassociating a single chain (float sums therefore differ from a sequential sum in the
// last bits; the interpreter's order is unspecified too).
#pragma once
#include <stdint.h>

#include "numeric.h"

namespace pl_cpu {

struct SumOp {
  template <class T> PL_INLINE T operator()(T a, T b) const { return static_cast<T>(a + b); }
};
// NaN-propagating for floats.
struct MaxOp {
  template <class T> PL_INLINE T operator()(T a, T b) const { return ((b > a) | (b != b)) ? b : a; }
};
struct MinOp {
  template <class T> PL_INLINE T operator()(T a, T b) const { return ((b < a) | (b != b)) ? b : a; }
};

// 64-byte vectors of a float type and of same-width integers (for comparison masks).
template <class T> struct Vector64;
template <> struct Vector64<float> {
  typedef float type __attribute__((vector_size(64)));
  typedef int32_t mask __attribute__((vector_size(64)));
};
template <> struct Vector64<double> {
  typedef double type __attribute__((vector_size(64)));
  typedef int64_t mask __attribute__((vector_size(64)));
};

// Float rows: explicit vectors, because compilers do not turn NaN-propagating max/min into vector
// code themselves. Max/min keep a vector max without NaN checks plus a mask of NaNs seen.
template <class T, class Op> PL_INLINE T reduce_float_contiguous(const T* __restrict x, int64_t n, T init, Op op) {
  using V = typename Vector64<T>::type;
  using M = typename Vector64<T>::mask;
  constexpr int kLanes = static_cast<int>(64 / sizeof(T));
  constexpr bool is_sum = __is_same(Op, SumOp), is_max = __is_same(Op, MaxOp);
  V acc = V{} + init;
  M nan = M{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    V v;
    __builtin_memcpy(&v, x + i, sizeof v);
    if constexpr (is_sum) {
      acc += v;
    } else {
      acc = (is_max ? acc > v : acc < v) ? acc : v;
      nan |= v != v;
    }
  }
  T total = init;
  bool any_nan = false;
  for (int l = 0; l < kLanes; ++l) {
    total = op(total, acc[l]);
    any_nan = any_nan || nan[l] != 0;
  }
  for (; i < n; ++i) total = op(total, x[i]);
  return any_nan ? static_cast<T>(__builtin_nan("")) : total;
}

template <class T, class Op> PL_INLINE T reduce_contiguous(const T* __restrict x, int64_t n, T init, Op op) {
  if constexpr (__is_same(T, float) || __is_same(T, double)) return reduce_float_contiguous(x, n, init, op);
  constexpr int kLanes = 16;
  T part[kLanes];  // integers and bools: plain lanes vectorise
  for (int l = 0; l < kLanes; ++l) part[l] = init;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] = op(part[l], x[i + l]);
  T total = init;
  for (int l = 0; l < kLanes; ++l) total = op(total, part[l]);
  for (; i < n; ++i) total = op(total, x[i]);
  return total;
}

template <class T, class Op>
PL_INLINE void reduce_axis(const T* __restrict x, T* __restrict out, int64_t outer, int64_t len, int64_t inner, T init,
                           Op op) {
  if (inner == 1) {
    for (int64_t o = 0; o < outer; ++o) out[o] = reduce_contiguous(x + o * len, len, init, op);
    return;
  }
  for (int64_t o = 0; o < outer; ++o) {
    T* __restrict dst = out + o * inner;
    for (int64_t i = 0; i < inner; ++i) dst[i] = init;
    for (int64_t k = 0; k < len; ++k) {
      const T* __restrict src = x + (o * len + k) * inner;
      PL_NO_ALIAS_LOOP
      for (int64_t i = 0; i < inner; ++i) dst[i] = op(dst[i], src[i]);
    }
  }
}

// argmax/argmin: the first index of the extreme value; a NaN wins at its first occurrence.
// len > 0: the Builder rejects reductions of empty axes other than sums.
template <bool kMax, class T>
PL_INLINE void arg_reduce_axis(const T* __restrict x, int32_t* __restrict out, int64_t outer, int64_t len,
                               int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const T* src = x + o * len * inner + i;
      int32_t best = 0;
      T best_value = src[0];
      bool nan = best_value != best_value;
      for (int64_t k = 1; k < len && !nan; ++k) {
        const T v = src[k * inner];
        if (v != v) {
          nan = true;
          best = static_cast<int32_t>(k);
        } else if (kMax ? v > best_value : v < best_value) {
          best_value = v;
          best = static_cast<int32_t>(k);
        }
      }
      out[o * inner + i] = best;
    }
  }
}

// Inclusive prefix sums along the axis. The running sum stays in T (float for float16/bfloat16);
// `round` maps each output to the result dtype, as the interpreter rounds outputs but not its sum.
template <class T, class Round>
PL_INLINE void cumsum_axis(const T* __restrict x, T* __restrict out, int64_t outer, int64_t len, int64_t inner,
                           Round round) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const T* __restrict src = x + o * len * inner + i;
      T* __restrict dst = out + o * len * inner + i;
      T sum = T(0);
      for (int64_t k = 0; k < len; ++k) {
        sum = static_cast<T>(sum + src[k * inner]);
        dst[k * inner] = round(sum);
      }
    }
  }
}

}  // namespace pl_cpu
