// Palladium CUDA device prelude: elementwise semantics shared with the interpreter
// (src/backends/interp/eval_elementwise.cc): NaN-propagating max/min, wrapping integer
// arithmetic, division by zero yielding 0 instead of trapping.
#pragma once
#include "cuda/pl_types.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// max.NaN/min.NaN (sm_80+): one instruction with the same NaN propagation (only the sign of a
// max/min of +0 and -0 may differ from the interpreter's, as between XLA's backends).
PL_DEVICE float pl_max(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
PL_DEVICE float pl_min(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
#else
PL_DEVICE float pl_max(float a, float b) { return (a != a || b != b) ? pl_nan_f() : (a > b ? a : b); }
PL_DEVICE float pl_min(float a, float b) { return (a != a || b != b) ? pl_nan_f() : (a < b ? a : b); }
#endif
PL_DEVICE double pl_max(double a, double b) { return (a != a || b != b) ? pl_nan_d() : (a > b ? a : b); }
PL_DEVICE double pl_min(double a, double b) { return (a != a || b != b) ? pl_nan_d() : (a < b ? a : b); }
template <class T> PL_DEVICE T pl_max(T a, T b) { return a > b ? a : b; }
template <class T> PL_DEVICE T pl_min(T a, T b) { return a < b ? a : b; }

PL_DEVICE float pl_logistic(float x) { return 1.0f / (1.0f + expf(-x)); }

// CompilerParams::fast_math: exp, exp2, log, log2 and logistic on the special-function unit
// (ex2.approx/lg2.approx, as Triton lowers them), a few float32 ulps instead of the libdevice
// sequences; exp(x) = 2^(x log2 e) also carries the rounding of x log2 e (|x| * 6e-8 relative).
// exp2 flushes results below 2^-126 to zero (.ftz): without it ptxas wraps every MUFU.EX2 in a
// compare and two multiplies for subnormal results, three of the attention forward's fourteen
// instructions per score. H100, stop 36 jobs 2-3 (`h100_stop36_job3_*`, same binary, two rounds):
// the d64 s2048 forward 496M -> 392M instructions (cuDNN's: 280M), 0.823/0.818 -> 0.760/0.747
// ms; s8192 3.10 -> 2.82-2.87; d128 s8192 2.00 -> 1.88-1.89; forward+backward 2-5% faster.
PL_DEVICE float pl_fast_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
PL_DEVICE float pl_fast_log2(float x) {
  float r;
  asm("lg2.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
// Division by the full-range approximation (2 ulps over the whole range, as Triton lowers float32
// division) instead of the correctly rounded sequence with its slow path: the attention forward's
// epilogue divides 64 accumulators a thread by the row sums. H100, stop 34 job 4, same binary
// (against the IEEE division through a switch since removed), two rounds: blocks 128 x 128 d128
// s2048 0.592/0.589 -> 0.571/0.571 ms, causal 0.423/0.424 -> 0.396/0.398; d64 block_k 64 s2048
// 0.847/0.829 -> 0.819/0.815; s8192 within 0-3%.
PL_DEVICE float pl_fast_div(float a, float b) {
  float r;
  asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
// exp(a - b) is a subtraction, this multiply and the MUFU. Folding the first two into one FFMA,
// 2^(a log2 e - b log2 e), needs a guard where b log2 e overflows (the seed's mask value, -0.7
// FLT_MAX, is a fully masked row's max); behind a per-thread branch it ran 2-7% slower in the
// attention forward (H100, stop 36 job 5, `h100_stop36_job5_attn_on*` against `_fma0*`).
PL_DEVICE float pl_fast_exp(float x) { return pl_fast_exp2(x * 1.4426950408889634f); }
// b log2(e) kept finite: the folded softmax exp, exp2(fma(x, c log2e, -b log2e)) (emit_elementwise.cc).
PL_DEVICE float pl_scaled_log2e(float b) {
  const float t = b * 1.4426950408889634f;
  return isinf(t) ? copysignf(3.402823466e38f, t) : t;  // NaN stays NaN
}
// The factor k and offset bt of one row of a lazily scaled select's softmax exp (lazy_scale.cc,
// emit_elementwise.cc), exp(x (unscaled ? c : 1) - b) = exp2(fma(x, k, -bt)): where the flag holds
// (nothing in the block masked) k = c log2e, bt = b log2e, the unmasked softmax's form; in the
// mixed blocks k = log2e, except in a row whose max b is past FLT_MAX / log2e (a wholly masked
// row's, the seed's mask value -0.7 FLT_MAX): there every x <= b differs from b by 0 or by at least
// 2^104 (b's ulp), so k = 1, bt = b gives exp2(x - b) = exp(x - b) exactly, 1 or 0, as the
// interpreter has it.
PL_DEVICE void pl_lazy_exp2_row(float b, bool unscaled, float c_log2e, float& k, float& bt) {
  const float t = b * 1.4426950408889634f;
  const bool beyond = !unscaled && isinf(t);
  k = unscaled ? c_log2e : beyond ? 1.0f : 1.4426950408889634f;
  bt = beyond ? b : isinf(t) ? copysignf(3.402823466e38f, t) : t;
}
PL_DEVICE float pl_fast_log(float x) { return pl_fast_log2(x) * 0.6931471805599453f; }
PL_DEVICE float pl_fast_logistic(float x) { return 1.0f / (1.0f + pl_fast_exp(-x)); }
PL_DEVICE double pl_logistic(double x) { return 1.0 / (1.0 + exp(-x)); }
PL_DEVICE float pl_rsqrt(float x) { return 1.0f / sqrtf(x); }
PL_DEVICE double pl_rsqrt(double x) { return 1.0 / sqrt(x); }

// Integer add/sub/mul/neg wrap at the type's width: computed in the unsigned type of the same
// width (or in int for 8/16-bit types, then narrowed), never as signed overflow.
template <class T> struct pl_unsigned_of { typedef unsigned int type; };
template <> struct pl_unsigned_of<pl_i64> { typedef pl_u64 type; };
template <> struct pl_unsigned_of<pl_u64> { typedef pl_u64 type; };
template <class T> PL_DEVICE T pl_wadd(T a, T b) {
  typedef typename pl_unsigned_of<T>::type U;
  return (T)((U)a + (U)b);
}
template <class T> PL_DEVICE T pl_wsub(T a, T b) {
  typedef typename pl_unsigned_of<T>::type U;
  return (T)((U)a - (U)b);
}
template <class T> PL_DEVICE T pl_wmul(T a, T b) {
  typedef typename pl_unsigned_of<T>::type U;
  return (T)((U)a * (U)b);
}
template <class T> PL_DEVICE T pl_wneg(T a) {
  typedef typename pl_unsigned_of<T>::type U;
  return (T)((U)0 - (U)a);
}
template <class T> PL_DEVICE T pl_wabs(T a) { return a < (T)0 ? pl_wneg(a) : a; }
// Division by zero gives 0 (the interpreter reports it); x / -1 wraps (INT_MIN / -1 == INT_MIN)
// and x % -1 is 0 for the signed types, where hardware division would overflow.
template <class T> PL_DEVICE T pl_idiv(T a, T b) {
  if (b == (T)0) return (T)0;
  if ((T)-1 < (T)0 && b == (T)-1) return pl_wneg(a);
  return (T)(a / b);
}
template <class T> PL_DEVICE T pl_irem(T a, T b) {
  if (b == (T)0) return (T)0;
  if ((T)-1 < (T)0 && b == (T)-1) return (T)0;
  return (T)(a % b);
}

// float -> integer casts truncate toward zero and saturate to the type's range; NaN gives 0.
template <class T> struct pl_int_range;
#define PL_INT_RANGE(T, LO, HI, MIN, MAX)                  \
  template <> struct pl_int_range<T> {                     \
    static constexpr double lo = LO, hi = HI;              \
    static constexpr T min_value = MIN, max_value = MAX;   \
  };
PL_INT_RANGE(pl_i8, -128.0, 127.0, -128, 127)
PL_INT_RANGE(pl_i16, -32768.0, 32767.0, -32768, 32767)
PL_INT_RANGE(pl_i32, -2147483648.0, 2147483647.0, (-2147483647 - 1), 2147483647)
PL_INT_RANGE(pl_i64, -9223372036854775808.0, 9223372036854775807.0, (-9223372036854775807ll - 1), 9223372036854775807ll)
PL_INT_RANGE(pl_u8, 0.0, 255.0, 0, 255)
PL_INT_RANGE(pl_u32, 0.0, 4294967295.0, 0u, 4294967295u)
#undef PL_INT_RANGE
template <class T> PL_DEVICE T pl_f2i(double x) {
  if (x != x) return (T)0;
  x = trunc(x);
  if (x <= pl_int_range<T>::lo) return pl_int_range<T>::min_value;
  if (x >= pl_int_range<T>::hi) return pl_int_range<T>::max_value;
  return (T)(pl_i64)x;
}
template <class T> PL_DEVICE T pl_f2i(float x) { return pl_f2i<T>((double)x); }

// Argmax/argmin steps: the first index of the extreme value; a NaN wins at its first index.
template <class T> PL_DEVICE bool pl_isnan(T x) { return x != x; }
template <class T> PL_DEVICE void pl_argmax_step(T v, int k, T& acc, int& best) {
  if (pl_isnan(acc)) return;
  if (pl_isnan(v) || v > acc) { acc = v; best = k; }
}
template <class T> PL_DEVICE void pl_argmin_step(T v, int k, T& acc, int& best) {
  if (pl_isnan(acc)) return;
  if (pl_isnan(v) || v < acc) { acc = v; best = k; }
}
// Combining two partial (value, index) results of disjoint index sets.
template <class T> PL_DEVICE void pl_argmax_merge(T v, int k, T& acc, int& best) {
  const bool an = pl_isnan(acc), vn = pl_isnan(v);
  if (an || vn) {
    if (vn && (!an || k < best)) { acc = v; best = k; }
    return;
  }
  if (v > acc || (v == acc && k < best)) { acc = v; best = k; }
}
template <class T> PL_DEVICE void pl_argmin_merge(T v, int k, T& acc, int& best) {
  const bool an = pl_isnan(acc), vn = pl_isnan(v);
  if (an || vn) {
    if (vn && (!an || k < best)) { acc = v; best = k; }
    return;
  }
  if (v < acc || (v == acc && k < best)) { acc = v; best = k; }
}
