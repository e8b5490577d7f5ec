// How each dtype is stored in arrays and carried in generated code (its "compute" type):
//   bool      stored as one byte 0/1 (Bool8)       computed as bool
//   float16   stored as IEEE binary16 bits (Half)  computed as float, rounded after every op
//   bfloat16  stored as bfloat16 bits (BFloat16)   computed as float, rounded after every op
//   others    stored and computed as themselves (int8_t ... double)
#pragma once
#include <stdint.h>

#include "numeric.h"

namespace pl_cpu {

struct Bool8 {
  uint8_t value;
};
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

PL_INLINE bool to_compute(Bool8 b) { return b.value != 0; }
PL_INLINE float to_compute(Half h) { return half_bits_to_float(h.bits); }
PL_INLINE float to_compute(BFloat16 h) { return bf16_bits_to_float(h.bits); }
template <class T> PL_INLINE T to_compute(T x) { return x; }

// Compute value -> storage. float16/bfloat16 values are already rounded, so conversion is exact.
template <class S> struct StorageOf {
  template <class C> static PL_INLINE S from(C v) { return static_cast<S>(v); }
};
template <> struct StorageOf<Bool8> {
  static PL_INLINE Bool8 from(bool v) { return Bool8{static_cast<uint8_t>(v ? 1 : 0)}; }
};
template <> struct StorageOf<Half> {
  static PL_INLINE Half from(float v) { return Half{float_to_half_bits(v)}; }
};
template <> struct StorageOf<BFloat16> {
  static PL_INLINE BFloat16 from(float v) { return BFloat16{float_to_bf16_bits(v)}; }
};
template <class S, class C> PL_INLINE S to_storage(C v) { return StorageOf<S>::from(v); }

}  // namespace pl_cpu
