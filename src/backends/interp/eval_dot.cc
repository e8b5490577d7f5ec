// Interpreter: dot. 16- and 32-bit floats multiply and accumulate in float32, float64 in float64,
// integers in int64 wrapped to the result width; the order of accumulation is unspecified.
#include <algorithm>

#include "backends/interp/tile.h"

namespace palladium::interp {
namespace {

// C[m,n] += A[m,k] B[k,n], all row-major; blocked so a panel of B stays in cache and the inner
// loop over n vectorises.
template <class T> void gemm(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kBlockK = 256, kBlockN = 512;
  for (int64_t k0 = 0; k0 < k; k0 += kBlockK) {
    const int64_t k1 = std::min(k, k0 + kBlockK);
    for (int64_t n0 = 0; n0 < n; n0 += kBlockN) {
      const int64_t n1 = std::min(n, n0 + kBlockN);
      int64_t i = 0;
      for (; i + 4 <= m; i += 4) {
        T* c0 = c + i * n;
        T* c1 = c0 + n;
        T* c2 = c1 + n;
        T* c3 = c2 + n;
        for (int64_t p = k0; p < k1; ++p) {
          const T a0 = a[i * k + p], a1 = a[(i + 1) * k + p], a2 = a[(i + 2) * k + p], a3 = a[(i + 3) * k + p];
          const T* bp = b + p * n;
          for (int64_t j = n0; j < n1; ++j) {
            const T bv = bp[j];
            c0[j] += a0 * bv;
            c1[j] += a1 * bv;
            c2[j] += a2 * bv;
            c3[j] += a3 * bv;
          }
        }
      }
      for (; i < m; ++i)
        for (int64_t p = k0; p < k1; ++p) {
          const T av = a[i * k + p];
          for (int64_t j = n0; j < n1; ++j) c[i * n + j] += av * b[p * n + j];
        }
    }
  }
}

// Copy a tile into a row-major (rows x cols) matrix of T, transposing if asked.
template <class T> std::vector<T> matrix(const Tile& x, bool trans) {
  const int64_t r = x.shape[0], c = x.shape[1];
  std::vector<T> out(static_cast<size_t>(r * c));
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const size_t src = static_cast<size_t>(i * c + j);
      const size_t dst = trans ? static_cast<size_t>(j * r + i) : src;
      out[dst] = x.floating() ? static_cast<T>(x.f[src]) : static_cast<T>(x.i[src]);
    }
  return out;
}

}  // namespace

Tile eval_dot(const Tile& a, const Tile& b, bool trans_a, bool trans_b, DType result) {
  const int64_t m = trans_a ? a.shape[1] : a.shape[0], k = trans_a ? a.shape[0] : a.shape[1];
  const int64_t n = trans_b ? b.shape[0] : b.shape[1];
  Tile r = Tile::make(result, {m, n});
  if (a.dtype == DType::float64) {
    std::vector<double> am = matrix<double>(a, trans_a), bm = matrix<double>(b, trans_b), c(static_cast<size_t>(m * n), 0.0);
    gemm(am.data(), bm.data(), c.data(), m, n, k);
    r.f = std::move(c);
  } else if (is_float(a.dtype)) {
    std::vector<float> am = matrix<float>(a, trans_a), bm = matrix<float>(b, trans_b), c(static_cast<size_t>(m * n), 0.0f);
    gemm(am.data(), bm.data(), c.data(), m, n, k);
    r.f.assign(c.begin(), c.end());
  } else {
    std::vector<int64_t> am = matrix<int64_t>(a, trans_a), bm = matrix<int64_t>(b, trans_b), c(static_cast<size_t>(m * n), 0);
    gemm(am.data(), bm.data(), c.data(), m, n, k);
    for (size_t q = 0; q < c.size(); ++q) r.i[q] = wrap_int(result, c[q]);
  }
  // An output element is poisoned when its row of a or column of b holds poison.
  if (!a.poison.empty() || !b.poison.empty()) {
    std::vector<uint8_t> row(static_cast<size_t>(m), 0), col(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < a.size(); ++i)
      if (a.poisoned(i)) row[static_cast<size_t>(trans_a ? i % a.shape[1] : i / a.shape[1])] = 1;
    for (int64_t i = 0; i < b.size(); ++i)
      if (b.poisoned(i)) col[static_cast<size_t>(trans_b ? i / b.shape[1] : i % b.shape[1])] = 1;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (row[static_cast<size_t>(i)] || col[static_cast<size_t>(j)]) r.set_poison(i * n + j);
  }
  return r;
}

}  // namespace palladium::interp
