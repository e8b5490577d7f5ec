// Matrix products for `dot`. float32 results go to the library's precompiled, cache-blocked GEMM
// (src/backends/cpu/gemm: one build per instruction set, chosen at run time) through
// Launch::gemm_f32, so no kernel compiles a GEMM of its own; float64 and integer products use the
// plain loop below.
//
// C[M,N] (=|+=) A[M,K] B[K,N]. Operands are strided views that may lie partly outside their
// arrays (edge blocks): elements outside [row_lo, row_hi) x [col_lo, col_hi) read as zero, and
// output elements outside the valid range are never written. Packing converts float16/bfloat16
// storage to float32 on the way, so a `dot` can read straight from a ref without a tile copy.
#pragma once
#include <stdint.h>

#include "numeric.h"
#include "storage.h"

namespace pl_cpu {

// Element (i, k) is base[offset + i * row_stride + k * col_stride] when i is in [row_lo, row_hi)
// and k in [col_lo, col_hi); zero otherwise. The offset is kept apart from the pointer so that
// no pointer outside the array is ever formed.
template <class T> struct MatrixIn {
  const T* base;
  int64_t offset, row_stride, col_stride;
  int64_t row_lo, row_hi, col_lo, col_hi;
};
template <class T> struct MatrixOut {
  T* base;
  int64_t offset, row_stride, col_stride;
  int64_t row_lo, row_hi, col_lo, col_hi;
};

template <class T> PL_INLINE MatrixIn<T> dense_in(const T* data, int64_t rows, int64_t cols, bool transposed) {
  // A row-major rows x cols tile, optionally read as its transpose (cols x rows).
  if (transposed) return {data, 0, 1, cols, 0, cols, 0, rows};
  return {data, 0, cols, 1, 0, rows, 0, cols};
}
template <class T> PL_INLINE MatrixIn<T> transpose(MatrixIn<T> m) {
  return {m.base, m.offset, m.col_stride, m.row_stride, m.col_lo, m.col_hi, m.row_lo, m.row_hi};
}
template <class T> PL_INLINE MatrixOut<T> dense_out(T* data, int64_t rows, int64_t cols) {
  return {data, 0, cols, 1, 0, rows, 0, cols};
}

// ---- the precompiled float32 GEMM's arguments (Launch::gemm_f32 takes a GemmArgs*) ----

enum GemmStorage : int32_t { kGemmFloat32 = 0, kGemmFloat16 = 1, kGemmBFloat16 = 2 };
template <class T> constexpr GemmStorage gemm_storage();
template <> constexpr GemmStorage gemm_storage<float>() { return kGemmFloat32; }
template <> constexpr GemmStorage gemm_storage<Half>() { return kGemmFloat16; }
template <> constexpr GemmStorage gemm_storage<BFloat16>() { return kGemmBFloat16; }

// A MatrixIn with its storage type as a value.
struct GemmOperand {
  const void* base;
  int64_t offset, row_stride, col_stride;
  int64_t row_lo, row_hi, col_lo, col_hi;
  GemmStorage storage;
};
template <class T> PL_INLINE GemmOperand gemm_operand(const MatrixIn<T>& m) {
  return {m.base, m.offset, m.row_stride, m.col_stride, m.row_lo, m.row_hi, m.col_lo, m.col_hi, gemm_storage<T>()};
}

// Limits on every build's blocking (src/backends/cpu/gemm/blocked_gemm.h checks its own against
// them): the kernel sizes the packing scratch without knowing which build will run.
inline constexpr int64_t kGemmMaxMR = 16, kGemmMaxNR = 64, kGemmMaxMC = 512, kGemmMaxKC = 512, kGemmMaxNC = 2048;
constexpr int64_t gemm_packed_a_floats(int64_t m, int64_t k) {
  return ((m < kGemmMaxMC ? m : kGemmMaxMC) + kGemmMaxMR) * (k < kGemmMaxKC ? k : kGemmMaxKC);
}
constexpr int64_t gemm_packed_b_floats(int64_t n, int64_t k) {
  return ((n < kGemmMaxNC ? n : kGemmMaxNC) + kGemmMaxNR) * (k < kGemmMaxKC ? k : kGemmMaxKC);
}

// C (=|+=) A B for an M x K by K x N product. packed_a and packed_b are the caller's scratch, of
// gemm_packed_a_floats(M, K) and gemm_packed_b_floats(N, K) floats.
struct GemmArgs {
  GemmOperand a, b;
  MatrixOut<float> c;
  int64_t m, n, k;
  bool accumulate;
  float* packed_a;
  float* packed_b;
};

template <class TA, class TB>
PL_INLINE void gemm_f32(const Launch& launch, const MatrixIn<TA>& a, const MatrixIn<TB>& b, const MatrixOut<float>& c,
                        int64_t m, int64_t n, int64_t k, bool accumulate, float* packed_a, float* packed_b) {
  const GemmArgs args{gemm_operand(a), gemm_operand(b), c, m, n, k, accumulate, packed_a, packed_b};
  launch.gemm_f32(&args);
}

// float64 and integer products: C (=|+=) A B with accumulation in Acc (int64 for integers, which
// wraps to the result width exactly as the interpreter's int64 accumulation does).
template <class Acc, class TA, class TB, class TC>
void gemm_simple(const MatrixIn<TA>& a, const MatrixIn<TB>& b, const MatrixOut<TC>& c, int64_t m, int64_t n, int64_t k,
                 bool accumulate) {
  auto at = [](const auto& x, int64_t i, int64_t j) -> Acc {
    const bool ok = i >= x.row_lo && i < x.row_hi && j >= x.col_lo && j < x.col_hi;
    return ok ? static_cast<Acc>(to_compute(x.base[x.offset + i * x.row_stride + j * x.col_stride])) : Acc(0);
  };
  for (int64_t i = c.row_lo; i < c.row_hi && i < m; ++i) {
    for (int64_t j = c.col_lo; j < c.col_hi && j < n; ++j) {
      Acc sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += at(a, i, p) * at(b, p, j);
      TC& dst = c.base[c.offset + i * c.row_stride + j * c.col_stride];
      dst = accumulate ? static_cast<TC>(dst + static_cast<TC>(sum)) : static_cast<TC>(sum);
    }
  }
}

}  // namespace pl_cpu
