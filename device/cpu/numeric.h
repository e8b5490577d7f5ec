// Scalar semantics of the IR's dtypes, matching the interpreter (src/core/dtype.cc and
// src/backends/interp/eval_elementwise.cc): float16/bfloat16 values live in float and are rounded
// to nearest even after every op; casts of floats to integers truncate and saturate (NaN gives 0);
// integer division truncates. Functions are branch-light so loops over tiles vectorise.
#pragma once
#include <stdint.h>

#include "abi.h"

namespace pl_cpu {

template <class To, class From> PL_INLINE To bits_as(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  __builtin_memcpy(&to, &from, sizeof to);
  return to;
}

// ---- float16 (IEEE binary16) ----

PL_INLINE float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, fraction = h & 0x3ffu;
  // Subnormal halves are fraction * 2^-24, exact in float; the rest re-bias the exponent.
  const float subnormal = static_cast<float>(fraction) * 0x1p-24f;
  const uint32_t normal = exponent == 0x1f ? (0x7f800000u | (fraction << 13)) : (((exponent + 112u) << 23) | (fraction << 13));
  const uint32_t magnitude = exponent == 0 ? bits_as<uint32_t>(subnormal) : normal;
  return bits_as<float>(sign | magnitude);
}

// Rounds to nearest even. NaN becomes the quiet NaN 0x7e00 with its sign, as the interpreter's
// double-to-half conversion does.
PL_INLINE uint16_t float_to_half_bits(float f) {
  const uint32_t bits = bits_as<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  // Below 2^-14 the result is subnormal: adding 0.5f lines the half's 2^-24 unit up with the
  // float's last mantissa bit, so the hardware's own rounding is the half rounding.
  const float shifted = bits_as<float>(magnitude) + 0.5f;
  const uint32_t subnormal = bits_as<uint32_t>(shifted) - 0x3f000000u;
  // Normal: re-bias the exponent and round the 13 dropped bits to nearest even; a carry may
  // run into the exponent and up to infinity, which is right.
  const uint32_t odd = (magnitude >> 13) & 1u;
  const uint32_t normal = (magnitude - (112u << 23) + 0xfffu + odd) >> 13;
  uint32_t out = magnitude < 0x38800000u ? subnormal : normal;
  out = magnitude >= 0x47800000u ? 0x7c00u : out;  // 2^16 and above (and infinity): infinity
  out = magnitude > 0x7f800000u ? 0x7e00u : out;   // NaN
  return static_cast<uint16_t>(sign | out);
}

// ---- bfloat16 ----

PL_INLINE float bf16_bits_to_float(uint16_t h) { return bits_as<float>(static_cast<uint32_t>(h) << 16); }

PL_INLINE uint16_t float_to_bf16_bits(float f) {
  const uint32_t bits = bits_as<uint32_t>(f);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t nan = ((bits >> 16) & 0x8000u) | 0x7fc0u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// A double rounded to float by truncation with a sticky last bit ("round to odd"): rounding that
// float once more to a format of 2+ fewer bits gives the correctly rounded result, so
// double -> float16/bfloat16 below rounds once, as the interpreter does.
PL_INLINE float double_to_float_round_odd(double d) {
  const float nearest = static_cast<float>(d);
  const double back = static_cast<double>(nearest);
  uint32_t bits = bits_as<uint32_t>(nearest);
  const bool inexact = back != d && d == d;
  const bool overshot = (back < 0 ? -back : back) > (d < 0 ? -d : d);
  bits -= (inexact && overshot) ? 1u : 0u;
  bits |= inexact ? 1u : 0u;
  return d == d ? bits_as<float>(bits) : nearest;
}

PL_INLINE uint16_t double_to_half_bits(double d) { return float_to_half_bits(double_to_float_round_odd(d)); }
PL_INLINE uint16_t double_to_bf16_bits(double d) { return float_to_bf16_bits(double_to_float_round_odd(d)); }

// Values of float16/bfloat16 dtype are carried in float, rounded after every op.
PL_INLINE float round_half(float x) { return half_bits_to_float(float_to_half_bits(x)); }
PL_INLINE float round_half(double x) { return half_bits_to_float(double_to_half_bits(x)); }
PL_INLINE float round_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }
PL_INLINE float round_bf16(double x) { return bf16_bits_to_float(double_to_bf16_bits(x)); }

// ---- float -> integer casts ----

// Truncates toward zero and saturates to T's range; NaN gives 0 (the interpreter's rule).
template <class T> PL_INLINE T float_to_int(double x) {
  constexpr bool is_signed = T(-1) < T(0);
  constexpr int bits = static_cast<int>(sizeof(T) * 8);
  constexpr uint64_t magnitude = is_signed ? (uint64_t{1} << (bits - 1)) : 0;
  constexpr T largest = is_signed ? static_cast<T>(magnitude - 1) : static_cast<T>(~T(0));
  constexpr T smallest = is_signed ? static_cast<T>(T(0) - static_cast<T>(magnitude - 1) - T(1)) : T(0);
  constexpr double hi = static_cast<double>(largest), lo = static_cast<double>(smallest);
  if (x != x) return T(0);
  const double t = __builtin_trunc(x);
  if (t <= lo) return smallest;
  if (t >= hi) return largest;
  return static_cast<T>(static_cast<int64_t>(t));
}

// ---- integer arithmetic (wrapping; -fwrapv makes signed overflow defined) ----

// Truncating division; division by zero gives 0 (the interpreter raises an Error; the compiled
// backend does not check, but must not trap).
template <class T> PL_INLINE T int_div(T a, T b) {
  if (b == T(0)) return T(0);
  if (T(-1) < T(0) && b == T(-1)) return static_cast<T>(T(0) - a);
  return static_cast<T>(a / b);
}
template <class T> PL_INLINE T int_rem(T a, T b) {
  if (b == T(0) || (T(-1) < T(0) && b == T(-1))) return T(0);
  return static_cast<T>(a % b);
}

// ---- NaN-propagating max/min (jnp.maximum/minimum); ties keep the second operand, as the interpreter ----

template <class T> PL_INLINE T float_max(T a, T b) { return ((a > b) | (a != a)) ? a : b; }
template <class T> PL_INLINE T float_min(T a, T b) { return ((a < b) | (a != a)) ? a : b; }

}  // namespace pl_cpu
