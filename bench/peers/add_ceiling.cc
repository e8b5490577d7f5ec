// What one core can move: the f32 add o = x + y of 2^26 elements written as plain loops (with
// streaming stores, with and without software prefetch of the inputs), a read-only sum of the same
// two inputs, and memcpy of one array, each the best of several runs. It bounds what cpu_bench's
// add can reach against memcpy at one thread on a given machine (issue 14: the Xeon's add at one
// thread). x86 with AVX. Build: g++ -O3 -march=native -std=c++20 add_ceiling.cc
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr size_t kN = size_t{1} << 26;

double best_ms(int runs, auto&& fn) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    best = ms < best ? ms : best;
  }
  return best;
}

#if defined(__AVX512F__)
constexpr size_t kLanes = 16;
inline void add_block(const float* x, const float* y, float* o, size_t i) {
  _mm512_stream_ps(o + i, _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
}
#else
constexpr size_t kLanes = 8;
inline void add_block(const float* x, const float* y, float* o, size_t i) {
  _mm256_stream_ps(o + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
}
#endif

// distance in floats ahead (0: none); hint 0 = T0, 2 = T2 (to L2 and beyond).
template <int hint>
void add(const float* x, const float* y, float* o, size_t distance) {
  for (size_t i = 0; i < kN; i += kLanes) {
    if (distance && i % 16 == 0) {  // one prefetch per 64-byte line of each input
      _mm_prefetch(reinterpret_cast<const char*>(x + i + distance), hint == 0 ? _MM_HINT_T0 : _MM_HINT_T2);
      _mm_prefetch(reinterpret_cast<const char*>(y + i + distance), hint == 0 ? _MM_HINT_T0 : _MM_HINT_T2);
    }
    add_block(x, y, o, i);
  }
  _mm_sfence();
}

}  // namespace

int main() {
  // 64-byte aligned, with room for prefetches past the end.
  auto alloc = [](size_t n) { return static_cast<float*>(std::aligned_alloc(64, (n + 65536) * sizeof(float))); };
  float *x = alloc(kN), *y = alloc(kN), *o = alloc(kN), *c = alloc(kN);
  std::mt19937 gen(std::random_device{}());
  std::normal_distribution<float> dist;
  for (size_t i = 0; i < kN; ++i) { x[i] = dist(gen); y[i] = dist(gen); }
  std::memset(o, 1, kN * sizeof(float));
  std::memset(c, 1, kN * sizeof(float));
  const double mb = kN * sizeof(float) / 1e6;
  const int runs = 8;
  const double copy = best_ms(runs, [&] { std::memcpy(c, x, kN * sizeof(float)); });
  std::printf("memcpy                      %8.3f ms  %6.1f GB/s moved\n", copy, 2 * mb / copy);
  volatile float sink = 0;
  const double read = best_ms(runs, [&] {
    __m256 s = _mm256_setzero_ps();
    for (size_t i = 0; i < kN; i += 8) s = _mm256_add_ps(s, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    float t[8];
    _mm256_storeu_ps(t, s);
    sink = sink + t[0];
  });
  std::printf("read x and y (sum)          %8.3f ms  %6.1f GB/s read\n", read, 2 * mb / read);
  auto report = [&](const char* what, double ms) {
    std::printf("%-27s %8.3f ms  %6.1f GB/s moved  ratio to memcpy's bandwidth %.2f\n", what, ms, 3 * mb / ms,
                (3 * mb / ms) / (2 * mb / copy));
  };
  report("add, streaming stores", best_ms(runs, [&] { add<0>(x, y, o, 0); }));
  for (size_t d : {256, 1024, 4096}) {
    char name[64];
    std::snprintf(name, sizeof name, "add, prefetch T0 +%zu", d);
    report(name, best_ms(runs, [&] { add<0>(x, y, o, d); }));
    std::snprintf(name, sizeof name, "add, prefetch T2 +%zu", d);
    report(name, best_ms(runs, [&] { add<2>(x, y, o, d); }));
  }
  // Check one result against the inputs (the stores must have happened).
  size_t bad = 0;
  for (size_t i = 0; i < kN; i += 4099) bad += o[i] != x[i] + y[i];
  std::printf("check: %zu wrong of %zu sampled\n", bad, kN / 4099 + 1);
  std::free(x); std::free(y); std::free(o); std::free(c);
  return bad != 0;
}
