// Vectorisable float32 transcendental functions, accurate to about 1-2 ulp over their whole
// domains, with IEEE special values (NaN in -> NaN out, overflow -> inf, underflow -> 0).
// Written branch-free (selects, not ifs) so a loop calling them vectorises. float64 versions call
// the C library (the interpreter's own definition). Polynomial coefficients are near-minimax
// fits made for this file (weighted least squares with Lawson iterations against 40-digit
// references); each comment gives the fitted interval.
#pragma once
#include <stdint.h>

#include "numeric.h"

namespace pl_cpu {

#if defined(__FMA__) || defined(__aarch64__)
#define PL_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#define PL_FMA(a, b, c) __builtin_fma(a, b, c)
#else  // no fused multiply-add in hardware: a libm call would be far slower than two roundings
#define PL_FMAF(a, b, c) ((a) * (b) + (c))
#define PL_FMA(a, b, c) ((a) * (b) + (c))
#endif

// 2^n for integer n in [-252, 254], as a product of two normal floats (so both halves stay
// representable and a subnormal result is rounded once, by the last multiply).
PL_INLINE float scale_by_power_of_two(float x, int32_t n) {
  const int32_t half = n >> 1;
  const float a = bits_as<float>(static_cast<uint32_t>(half + 127) << 23);
  const float b = bits_as<float>(static_cast<uint32_t>(n - half + 127) << 23);
  return x * a * b;
}

// e^x. x = n ln2 + r with |r| <= ln2/2 (two-part ln2, exact product for |n| <= 2^11), then
// e^r = 1 + r + r^2 P(r), P fitted on [-ln2/2, ln2/2] (relative error 3e-9).
PL_INLINE float exp(float x) {
  const float clamped = x > 89.0f ? 89.0f : (x < -104.0f ? -104.0f : x);
  const float n = __builtin_rintf(clamped * 1.44269504f);
  float r = PL_FMAF(n, -0.693145752f, clamped);  // ln2 high part: 16 significant bits
  r = PL_FMAF(n, -1.42860677e-06f, r);           // ln2 low part
  float p = PL_FMAF(0.00138146045f, r, 0.00836871065f);
  p = PL_FMAF(p, r, 0.0416683875f);
  p = PL_FMAF(p, r, 0.166665207f);
  p = PL_FMAF(p, r, 0.499999935f);
  const float er = PL_FMAF(p, r * r, r) + 1.0f;
  float y = scale_by_power_of_two(er, static_cast<int32_t>(n));
  y = x > 88.7228394f ? __builtin_inff() : y;
  y = x < -103.972084f ? 0.0f : y;
  return x != x ? x : y;
}

// 2^x = 2^n 2^r, |r| <= 1/2, 2^r = 1 + r P(r) fitted on [-1/2, 1/2] (relative error 2e-9).
PL_INLINE float exp2(float x) {
  const float clamped = x > 129.0f ? 129.0f : (x < -151.0f ? -151.0f : x);
  const float n = __builtin_rintf(clamped);
  const float r = clamped - n;  // exact
  float p = PL_FMAF(0.000153533573f, r, 0.00133988762f);
  p = PL_FMAF(p, r, 0.00961843739f);
  p = PL_FMAF(p, r, 0.0555033247f);
  p = PL_FMAF(p, r, 0.240226479f);
  p = PL_FMAF(p, r, 0.693147203f);
  float y = scale_by_power_of_two(PL_FMAF(p, r, 1.0f), static_cast<int32_t>(n));
  y = x >= 128.0f ? __builtin_inff() : y;
  y = x < -150.0f ? 0.0f : y;
  return x != x ? x : y;
}

// Splits a positive finite x into 2^e (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)) and returns
// log(1 + f) - f as `tail` so that log(1 + f) = f + tail keeps f exact. With s = f / (2 + f),
// log(1 + f) = f - s (f - R), R = 2s^2/3 + 2s^4/5 + ... (series of atanh; |s| <= 0.172 so four
// terms leave a relative error below 1e-9).
struct LogParts {
  float e, f, tail;
};
PL_INLINE LogParts log_parts(float x) {
  // Subnormals: scale into the normal range first.
  const bool tiny = x < 0x1p-126f;
  const float xs = tiny ? x * 0x1p23f : x;
  const uint32_t bits = bits_as<uint32_t>(xs);
  int32_t e = static_cast<int32_t>(bits >> 23) - 127 - (tiny ? 23 : 0);
  // Mantissa in [1, 2); move the upper part (above sqrt 2) down an octave.
  uint32_t mbits = (bits & 0x007fffffu) | 0x3f800000u;
  const bool high = mbits > 0x3fb504f3u;
  mbits -= high ? 0x00800000u : 0u;
  e += high ? 1 : 0;
  const float f = bits_as<float>(mbits) - 1.0f;  // exact
  const float s = f / (2.0f + f);
  const float z = s * s;
  float r = PL_FMAF(z, 0.222222222f, 0.285714286f);
  r = PL_FMAF(r, z, 0.4f);
  r = PL_FMAF(r, z, 0.666666667f);
  r *= z;
  const float half_f2 = 0.5f * f * f;
  const float tail = PL_FMAF(s, half_f2 + r, -half_f2);
  return {static_cast<float>(e), f, tail};
}

PL_INLINE float log_special(float x, float y) {
  y = x == 0.0f ? -__builtin_inff() : y;
  y = x == __builtin_inff() ? x : y;
  return (x < 0.0f || x != x) ? __builtin_nanf("") : y;
}

PL_INLINE float log(float x) {
  const LogParts p = log_parts(x);
  // ln2 in two parts; e * high is exact for |e| < 2^9.
  const float y = PL_FMAF(p.e, 0.693145752f, p.f + PL_FMAF(p.e, 1.42860677e-06f, p.tail));
  return log_special(x, y);
}

PL_INLINE float log2(float x) {
  const LogParts p = log_parts(x);
  const float ln_m = p.f + p.tail;
  const float y = p.e + ln_m * 1.44269504f;
  return log_special(x, y);
}

// log(1 + x) with the rounding of 1 + x compensated: log(u) * x / (u - 1), u = fl(1 + x).
PL_INLINE float log1p(float x) {
  const float u = 1.0f + x;
  const float d = u - 1.0f;
  const float lu = log(u);
  float y = d == 0.0f ? x : lu * (x / d);
  y = u == __builtin_inff() ? u : y;
  y = x == -1.0f ? -__builtin_inff() : y;
  return (x < -1.0f || x != x) ? __builtin_nanf("") : y;
}

// sin and cos: x = j pi/2 + r with |r| <= pi/4, then double-precision Taylor polynomials of r
// (truncation error < 1e-11) rounded once to float (error < 0.6 ulp). For |x| < 2^28 the reduction
// subtracts j pi/2 in three double parts (exact with fused multiply-add; without it, a 33-bit
// split keeps it exact for |x| < 2^20). Larger |x| = m 2^e multiplies the 24-bit m by the 96 bits
// of 2/pi that matter at that exponent (Payne and Hanek's method), in 64-bit integer pieces that
// vectorise; every lane computes both and selects.
struct QuadrantReduction {
  double r;
  int32_t quadrant;
};
// Bits of 2/pi, most significant first: 0.a2f9836e 4e441529 ... in hexadecimal.
inline constexpr uint32_t kTwoOverPiBits[10] = {0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0, 0xdb629599,
                                                0x3c439041, 0xfe5163ab, 0xdebbc561, 0xb7246e3a, 0x424dd2e0};
PL_INLINE QuadrantReduction reduce_huge_by_half_pi(float x) {
  const uint32_t magnitude_bits = bits_as<uint32_t>(x) & 0x7fffffffu;
  const uint64_t m = (magnitude_bits & 0x7fffffu) | 0x800000u;  // |x| = m 2^e, normal here
  const int32_t e = static_cast<int32_t>(magnitude_bits >> 23) - 150;
  // Bits of 2/pi above index e - 1 only add multiples of 4 to x 2/pi; take the 96 from there on.
  const int32_t first = e - 2 > 0 ? e - 2 : 0;
  const int32_t word = first >> 5, shift = first & 31;
  auto window = [&](int32_t k) {
    const uint64_t pair = (static_cast<uint64_t>(kTwoOverPiBits[word + k]) << 32) | kTwoOverPiBits[word + k + 1];
    return static_cast<uint32_t>(pair >> (32 - shift));
  };
  // m * window = p0 2^64 + p1 2^32 + p2 = x 2/pi * 2^94 (mod 2^96).
  const uint64_t p0 = m * window(0), p1 = m * window(1), p2 = m * window(2);
  const uint64_t low = p2 + (p1 << 32);
  const uint64_t high = p0 + (p1 >> 32) + (low < p2 ? 1u : 0u);
  int32_t quadrant = static_cast<int32_t>((high >> 30) & 3u);
  double fraction = static_cast<double>(high & 0x3fffffffu) * 0x1p-30 + static_cast<double>(low) * 0x1p-94;
  quadrant += fraction >= 0.5 ? 1 : 0;
  fraction -= fraction >= 0.5 ? 1.0 : 0.0;
  const double r = fraction * 1.5707963267948966;
  return {x < 0 ? -r : r, x < 0 ? -quadrant : quadrant};
}
PL_INLINE QuadrantReduction reduce_by_half_pi(float x) {
  const double xd = x;
  const double j = __builtin_rint(xd * 0.6366197723675814);
#if defined(__FMA__) || defined(__aarch64__)
  double r = PL_FMA(j, -1.5707963267948966, xd);
  r = PL_FMA(j, -6.123233995736766e-17, r);
  r = PL_FMA(j, 1.4973849048591698e-33, r);
  const float limit = 0x1p28f;
#else
  double r = xd - j * 1.5707963267341256;  // 33 leading bits of pi/2: j * part is exact
  r -= j * 6.077100506506192e-11;
  r -= j * 2.0222662487959506e-21;
  const float limit = 0x1p20f;
#endif
  const QuadrantReduction huge = reduce_huge_by_half_pi(x);
  const bool small = (x < 0 ? -x : x) < limit;
  return {small ? r : huge.r, small ? static_cast<int32_t>(static_cast<int64_t>(j) & 3) : (huge.quadrant & 3)};
}
PL_INLINE double sin_poly(double r) {
  const double z = r * r;
  double p = PL_FMA(z, -2.505210838544172e-08, 2.7557319223985893e-06);
  p = PL_FMA(p, z, -1.984126984126984e-04);
  p = PL_FMA(p, z, 8.333333333333333e-03);
  p = PL_FMA(p, z, -1.6666666666666666e-01);
  p = PL_FMA(p, z, 1.0);
  return r * p;
}
PL_INLINE double cos_poly(double r) {
  const double z = r * r;
  double p = PL_FMA(z, 2.08767569878681e-09, -2.755731922398589e-07);
  p = PL_FMA(p, z, 2.48015873015873e-05);
  p = PL_FMA(p, z, -1.388888888888889e-03);
  p = PL_FMA(p, z, 4.1666666666666664e-02);
  p = PL_FMA(p, z, -0.5);
  return PL_FMA(p, z, 1.0);
}
PL_INLINE float sin(float x) {
  const QuadrantReduction q = reduce_by_half_pi(x);
  const double v = (q.quadrant & 1) ? cos_poly(q.r) : sin_poly(q.r);
  const float y = static_cast<float>((q.quadrant & 2) ? -v : v);
  return x == 0.0f ? x : ((x - x == 0.0f) ? y : __builtin_nanf(""));  // sin(-0) = -0
}
PL_INLINE float cos(float x) {
  const QuadrantReduction q = reduce_by_half_pi(x);
  const double v = (q.quadrant & 1) ? sin_poly(q.r) : cos_poly(q.r);
  const float y = static_cast<float>(((q.quadrant + 1) & 2) ? -v : v);
  return (x - x == 0.0f) ? y : __builtin_nanf("");
}

// tanh: x + x^3 P(x^2) for |x| < 0.625 (P fitted there), else 1 - 2 / (e^{2|x|} + 1).
PL_INLINE float tanh(float x) {
  const float a = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = PL_FMAF(z, 0.00214752761f, -0.00818266295f);
  p = PL_FMAF(p, z, 0.0217029623f);
  p = PL_FMAF(p, z, -0.0539472033f);
  p = PL_FMAF(p, z, 0.133332098f);
  p = PL_FMAF(p, z, -0.333333309f);
  const float small = PL_FMAF(p * z, a, a);
  const float e = exp(2.0f * (a > 20.0f ? 20.0f : a));
  const float large = 1.0f - 2.0f / (e + 1.0f);
  const float y = __builtin_copysignf(a < 0.625f ? small : large, x);  // odd, and keeps -0
  return x != x ? x : y;
}

// 1 / (1 + e^-x), written as e^x / (1 + e^x) for negative x so e^-x cannot overflow early.
PL_INLINE float logistic(float x) {
  const float e = exp(x < 0.0f ? x : -x);
  const float y = (x < 0.0f ? e : 1.0f) / (1.0f + e);
  return x != x ? x : y;
}

// erf, in double for accuracy: x P(x^2) for |x| <= 0.9; 1 - e^{-x^2} Q(t), t = 1 / (1 + |x|/2),
// for 0.9 < |x| < 4 (both fitted there, relative error < 1e-12); +-1 beyond (erf(3.92) rounds to 1).
PL_INLINE float erf(float x) {
  const double xd = x, a = xd < 0 ? -xd : xd, z = xd * xd;
  double p = PL_FMA(z, 1.1484969084443741e-06, -1.4213486194514235e-05);
  p = PL_FMA(p, z, 0.00011998497279885889);
  p = PL_FMA(p, z, -0.00085456447601180846);
  p = PL_FMA(p, z, 0.0052239026561222424);
  p = PL_FMA(p, z, -0.026866158806850574);
  p = PL_FMA(p, z, 0.11283791576851979);
  p = PL_FMA(p, z, -0.37612638900289308);
  p = PL_FMA(p, z, 1.1283791670953649);
  const double small = xd * p;
  const double t = 1.0 / (1.0 + 0.5 * (a < 4.0 ? a : 4.0));
  double q = PL_FMA(t, 0.040252208848796218, -0.19773404812531772);
  q = PL_FMA(q, t, 0.34720805276552025);
  q = PL_FMA(q, t, -0.15683253861181307);
  q = PL_FMA(q, t, -0.23607808482113166);
  q = PL_FMA(q, t, 0.2383150525849981);
  q = PL_FMA(q, t, -0.069304146805425917);
  q = PL_FMA(q, t, 0.23619710724325144);
  q = PL_FMA(q, t, 0.23150621410155009);
  q = PL_FMA(q, t, 0.28460980096166566);
  q = PL_FMA(q, t, 0.28185329062742442);
  q = PL_FMA(q, t, 1.0358353126898104e-05);
  const double zc = a < 4.0 ? z : 16.0;
  double large = 1.0 - static_cast<double>(exp(static_cast<float>(-zc))) * q;
  // exp in float loses ~1e-7 relative on e^{-x^2}; erfc <= 0.16 here, so the result stays < 1 ulp.
  large = a >= 4.0 ? 1.0 : large;
  large = xd < 0 ? -large : large;
  const float y = static_cast<float>(a <= 0.9 ? small : large);
  return x != x ? x : y;
}

PL_INLINE float rsqrt(float x) { return static_cast<float>(1.0 / __builtin_sqrt(static_cast<double>(x))); }
PL_INLINE float pow(float a, float b) {
  return static_cast<float>(__builtin_pow(static_cast<double>(a), static_cast<double>(b)));
}

// float64: the C library, as the interpreter.
PL_INLINE double exp(double x) { return __builtin_exp(x); }
PL_INLINE double exp2(double x) { return __builtin_exp2(x); }
PL_INLINE double log(double x) { return __builtin_log(x); }
PL_INLINE double log2(double x) { return __builtin_log2(x); }
PL_INLINE double log1p(double x) { return __builtin_log1p(x); }
PL_INLINE double sin(double x) { return __builtin_sin(x); }
PL_INLINE double cos(double x) { return __builtin_cos(x); }
PL_INLINE double tanh(double x) { return __builtin_tanh(x); }
PL_INLINE double erf(double x) { return __builtin_erf(x); }
PL_INLINE double logistic(double x) { return 1.0 / (1.0 + __builtin_exp(-x)); }
PL_INLINE double rsqrt(double x) { return 1.0 / __builtin_sqrt(x); }
PL_INLINE double pow(double a, double b) { return __builtin_pow(a, b); }

}  // namespace pl_cpu
