// The cpu backend's float32 GEMM: a packed, cache-blocked product around a register-blocked
// micro-kernel (the BLIS/Goto structure). Compiled into the library once per instruction set
// (gemm_avx512_*.cc, gemm_avx2.cc, gemm_baseline.cc), each inside an anonymous namespace so the
// builds cannot be mixed up at link time; gemm_dispatch.cc picks one for the CPU at run time.
//
// Include only from those files, after <stdint.h> (and <immintrin.h> on x86) and inside `namespace {`.
#include "device/cpu/gemm.h"

namespace pl_cpu {

// ---- micro-kernel geometry, per instruction set ----
// AVX-512: 6 x 64 (24 of the 32 registers accumulate; per k, 4 loads of B and 6 broadcasts of A
// feed 24 multiply-adds), faster than 8 x 32 on Zen 4. AVX2: the classic 6 x 16 (12 of 16
// registers). An MC x KC block of A stays in L2 and KC x NC of B in L3. KC is long (384, 512):
// every KC step reads and writes all of C once more, which costs most where L3 is shared.
// PL_GEMM_AVX512_TILE, set by the including file, picks the AVX-512 geometry: 1 = 6 x 64, KC 384
// (chosen on AMD, where 512-bit FMAs issue one per cycle and L3 is shared between tenants); 2 =
// 8 x 32, KC 512 (chosen elsewhere). B's 512 x 32 panel (64 KB) no longer stays in L1, so the
// micro-kernel asks for its rows 16 k steps ahead (PL_GEMM_PREFETCH_B_STEPS); half the passes over
// C pay for that. Emerald Rapids, 1 thread, one harness alternating the builds (stop 54; minimum of
// 30 and 12 rounds): 1024 x 1024 x 2048 inside 2048-wide arrays 28.46 -> 28.14 ms (OpenBLAS 29.13),
// 2048^3 112.0 -> 110.0 ms (OpenBLAS 111.0); KC 512 without the prefetch, in single runs, 5% slower
// than KC 256 (30.2 against 28.8 ms on the first shape).
#if defined(__AVX512F__) && PL_GEMM_AVX512_TILE == 1
inline constexpr int kGemmLanes = 16, kGemmMR = 6, kGemmVectorsPerRow = 4;
inline constexpr int64_t kGemmKC = 384;
#elif defined(__AVX512F__)
inline constexpr int kGemmLanes = 16, kGemmMR = 8, kGemmVectorsPerRow = 2;
inline constexpr int64_t kGemmKC = 512;
#define PL_GEMM_PREFETCH_B_STEPS 16
#define PL_GEMM_IN_PLACE_MAX_K 256  // A read in place was measured with KC 256 here
#elif defined(__AVX__)
inline constexpr int kGemmLanes = 8, kGemmMR = 6, kGemmVectorsPerRow = 2;
inline constexpr int64_t kGemmKC = 512;
#else
inline constexpr int kGemmLanes = 4, kGemmMR = 6, kGemmVectorsPerRow = 2;
inline constexpr int64_t kGemmKC = 256;
#endif
inline constexpr int kGemmNR = kGemmLanes * kGemmVectorsPerRow;
inline constexpr int64_t kGemmMC = 32 * kGemmMR, kGemmNC = kGemmMaxNC;
#if defined(PL_GEMM_IN_PLACE_MAX_K)
inline constexpr int64_t kGemmInPlaceMaxK = PL_GEMM_IN_PLACE_MAX_K;
#else
inline constexpr int64_t kGemmInPlaceMaxK = kGemmKC;
#endif
// The kernels size the packing scratch from gemm.h's limits (gemm_packed_a_floats, ...).
static_assert(kGemmMR <= kGemmMaxMR && kGemmNR <= kGemmMaxNR && kGemmMC <= kGemmMaxMC && kGemmKC <= kGemmMaxKC,
              "this build's blocking exceeds the packing scratch that kernels allocate");
typedef float GemmVector __attribute__((vector_size(kGemmLanes * sizeof(float))));

constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Writes (or adds) one accumulator vector of a micro-tile to C at p.
template <class V> PL_INLINE void gemm_write_vector(float* p, V out, bool accumulate) {
  if (accumulate) {
    V old;
    __builtin_memcpy(&old, p, sizeof old);
    out += old;
  }
  __builtin_memcpy(p, &out, sizeof out);
}

// Asks for the MR x NR tile of C at c (row stride ldc) in L2 before the k loop that ends by
// reading and writing it. Its rows lie a whole row of C apart (8 KB at 2048 columns), beyond the
// hardware prefetchers' page-bounded strides, so without this a kernel can end on MR misses to L3;
// the k loop (thousands of cycles) hides the prefetch. 2048^3 in 512 x 512 blocks, 1 thread, Xeon (AVX-512, stop 40):
// 116.8 -> 111.2 ms and 121.3 -> 118.3 in two runs against OpenBLAS's 99.8 and 106.9 ms;
// 1024^3: 15.3 -> 14.2 ms against 14.0.
PL_INLINE void gemm_prefetch_c_tile(const float* c, int64_t ldc) {
  for (int r = 0; r < kGemmMR; ++r) {
    for (int j = 0; j < kGemmNR; j += 16) __builtin_prefetch(c + r * ldc + j, 1, 2);  // 16 floats: a line
    __builtin_prefetch(c + r * ldc + kGemmNR - 1, 1, 2);  // the row's last line, where c is not aligned
  }
}

// C tile (MR x NR, row stride ldc) (=|+=) sum over k of a_panel[k][0..MR) (x) b_panel[k][0..NR).
// Contraction to fused multiply-add is asked for here (kernels compile with -ffp-contract=off, so
// that elementwise code rounds like the interpreter; the GEMM may fuse).
#if defined(__clang__)
#define PL_CONTRACT_FAST_FUNCTION
#define PL_CONTRACT_FAST_BODY _Pragma("clang fp contract(fast)")
#else
#define PL_CONTRACT_FAST_FUNCTION __attribute__((optimize("fp-contract=fast")))
#define PL_CONTRACT_FAST_BODY
#endif
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__) && defined(__x86_64__)
#define PL_GEMM_ASM_KERNEL 1
// The AVX2 6x16 micro-kernel for packed panels, its k loop in assembly: the compiler, short of the
// 16 ymm registers, folds B's loads into the multiply-adds (three loads per FMA pair instead of
// one), which measured 5-10% slower on a whole GEMM. Accumulators are operands; B uses ymm12-13, A ymm14-15.
#define PL_GEMM_STEP(k)                                   \
  "vmovups " #k "*64(%[b]), %%ymm12\n\t"                  \
  "vmovups " #k "*64+32(%[b]), %%ymm13\n\t"               \
  "vbroadcastss " #k "*24(%[a]), %%ymm14\n\t"             \
  "vfmadd231ps %%ymm12, %%ymm14, %[c00]\n\t"              \
  "vfmadd231ps %%ymm13, %%ymm14, %[c01]\n\t"              \
  "vbroadcastss " #k "*24+4(%[a]), %%ymm15\n\t"           \
  "vfmadd231ps %%ymm12, %%ymm15, %[c10]\n\t"              \
  "vfmadd231ps %%ymm13, %%ymm15, %[c11]\n\t"              \
  "vbroadcastss " #k "*24+8(%[a]), %%ymm14\n\t"           \
  "vfmadd231ps %%ymm12, %%ymm14, %[c20]\n\t"              \
  "vfmadd231ps %%ymm13, %%ymm14, %[c21]\n\t"              \
  "vbroadcastss " #k "*24+12(%[a]), %%ymm15\n\t"          \
  "vfmadd231ps %%ymm12, %%ymm15, %[c30]\n\t"              \
  "vfmadd231ps %%ymm13, %%ymm15, %[c31]\n\t"              \
  "vbroadcastss " #k "*24+16(%[a]), %%ymm14\n\t"          \
  "vfmadd231ps %%ymm12, %%ymm14, %[c40]\n\t"              \
  "vfmadd231ps %%ymm13, %%ymm14, %[c41]\n\t"              \
  "vbroadcastss " #k "*24+20(%[a]), %%ymm15\n\t"          \
  "vfmadd231ps %%ymm12, %%ymm15, %[c50]\n\t"              \
  "vfmadd231ps %%ymm13, %%ymm15, %[c51]\n\t"
PL_CONTRACT_FAST_FUNCTION __attribute__((noinline)) inline void gemm_packed_kernel_avx2(int64_t kc, const float* a,
                                                                                           const float* b, float* c,
                                                                                           int64_t ldc, bool accumulate) {
  static_assert(kGemmMR == 6 && kGemmNR == 16, "the assembly's panel steps (24 and 64 bytes) assume 6 x 16");
  typedef float V8 __attribute__((vector_size(32)));
  gemm_prefetch_c_tile(c, ldc);
  V8 c00{}, c01{}, c10{}, c11{}, c20{}, c21{}, c30{}, c31{}, c40{}, c41{}, c50{}, c51{};
  int64_t blocks = kc / 4;
  if (blocks > 0)
    __asm__ volatile(
        "1:\n\t" PL_GEMM_STEP(0) PL_GEMM_STEP(1) PL_GEMM_STEP(2) PL_GEMM_STEP(3)
        "addq $96, %[a]\n\t"
        "addq $256, %[b]\n\t"
        "decq %[n]\n\t"
        "jnz 1b\n\t"
        : [a] "+r"(a), [b] "+r"(b), [n] "+r"(blocks), [c00] "+x"(c00), [c01] "+x"(c01), [c10] "+x"(c10), [c11] "+x"(c11),
          [c20] "+x"(c20), [c21] "+x"(c21), [c30] "+x"(c30), [c31] "+x"(c31), [c40] "+x"(c40), [c41] "+x"(c41),
          [c50] "+x"(c50), [c51] "+x"(c51)
        :
        : "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
  for (int64_t k = 0; k < kc % 4; ++k) {
    __asm__ volatile(PL_GEMM_STEP(0) "addq $24, %[a]\n\taddq $64, %[b]\n\t"
        : [a] "+r"(a), [b] "+r"(b), [c00] "+x"(c00), [c01] "+x"(c01), [c10] "+x"(c10), [c11] "+x"(c11),
          [c20] "+x"(c20), [c21] "+x"(c21), [c30] "+x"(c30), [c31] "+x"(c31), [c40] "+x"(c40), [c41] "+x"(c41),
          [c50] "+x"(c50), [c51] "+x"(c51)
        :
        : "xmm12", "xmm13", "xmm14", "xmm15", "memory");
  }
  const V8 rows[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int r = 0; r < 6; ++r)
    for (int v = 0; v < 2; ++v) gemm_write_vector(c + r * ldc + v * 8, rows[r][v], accumulate);
}
#undef PL_GEMM_STEP
#endif

// A is read at a[r * a_row_step + k * a_k_step]: packed panels have steps (1, MR), known at compile
// time (kPackedA); a float matrix read in place passes its own strides.
template <bool kPackedA>
PL_CONTRACT_FAST_FUNCTION __attribute__((noinline)) void gemm_micro_kernel(int64_t kc, const float* __restrict a_panel,
                                                                            int64_t a_row_step, int64_t a_k_step,
                                                                            const float* __restrict b_panel, float* __restrict c,
                                                                            int64_t ldc, bool accumulate) {
  PL_CONTRACT_FAST_BODY
#if defined(PL_GEMM_ASM_KERNEL)
  if constexpr (kPackedA) {
    gemm_packed_kernel_avx2(kc, a_panel, b_panel, c, ldc, accumulate);
    return;
  }
#endif
  if constexpr (kPackedA) {
    a_row_step = 1;
    a_k_step = kGemmMR;
  }
  gemm_prefetch_c_tile(c, ldc);
  GemmVector acc[kGemmMR][kGemmVectorsPerRow];
#pragma GCC unroll 16
  for (int r = 0; r < kGemmMR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < kGemmVectorsPerRow; ++v) acc[r][v] = GemmVector{};
  for (int64_t k = 0; k < kc; ++k) {
#if defined(PL_GEMM_PREFETCH_B_STEPS)
    // B's row PL_GEMM_PREFETCH_B_STEPS steps ahead, a line at a time, while it lies in the panel.
    if (k + PL_GEMM_PREFETCH_B_STEPS < kc) {
      const float* ahead = b_panel + (k + PL_GEMM_PREFETCH_B_STEPS) * kGemmNR;
#pragma GCC unroll 8
      for (int j = 0; j < kGemmNR; j += 16) __builtin_prefetch(ahead + j, 0, 3);
    }
#endif
    GemmVector b[kGemmVectorsPerRow];
#pragma GCC unroll 8
    for (int v = 0; v < kGemmVectorsPerRow; ++v) __builtin_memcpy(&b[v], b_panel + k * kGemmNR + v * kGemmLanes, sizeof(GemmVector));
#pragma GCC unroll 16
    for (int r = 0; r < kGemmMR; ++r) {
      const float a = a_panel[k * a_k_step + r * a_row_step];
#pragma GCC unroll 8
      for (int v = 0; v < kGemmVectorsPerRow; ++v) acc[r][v] += b[v] * a;
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kGemmMR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kGemmVectorsPerRow; ++v) gemm_write_vector(c + r * ldc + v * kGemmLanes, acc[r][v], accumulate);
  }
}

#if defined(__AVX__)
static_assert(kGemmMR <= 8, "gemm_pack_a_8k transposes at most 8 rows");
// out[k * MR + r] = rows[r][k0 + k] for k < 8, r < MR: one 8 x 8 transpose in registers instead of
// 8 * MR scalar loads and stores (packing A took 4-5% of a 2048^3 product's time, scalar).
// Each column is stored 8 wide; with MR < 8 the store runs into the next column, which the next
// store overwrites, except after the last column of the panel, stored exactly.
PL_INLINE void gemm_pack_a_8k(const float* const* rows, int64_t k0, float* out, bool panel_end) {
  __m256 v[8];
  for (int r = 0; r < 8; ++r) v[r] = r < kGemmMR ? _mm256_loadu_ps(rows[r] + k0) : _mm256_setzero_ps();
  __m256 s[8];
  for (int h = 0; h < 2; ++h) {  // rows 4h .. 4h+3
    const __m256 lo01 = _mm256_unpacklo_ps(v[4 * h], v[4 * h + 1]), hi01 = _mm256_unpackhi_ps(v[4 * h], v[4 * h + 1]);
    const __m256 lo23 = _mm256_unpacklo_ps(v[4 * h + 2], v[4 * h + 3]), hi23 = _mm256_unpackhi_ps(v[4 * h + 2], v[4 * h + 3]);
    s[4 * h + 0] = _mm256_shuffle_ps(lo01, lo23, _MM_SHUFFLE(1, 0, 1, 0));  // columns 0 | 4
    s[4 * h + 1] = _mm256_shuffle_ps(lo01, lo23, _MM_SHUFFLE(3, 2, 3, 2));  // columns 1 | 5
    s[4 * h + 2] = _mm256_shuffle_ps(hi01, hi23, _MM_SHUFFLE(1, 0, 1, 0));  // columns 2 | 6
    s[4 * h + 3] = _mm256_shuffle_ps(hi01, hi23, _MM_SHUFFLE(3, 2, 3, 2));  // columns 3 | 7
  }
  __m256 column[8];
  for (int c = 0; c < 4; ++c) {
    column[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);
    column[c + 4] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);
  }
  for (int c = 0; c < 7; ++c) _mm256_storeu_ps(out + c * kGemmMR, column[c]);
  if (kGemmMR == 8 || !panel_end) {
    _mm256_storeu_ps(out + 7 * kGemmMR, column[7]);
  } else {
    float last[8];
    _mm256_storeu_ps(last, column[7]);
    for (int r = 0; r < kGemmMR; ++r) out[7 * kGemmMR + r] = last[r];
  }
}
#endif

// Packs rows [i0, i0+mc) x columns [k0, k0+kc) of `a` into MR-row panels: panel p holds, for each
// k, the MR values of column k in rows i0 + p*MR + [0, MR); rows past mc and invalid elements are 0.
template <class T> void gemm_pack_a(const MatrixIn<T>& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* out) {
  for (int64_t p = 0; p < mc; p += kGemmMR) {
    float* panel = out + p * kc;
    // Whole panel inside the array, rows contiguous: k outer, so the panel is written in order
    // from MR streams (the row-outer loop below writes with a stride of MR: twice as slow).
    if (a.col_stride == 1 && p + kGemmMR <= mc && i0 + p >= a.row_lo && i0 + p + kGemmMR <= a.row_hi &&
        k0 >= a.col_lo && k0 + kc <= a.col_hi) {
      const T* rows[kGemmMR];
      for (int r = 0; r < kGemmMR; ++r) rows[r] = a.base + a.offset + (i0 + p + r) * a.row_stride + k0;
      int64_t k = 0;
#if defined(__AVX__)
      if constexpr (__is_same(T, float))
        for (; k + 8 <= kc; k += 8) gemm_pack_a_8k(rows, k, panel + k * kGemmMR, k + 8 == kc);
#endif
      for (; k < kc; ++k)
#pragma GCC unroll 16
        for (int r = 0; r < kGemmMR; ++r) panel[k * kGemmMR + r] = to_compute(rows[r][k]);
      continue;
    }
    for (int r = 0; r < kGemmMR; ++r) {
      const int64_t i = i0 + p + r;
      const bool row_ok = p + r < mc && i >= a.row_lo && i < a.row_hi;
      const int64_t lo = a.col_lo - k0 > 0 ? a.col_lo - k0 : 0;
      const int64_t hi = a.col_hi - k0 < kc ? a.col_hi - k0 : kc;
      if (!row_ok || lo >= hi) {
        for (int64_t k = 0; k < kc; ++k) panel[k * kGemmMR + r] = 0.0f;
        continue;
      }
      const int64_t row = a.offset + i * a.row_stride + k0 * a.col_stride;
      for (int64_t k = 0; k < lo; ++k) panel[k * kGemmMR + r] = 0.0f;
      if (a.col_stride == 1) {
        for (int64_t k = lo; k < hi; ++k) panel[k * kGemmMR + r] = to_compute(a.base[row + k]);
      } else {
        for (int64_t k = lo; k < hi; ++k) panel[k * kGemmMR + r] = to_compute(a.base[row + k * a.col_stride]);
      }
      for (int64_t k = hi; k < kc; ++k) panel[k * kGemmMR + r] = 0.0f;
    }
  }
}

// Packs rows [k0, k0+kc) x columns [j0, j0+nc) of `b` into NR-column panels: panel q holds, for
// each k, the NR values of row k in columns j0 + q*NR + [0, NR).
template <class T> void gemm_pack_b(const MatrixIn<T>& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* out) {
  // Whole float block inside the array with unit column stride: rows are read in groups of
  // kGroup, each row from start to end, so the reads stream. Panel by panel (below), every
  // k step starts a new row a whole row stride away: one cache and TLB miss per 64 bytes, which
  // measured 13% of a 2048^3 product's time against 2% this way.
  if constexpr (__is_same(T, float)) {
    if (b.col_stride == 1 && nc % kGemmNR == 0 && k0 >= b.row_lo && k0 + kc <= b.row_hi && j0 >= b.col_lo &&
        j0 + nc <= b.col_hi) {
      constexpr int64_t kGroup = 8;
      const float* src = b.base + b.offset + k0 * b.row_stride + j0;
      for (int64_t k = 0; k < kc; k += kGroup) {
        const int64_t rows = kc - k < kGroup ? kc - k : kGroup;
        for (int64_t q = 0; q < nc; q += kGemmNR) {
          float* dst = out + q * kc + k * kGemmNR;
          for (int64_t r = 0; r < rows; ++r)
            __builtin_memcpy(dst + r * kGemmNR, src + (k + r) * b.row_stride + q, kGemmNR * sizeof(float));
        }
      }
      return;
    }
  }
  for (int64_t q = 0; q < nc; q += kGemmNR) {
    float* panel = out + q * kc;
    const int64_t j_first = j0 + q;
    // Valid columns of this panel, relative to its first column.
    int64_t lo = b.col_lo - j_first, hi = b.col_hi - j_first;
    lo = lo < 0 ? 0 : lo;
    hi = hi > kGemmNR ? kGemmNR : hi;
    hi = hi > nc - q ? nc - q : hi;
    for (int64_t k = 0; k < kc; ++k) {
      float* dst = panel + k * kGemmNR;
      const int64_t kk = k0 + k;
      if (kk < b.row_lo || kk >= b.row_hi || lo >= hi) {
        for (int j = 0; j < kGemmNR; ++j) dst[j] = 0.0f;
        continue;
      }
      const int64_t row = b.offset + kk * b.row_stride + j_first * b.col_stride;
      if (lo == 0 && hi == kGemmNR && b.col_stride == 1) {
        PL_NO_ALIAS_LOOP
        for (int j = 0; j < kGemmNR; ++j) dst[j] = to_compute(b.base[row + j]);
        continue;
      }
      for (int64_t j = 0; j < kGemmNR; ++j)
        dst[j] = (j >= lo && j < hi) ? to_compute(b.base[row + (j >= lo && j < hi ? j : lo) * b.col_stride]) : 0.0f;
    }
  }
}

// Writes (or adds) an MR x NR result tile into c where only part of it is valid or c is strided.
PL_INLINE void gemm_store_edge(const float* tile, const MatrixOut<float>& c, int64_t i0, int64_t j0, bool accumulate) {
  for (int r = 0; r < kGemmMR; ++r) {
    const int64_t i = i0 + r;
    if (i < c.row_lo || i >= c.row_hi) continue;
    for (int j = 0; j < kGemmNR; ++j) {
      const int64_t jj = j0 + j;
      if (jj < c.col_lo || jj >= c.col_hi) continue;
      float& dst = c.base[c.offset + i * c.row_stride + jj * c.col_stride];
      dst = accumulate ? dst + tile[r * kGemmNR + j] : tile[r * kGemmNR + j];
    }
  }
}

// Small products, computed directly: packing panels of NR columns costs more than the arithmetic
// when the whole product is a few thousand multiply-adds (the paged-attention decode's (heads x d)
// by (d x 16 tokens) dots, which packing made 3x slower than a plain loop). Out-of-range operand
// elements read as zero and only C's valid part is written, as in the blocked driver.
inline constexpr int64_t kGemmSmallWork = 65536, kGemmSmallN = 256, kGemmSmallTransposed = 4096;

template <class TA, class TB>
bool gemm_small(const MatrixIn<TA>& a, const MatrixIn<TB>& b, const MatrixOut<float>& c, int64_t m, int64_t n, int64_t k,
                bool accumulate) {
  if (n > kGemmSmallN || m * n * k > kGemmSmallWork) return false;
  auto clamp = [](int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; };
  const int64_t k_lo = clamp(a.col_lo > b.row_lo ? a.col_lo : b.row_lo, 0, k);
  const int64_t k_hi = clamp(a.col_hi < b.row_hi ? a.col_hi : b.row_hi, k_lo, k);
  const int64_t j_lo = clamp(b.col_lo, 0, n), j_hi = clamp(b.col_hi, j_lo, n);
  // A transposed B (columns contiguous) small enough is first copied into rows, so that each
  // element's sum runs across the row's lanes, not as a scalar dot product per element (a sum's
  // chain of dependent adds): the paged-attention decode's q k^T, (heads x 64) by (64 x 16 tokens).
  // Each element sums over k in the same order from 0 either way, so the results are the same bits.
  float b_rows_storage[kGemmSmallTransposed];
  const float* b_rows = nullptr;
  if (b.col_stride != 1 && (k_hi - k_lo) * (j_hi - j_lo) <= kGemmSmallTransposed && m > 1) {
    float* out = b_rows_storage;
    for (int64_t kk = k_lo; kk < k_hi; ++kk)
      for (int64_t j = j_lo; j < j_hi; ++j) *out++ = to_compute(b.base[b.offset + kk * b.row_stride + j * b.col_stride]);
    b_rows = b_rows_storage;
  }
  for (int64_t i = clamp(c.row_lo, 0, m); i < clamp(c.row_hi, 0, m); ++i) {
    float row[kGemmSmallN];
    for (int64_t j = 0; j < n; ++j) row[j] = 0.0f;
    if (i >= a.row_lo && i < a.row_hi) {
      const TA* ai = a.base + a.offset + i * a.row_stride;
      if (b.col_stride == 1) {  // rows of B contiguous: C's row accumulates a * B's row
        for (int64_t kk = k_lo; kk < k_hi; ++kk) {
          const float x = to_compute(ai[kk * a.col_stride]);
          const TB* bk = b.base + b.offset + kk * b.row_stride;
          PL_NO_ALIAS_LOOP
          for (int64_t j = j_lo; j < j_hi; ++j) row[j] += x * to_compute(bk[j]);
        }
      } else if (b_rows) {  // B transposed into rows once: C's row accumulates as above
        for (int64_t kk = k_lo; kk < k_hi; ++kk) {
          const float x = to_compute(ai[kk * a.col_stride]);
          const float* bk = b_rows + (kk - k_lo) * (j_hi - j_lo);
          float* r = row + j_lo;
          PL_NO_ALIAS_LOOP
          for (int64_t j = 0; j < j_hi - j_lo; ++j) r[j] += x * bk[j];
        }
      } else {  // columns of B contiguous (a transposed operand): one dot product per element
        for (int64_t j = j_lo; j < j_hi; ++j) {
          const TB* bj = b.base + b.offset + j * b.col_stride;
          float sum = 0.0f;
          for (int64_t kk = k_lo; kk < k_hi; ++kk) sum += to_compute(ai[kk * a.col_stride]) * to_compute(bj[kk * b.row_stride]);
          row[j] = sum;
        }
      }
    }
    for (int64_t j = clamp(c.col_lo, 0, n); j < clamp(c.col_hi, 0, n); ++j) {
      float& dst = c.base[c.offset + i * c.row_stride + j * c.col_stride];
      dst = accumulate ? dst + row[j] : row[j];
    }
  }
  return true;
}

// The blocked driver: C (=|+=) A B for an M x K by K x N product; packed_a and packed_b hold at
// least kGemmMC * kGemmKC and kGemmKC * round_up(min(N, kGemmNC), NR) floats.
template <class TA, class TB>
void gemm_f32(const MatrixIn<TA>& a, const MatrixIn<TB>& b, const MatrixOut<float>& c, int64_t m, int64_t n, int64_t k,
              bool accumulate, float* packed_a, float* packed_b) {
  if (gemm_small(a, b, c, m, n, k, accumulate)) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = c.row_lo; i < c.row_hi; ++i)
        for (int64_t j = c.col_lo; j < c.col_hi; ++j) c.base[c.offset + i * c.row_stride + j * c.col_stride] = 0.0f;
    return;
  }
  alignas(64) float edge[kGemmMR * kGemmNR];
  // A float operand read where it lies, skipping its packing, when it is wholly inside its array
  // and has unit stride along rows or columns: worth it when few column panels share the packing
  // and K is short (long strided rows read in place cost more in TLB misses than packing saves).
  bool a_in_place = false;
  const float* a_data = nullptr;
  if constexpr (__is_same(TA, float)) {
    a_in_place = (a.col_stride == 1 || a.row_stride == 1) && a.row_lo <= 0 && a.row_hi >= m && a.col_lo <= 0 &&
                 a.col_hi >= k && n <= 8 * kGemmNR && k <= kGemmInPlaceMaxK;
    a_data = a.base + a.offset;
  }
  for (int64_t j0 = 0; j0 < n; j0 += kGemmNC) {
    const int64_t nc = n - j0 < kGemmNC ? n - j0 : kGemmNC;
    for (int64_t k0 = 0; k0 < k; k0 += kGemmKC) {
      const int64_t kc = k - k0 < kGemmKC ? k - k0 : kGemmKC;
      const bool acc = accumulate || k0 > 0;
      gemm_pack_b(b, k0, kc, j0, nc, packed_b);
      for (int64_t i0 = 0; i0 < m; i0 += kGemmMC) {
        const int64_t mc = m - i0 < kGemmMC ? m - i0 : kGemmMC;
        const int64_t full = a_in_place ? mc / kGemmMR * kGemmMR : 0;  // rows read in place
        if (full < mc) gemm_pack_a(a, i0 + full, mc - full, k0, kc, packed_a + full * kc);
        for (int64_t jr = 0; jr < nc; jr += kGemmNR) {
          const int64_t j = j0 + jr;
          if (j >= c.col_hi || j + kGemmNR <= c.col_lo) continue;  // nothing of it is written
          for (int64_t ir = 0; ir < mc; ir += kGemmMR) {
            const int64_t i = i0 + ir;
            if (i >= c.row_hi || i + kGemmMR <= c.row_lo) continue;
            const float* bp = packed_b + jr * kc;
            const bool inside = i >= c.row_lo && i + kGemmMR <= c.row_hi && j >= c.col_lo && j + kGemmNR <= c.col_hi;
            float* const out = inside && c.col_stride == 1 ? c.base + c.offset + i * c.row_stride + j : edge;
            const int64_t ldc = out == edge ? kGemmNR : c.row_stride;
            const bool add = out == edge ? false : acc;
            if (ir < full) {
              const float* ap = a_data + i * a.row_stride + k0 * a.col_stride;
              gemm_micro_kernel<false>(kc, ap, a.row_stride, a.col_stride, bp, out, ldc, add);
            } else {
              gemm_micro_kernel<true>(kc, packed_a + ir * kc, 1, kGemmMR, bp, out, ldc, add);
            }
            if (out == edge) gemm_store_edge(edge, c, i, j, acc);
          }
        }
      }
    }
  }
}

template <class T> MatrixIn<T> gemm_matrix_in(const GemmOperand& o) {
  return {static_cast<const T*>(o.base), o.offset, o.row_stride, o.col_stride, o.row_lo, o.row_hi, o.col_lo, o.col_hi};
}

template <class TA> void gemm_with_a(const GemmArgs& g, const MatrixIn<TA>& a) {
  switch (g.b.storage) {
    case kGemmFloat16: return gemm_f32(a, gemm_matrix_in<Half>(g.b), g.c, g.m, g.n, g.k, g.accumulate, g.packed_a, g.packed_b);
    case kGemmBFloat16: return gemm_f32(a, gemm_matrix_in<BFloat16>(g.b), g.c, g.m, g.n, g.k, g.accumulate, g.packed_a, g.packed_b);
    case kGemmFloat32: break;
  }
  gemm_f32(a, gemm_matrix_in<float>(g.b), g.c, g.m, g.n, g.k, g.accumulate, g.packed_a, g.packed_b);
}

// Launch::gemm_f32: the blocked product for the operands' storage types.
inline void gemm_entry(const void* args) {
  const GemmArgs& g = *static_cast<const GemmArgs*>(args);
  switch (g.a.storage) {
    case kGemmFloat16: return gemm_with_a(g, gemm_matrix_in<Half>(g.a));
    case kGemmBFloat16: return gemm_with_a(g, gemm_matrix_in<BFloat16>(g.a));
    case kGemmFloat32: break;
  }
  gemm_with_a(g, gemm_matrix_in<float>(g.a));
}

}  // namespace pl_cpu
