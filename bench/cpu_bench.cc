// The cpu backend against its peers, each measured in the same binary and run (the machine is
// noisy: compare ratios, not absolute figures). After the Google Benchmark table, a summary
// prints each Palladium figure over its peer, then the matmul and add ratios measured again in
// alternating rounds (paired_summary), where both sides see the same load from the neighbours.
//
//   matmul f32 1024^3, 2048^3      Palladium kernel vs OpenBLAS cblas_sgemm at the same thread count
//   add f32 2^26                   vs memcpy (STREAM counting: add moves 3 arrays, copy 2)
//   IndRNN T=1000 F=1024           vs a plain -O3 loop and vs the interpreter
//   attention fwd f32 s1024 d64    vs a straightforward -O3 C++ attention, and vs OpenBLAS sgemm
//                                  plus a vectorised softmax (what framework CPU attention does)
//   paged attention decode f32    vs a plain -O3 loop over the page table
//   layer norm, RMS norm, softmax  f32 4096x1024 forward, and forward+backward, vs plain -O3 loops
//                                  over the rows
//   compile latency                first call of the quickstart matmul (compile included), and a
//                                  first call served from the disk cache
//
// Large outputs are allocated by every pallas_call; the library's host allocator keeps freed large
// blocks (src/core/host_allocator.h), so repeated calls do not pay first-touch page faults.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "ops/attention.h"
#include "ops/indrnn.h"
#include "ops/norms.h"
#include "ops/paged_attention.h"
#include "palladium/palladium.h"

#ifdef PL_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);
#endif

namespace pl = palladium;
using pl::Ref;
using pl::Value;

namespace {

int threads() { return pl::cpu::num_threads(); }

// Splits [0, n) over `threads()` std::threads for the hand-written peers.
template <class F> void parallel_for(int64_t n, F f) {
  const int t = threads();
  std::vector<std::thread> pool;
  for (int i = 0; i < t; ++i) pool.emplace_back([&, i] { f(n * i / t, n * (i + 1) / t); });
  for (std::thread& th : pool) th.join();
}

// ---- paged attention decode: batch 8, 16 query heads on 4 kv heads, head_dim 64, pages of 16,
// up to 32 pages (512 tokens) per sequence, float32 ----

struct Paged {
  static constexpr int64_t batch = 8, heads = 16, kv_heads = 4, hd = 64, page = 16, per_seq = 32, pool = batch * per_seq;
  pl::Array q, k, v, lengths, table;
  Paged() {
    auto keys = pl::random::split(pl::random::key(51), 4);
    q = pl::random::normal(keys[0], {batch, heads, hd});
    k = pl::random::normal(keys[1], {kv_heads, pool, page, hd});
    v = pl::random::normal(keys[2], {kv_heads, pool, page, hd});
    lengths = pl::random::uniform(keys[3], {batch}, pl::i32, 1, per_seq * page + 1);
    table = pl::Array({batch, per_seq}, pl::i32);
    for (int64_t i = 0; i < pool; ++i) table.set(i, static_cast<double>((i * 37) % pool));  // scattered pages
  }
  static const Paged& get() {
    static Paged p;
    return p;
  }
};

void BM_PagedAttentionPalladium(benchmark::State& state) {
  const Paged& p = Paged::get();
  pl::Array out = pl::ops::paged_attention(p.q, p.k, p.v, p.lengths, p.table, {.backend = "cpu"});
  const pl::Array want = pl::ops::paged_attention_reference(p.q.astype(pl::f64), p.k.astype(pl::f64), p.v.astype(pl::f64),
                                                             p.lengths, p.table);
  if (pl::rel_error(out.astype(pl::f64), want) > 1e-5) state.SkipWithError("paged attention differs from float64");
  for (auto _ : state) benchmark::DoNotOptimize(out = pl::ops::paged_attention(p.q, p.k, p.v, p.lengths, p.table, {.backend = "cpu"}));
}

// The plain loop: per (sequence, head) a two-pass softmax over the sequence's tokens, reading
// keys and values through the page table.
void BM_PagedAttentionPlain(benchmark::State& state) {
  const Paged& p = Paged::get();
  const float* q = static_cast<const float*>(p.q.data());
  const float* k = static_cast<const float*>(p.k.data());
  const float* v = static_cast<const float*>(p.v.data());
  const int32_t* len = static_cast<const int32_t*>(p.lengths.data());
  const int32_t* table = static_cast<const int32_t*>(p.table.data());
  std::vector<float> out(static_cast<size_t>(Paged::batch * Paged::heads * Paged::hd));
  const int t = static_cast<int>(state.range(0));
  const float scale = 1.0f / std::sqrt(static_cast<float>(Paged::hd));
  auto rows = [&](int64_t lo, int64_t hi) {
    std::vector<float> s(static_cast<size_t>(Paged::per_seq * Paged::page));
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / Paged::heads, h = bh % Paged::heads, kh = h / (Paged::heads / Paged::kv_heads), n = len[b];
      const float* qv = q + bh * Paged::hd;
      float m = -INFINITY;
      for (int64_t tok = 0; tok < n; ++tok) {
        const float* kr = k + ((kh * Paged::pool + table[b * Paged::per_seq + tok / Paged::page]) * Paged::page + tok % Paged::page) * Paged::hd;
        float acc = 0;
        for (int64_t e = 0; e < Paged::hd; ++e) acc += qv[e] * kr[e];
        s[static_cast<size_t>(tok)] = acc * scale;
        m = std::max(m, acc * scale);
      }
      float l = 0;
      for (int64_t tok = 0; tok < n; ++tok) l += (s[static_cast<size_t>(tok)] = std::exp(s[static_cast<size_t>(tok)] - m));
      float* o = out.data() + bh * Paged::hd;
      std::fill(o, o + Paged::hd, 0.0f);
      for (int64_t tok = 0; tok < n; ++tok) {
        const float* vr = v + ((kh * Paged::pool + table[b * Paged::per_seq + tok / Paged::page]) * Paged::page + tok % Paged::page) * Paged::hd;
        const float w = s[static_cast<size_t>(tok)] / l;
        for (int64_t e = 0; e < Paged::hd; ++e) o[e] += w * vr[e];
      }
    }
  };
  for (auto _ : state) {
    if (t == 1) rows(0, Paged::batch * Paged::heads);
    else parallel_for(Paged::batch * Paged::heads, rows);
    benchmark::DoNotOptimize(out.data());
  }
}

// ---- matmul ----

pl::Callable<pl::Array> matmul_call(int64_t n, int64_t block) {
  return pl::pallas_call([](Ref x, Ref y, Ref z) { z[pl::all] = pl::dot(x[pl::all], y[pl::all]); },
                         pl::ShapeDtype({n, n}, pl::f32),
                         {.grid = {n / block, n / block},
                          .in_specs = {pl::BlockSpec({block, n}, [](pl::Index i, pl::Index) { return pl::idx(i, 0); }),
                                       pl::BlockSpec({n, block}, [](pl::Index, pl::Index j) { return pl::idx(0, j); })},
                          .out_specs = {pl::BlockSpec({block, block}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); })},
                          .name = "bench_matmul",
                          .backend = "cpu"});
}

// Each Palladium benchmark checks its result once, before timing, against float64; a wrong result
// marks the benchmark as an error instead of reporting a figure.
bool checked(benchmark::State& st, const std::string& what, double err, double tol) {
  if (err <= tol) return true;
  st.SkipWithError((what + ": relative error " + std::to_string(err) + " over " + std::to_string(tol)).c_str());
  return false;
}

void set_flops(benchmark::State& st, double flops) {
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MatmulPalladium(benchmark::State& st) {
  const int64_t n = st.range(0), block = st.range(1);
  auto keys = pl::random::split(pl::random::key(0));
  pl::Array x = pl::random::normal(keys[0], {n, n}), y = pl::random::normal(keys[1], {n, n});
  auto f = matmul_call(n, block);
  if (!checked(st, "matmul", pl::rel_error(f(x, y), pl::matmul(x.astype(pl::f64), y.astype(pl::f64))), 1e-5)) return;
  for (auto _ : st) benchmark::DoNotOptimize(f(x, y).data());
  set_flops(st, 2.0 * n * n * n);
}

// The ops library's product as users call it: jit(jnp::matmul) on the cpu backend, with the
// tiling its lowering picks (plan_matmul).
void BM_MatmulJit(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto keys = pl::random::split(pl::random::key(0));
  pl::Array x = pl::random::normal(keys[0], {n, n}), y = pl::random::normal(keys[1], {n, n});
  auto f = pl::jit([](const pl::Array& a, const pl::Array& b) { return pl::jnp::matmul(a, b); }, {.backend = "cpu"});
  if (!checked(st, "jit(jnp::matmul)", pl::rel_error(f(x, y), pl::matmul(x.astype(pl::f64), y.astype(pl::f64))), 1e-5))
    return;
  for (auto _ : st) benchmark::DoNotOptimize(f(x, y).data());
  set_flops(st, 2.0 * n * n * n);
}

#ifdef PL_HAVE_OPENBLAS
void BM_MatmulOpenBLAS(benchmark::State& st) {
  const int64_t n = st.range(0);
  openblas_set_num_threads(threads());
  // The same random inputs as BM_MatmulPalladium.
  auto keys = pl::random::split(pl::random::key(0));
  std::vector<float> a = pl::random::normal(keys[0], {n, n}).to_vector<float>();
  std::vector<float> b = pl::random::normal(keys[1], {n, n}).to_vector<float>(), c(a.size());
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n), static_cast<int>(n),
                1.0f, a.data(), static_cast<int>(n), b.data(), static_cast<int>(n), 0.0f, c.data(), static_cast<int>(n));
  };
  run();
  for (auto _ : st) {
    run();
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(st, 2.0 * n * n * n);
}
#endif

// ---- add vs memcpy ----

constexpr int64_t kAddElements = int64_t{1} << 26;

void set_bandwidth(benchmark::State& st, double bytes) {
  st.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

pl::Callable<pl::Array> add_call(int64_t block) {
  return pl::pallas_call([](Ref a, Ref b, Ref o) { o[pl::all] = a[pl::all] + b[pl::all]; },
                         pl::ShapeDtype({kAddElements}, pl::f32),
                         {.grid = {kAddElements / block},
                          .in_specs = {pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); }),
                                       pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); })},
                          .out_specs = {pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); })},
                          .name = "bench_add",
                          .backend = "cpu"});
}

// memcpy of `bytes`, split into `parts` contiguous pieces copied by as many threads (1: in place).
void copy_in_parts(char* dst, const char* src, size_t bytes, int parts) {
  if (parts <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::vector<std::thread> pool;
  for (int i = 0; i < parts; ++i)
    pool.emplace_back([=] {
      const size_t b = bytes * static_cast<size_t>(i) / static_cast<size_t>(parts);
      const size_t e = bytes * static_cast<size_t>(i + 1) / static_cast<size_t>(parts);
      std::memcpy(dst + b, src + b, e - b);
    });
  for (std::thread& t : pool) t.join();
}

void BM_AddPalladium(benchmark::State& st) {
  const int64_t block = st.range(0);
  auto keys = pl::random::split(pl::random::key(3));
  pl::Array x = pl::random::normal(keys[0], {kAddElements}), y = pl::random::normal(keys[1], {kAddElements});
  auto f = add_call(block);
  if (!checked(st, "add", pl::rel_error(f(x, y), pl::add(x.astype(pl::f64), y.astype(pl::f64))), 1e-7)) return;
  for (auto _ : st) benchmark::DoNotOptimize(f(x, y).data());
  set_bandwidth(st, 3.0 * 4 * kAddElements);
}

// memcpy of one array into another: 2 arrays of traffic. range(0): threads (1, or the pool's).
void BM_Memcpy(benchmark::State& st) {
  const size_t bytes = static_cast<size_t>(kAddElements) * 4;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const int parts = st.range(0) > 1 ? threads() : 1;
  for (auto _ : st) {
    copy_in_parts(dst.data(), src.data(), bytes, parts);
    benchmark::DoNotOptimize(dst.data());
  }
  set_bandwidth(st, 2.0 * static_cast<double>(bytes));
}

// ---- IndRNN ----

constexpr int64_t kSteps = 1000, kFeatures = 1024;

struct IndRnnInputs {
  pl::Array x, u, h0;
  IndRnnInputs() {
    auto k = pl::random::split(pl::random::key(7), 3);
    x = pl::random::normal(k[0], {kSteps, kFeatures});
    u = pl::random::uniform(k[1], {kFeatures}, pl::f32, 0.5, 1.0);
    h0 = pl::random::normal(k[2], {kFeatures});
  }
};

void BM_IndRnnPalladium(benchmark::State& st) {
  IndRnnInputs in;
  const std::string backend = st.range(1) ? "cpu" : "interpret";
  const pl::Array got = pl::ops::indrnn(in.x, in.u, in.h0, st.range(0), backend);
  if (!checked(st, "indrnn", pl::rel_error(got, pl::ops::indrnn_reference(in.x, in.u, in.h0)), 1e-6)) return;
  for (auto _ : st) benchmark::DoNotOptimize(pl::ops::indrnn(in.x, in.u, in.h0, st.range(0), backend).data());
}

// h = relu(u * h + x_t) over t, features split over range(0) threads.
void BM_IndRnnPlainLoop(benchmark::State& st) {
  IndRnnInputs in;
  const float* x = in.x.data_as<float>();
  const float* u = in.u.data_as<float>();
  std::vector<float> out(static_cast<size_t>(kSteps * kFeatures));
  auto range = [&](int64_t f0, int64_t f1) {
    std::vector<float> h(in.h0.data_as<float>() + f0, in.h0.data_as<float>() + f1);
    for (int64_t t = 0; t < kSteps; ++t)
      for (int64_t f = f0; f < f1; ++f) {
        float& hf = h[static_cast<size_t>(f - f0)];
        hf = std::max(u[f] * hf + x[t * kFeatures + f], 0.0f);
        out[static_cast<size_t>(t * kFeatures + f)] = hf;
      }
  };
  for (auto _ : st) {
    if (st.range(0) > 1) parallel_for(kFeatures, range);
    else range(0, kFeatures);
    benchmark::DoNotOptimize(out.data());
  }
}

// ---- attention forward ----

constexpr int64_t kSeq = 1024, kHeadDim = 64;

struct AttentionInputs {
  pl::Array q, k, v;
  AttentionInputs() {
    auto key = pl::random::split(pl::random::key(3), 3);
    q = pl::random::normal(key[0], {1, kSeq, 1, kHeadDim});
    k = pl::random::normal(key[1], {1, kSeq, 1, kHeadDim});
    v = pl::random::normal(key[2], {1, kSeq, 1, kHeadDim});
  }
};
const float kScale = 1.0f / 8.0f;

void BM_AttentionPalladium(benchmark::State& st) {
  AttentionInputs in;
  pl::ops::MhaOptions o{.sm_scale = kScale, .block_q = st.range(0), .block_k = st.range(1), .backend = "cpu"};
  const pl::Array got = pl::ops::mha(in.q, in.k, in.v, pl::Array(), o);
  if (!checked(st, "attention", pl::rel_error(got, pl::ops::mha_reference(in.q, in.k, in.v, pl::Array(), kScale, false).out),
               2e-6))
    return;
  for (auto _ : st) benchmark::DoNotOptimize(pl::ops::mha(in.q, in.k, in.v, pl::Array(), o).data());
  set_flops(st, 4.0 * kSeq * kSeq * kHeadDim);
}

// Softmax(q k^T * scale) v, one query row at a time; queries split over range(0) threads.
void BM_AttentionPlain(benchmark::State& st) {
  AttentionInputs in;
  const float *q = in.q.data_as<float>(), *k = in.k.data_as<float>(), *v = in.v.data_as<float>();
  std::vector<float> out(static_cast<size_t>(kSeq * kHeadDim));
  auto rows = [&](int64_t i0, int64_t i1) {
    std::vector<float> s(kSeq);
    for (int64_t i = i0; i < i1; ++i) {
      float m = -INFINITY;
      for (int64_t j = 0; j < kSeq; ++j) {
        float dot = 0;
        for (int64_t d = 0; d < kHeadDim; ++d) dot += q[i * kHeadDim + d] * k[j * kHeadDim + d];
        s[static_cast<size_t>(j)] = dot * kScale;
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      float l = 0;
      for (int64_t j = 0; j < kSeq; ++j) l += s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m);
      float* o = out.data() + i * kHeadDim;
      for (int64_t d = 0; d < kHeadDim; ++d) o[d] = 0;
      for (int64_t j = 0; j < kSeq; ++j)
        for (int64_t d = 0; d < kHeadDim; ++d) o[d] += s[static_cast<size_t>(j)] * v[j * kHeadDim + d];
      for (int64_t d = 0; d < kHeadDim; ++d) o[d] /= l;
    }
  };
  for (auto _ : st) {
    if (st.range(0) > 1) parallel_for(kSeq, rows);
    else rows(0, kSeq);
    benchmark::DoNotOptimize(out.data());
  }
  set_flops(st, 4.0 * kSeq * kSeq * kHeadDim);
}

#ifdef PL_HAVE_OPENBLAS
// e^x for x <= 0, as framework CPU softmax kernels compute it: x = n ln2 + r with |r| <= ln2/2,
// e^r by a degree-6 polynomial (relative error about 2e-7), 2^n put into the exponent bits.
// Written so that the compiler vectorises it; target_clones picks AVX-512, AVX2 or SSE2 at run time.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void exp_nonpositive(float* x, int64_t n, float* sum) {
  float total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::max(x[i], -87.0f);
    const float k = __builtin_floorf(v * 1.44269504f + 0.5f);
    const float r = (v - k * 0.693145752f) - k * 1.42860677e-6f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    x[i] = p * scale;
    total += x[i];
  }
  *sum = total;
}

// What framework CPU attention does: S = q k^T (sgemm), a vectorised row softmax, O = P v (sgemm),
// S kept whole in memory. range(0) picks how the threads share it:
//   0  OpenBLAS threads each sgemm over the pool's thread count, the softmax rows split over as many
//      std::threads (the form of stops 41-52);
//   1  each thread takes a slice of the query rows and runs all three steps on it with a
//      one-thread OpenBLAS, as a framework's intra-op pool does.
// Form 0 leaves OpenBLAS's workers spinning after each sgemm (they wait about 2^28 cycles before
// sleeping), so at 2 threads on 2 cores the softmax's threads shared the cores with them: 7.1 ms
// against 4.7 ms with OPENBLAS_THREAD_TIMEOUT=4 on the stop-54 Xeon. The summary takes the faster form.
struct BlasAttention {
  AttentionInputs in;
  bool sliced;
  std::vector<float> s = std::vector<float>(static_cast<size_t>(kSeq * kSeq)), sums = std::vector<float>(kSeq),
                     out = std::vector<float>(static_cast<size_t>(kSeq * kHeadDim));
  // OpenBLAS's thread count is set for the peer's lifetime (one thread for the row slices), outside
  // the timed calls.
  explicit BlasAttention(bool row_slices) : sliced(row_slices) { openblas_set_num_threads(sliced ? 1 : threads()); }
  ~BlasAttention() { openblas_set_num_threads(threads()); }
  BlasAttention(const BlasAttention&) = delete;
  BlasAttention& operator=(const BlasAttention&) = delete;
  static bool sliced_form(const std::string& name) { return name.back() == '1'; }  // BM_AttentionOpenBLAS/<form>
  static const char* form_name(bool row_slices) { return row_slices ? "row slices" : "threaded sgemm"; }
  // The faster of the two forms in `times` (RatioReporter), by name.
  static std::string fastest_of(const auto& times) {
    return times.fastest({"BM_AttentionOpenBLAS/0", "BM_AttentionOpenBLAS/1"});
  }

  void softmax(int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float* row = s.data() + i * kSeq;
      const float m = *std::max_element(row, row + kSeq);
      for (int64_t j = 0; j < kSeq; ++j) row[j] -= m;
      exp_nonpositive(row, kSeq, &sums[static_cast<size_t>(i)]);
    }
  }
  void scores(int64_t i0, int64_t i1) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(i1 - i0), kSeq, kHeadDim, kScale,
                in.q.data_as<float>() + i0 * kHeadDim, kHeadDim, in.k.data_as<float>(), kHeadDim, 0.0f,
                s.data() + i0 * kSeq, kSeq);
  }
  void weighted(int64_t i0, int64_t i1) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(i1 - i0), kHeadDim, kSeq, 1.0f,
                s.data() + i0 * kSeq, kSeq, in.v.data_as<float>(), kHeadDim, 0.0f, out.data() + i0 * kHeadDim, kHeadDim);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t d = 0; d < kHeadDim; ++d) out[static_cast<size_t>(i * kHeadDim + d)] /= sums[static_cast<size_t>(i)];
  }
  void run() {
    if (sliced) {
      parallel_for(kSeq, [&](int64_t i0, int64_t i1) {
        scores(i0, i1);
        softmax(i0, i1);
        weighted(i0, i1);
      });
    } else {
      scores(0, kSeq);
      if (threads() > 1) parallel_for(kSeq, [&](int64_t i0, int64_t i1) { softmax(i0, i1); });
      else softmax(0, kSeq);
      weighted(0, kSeq);
    }
  }
  double rel_error() const {
    const pl::Array want = pl::ops::mha_reference(in.q, in.k, in.v, pl::Array(), kScale, false).out;
    pl::Array got({1, kSeq, 1, kHeadDim}, pl::f32);
    std::memcpy(got.data(), out.data(), out.size() * sizeof(float));
    return pl::rel_error(got, want);
  }
};

void BM_AttentionOpenBLAS(benchmark::State& st) {
  BlasAttention peer(st.range(0) == 1);  // BlasAttention::sliced_form reads this argument back
  peer.run();
  if (!checked(st, "attention peer", peer.rel_error(), 2e-6)) return;
  for (auto _ : st) {
    peer.run();
    benchmark::DoNotOptimize(peer.out.data());
  }
  set_flops(st, 4.0 * kSeq * kSeq * kHeadDim);
}
#endif

// ---- compile latency ----

// The quickstart matmul (2x2 grid of 512x1024 @ 1024x512 blocks) with `salt` baked into its
// source, so each salt is a kernel no cache has seen.
pl::Callable<pl::Array> quickstart_matmul(float salt) {
  return pl::pallas_call([salt](Ref x, Ref y, Ref z) { z[pl::all] = pl::dot(x[pl::all], y[pl::all]) * salt; },
                         pl::ShapeDtype({1024, 1024}, pl::f32),
                         {.grid = {2, 2},
                          .in_specs = {pl::BlockSpec({512, 1024}, [](pl::Index i, pl::Index) { return pl::idx(i, 0); }),
                                       pl::BlockSpec({1024, 512}, [](pl::Index, pl::Index j) { return pl::idx(0, j); })},
                          .out_specs = {pl::BlockSpec({512, 512}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); })},
                          .name = "quickstart_matmul",
                          .backend = "cpu"});
}

// range(0): 0 = compile (a new kernel each iteration), 1 = disk cache hit, 2 = warm call.
void BM_QuickstartMatmulFirstCall(benchmark::State& st) {
  const std::string dir = std::filesystem::temp_directory_path() / ("palladium-bench-cache-" + std::to_string(::getpid()));
  ::setenv("PALLADIUM_CACHE_DIR", dir.c_str(), 1);
  auto keys = pl::random::split(pl::random::key(1));
  pl::Array x = pl::random::normal(keys[0], {1024, 1024}), y = pl::random::normal(keys[1], {1024, 1024});
  static float salt = 1.0f;
  pl::cpu::clear_memory_cache();  // so the warm-up below also writes this run's disk cache
  auto warm = quickstart_matmul(0.5f);
  warm(x, y);
  for (auto _ : st) {
    if (st.range(0) == 0) salt += 1.0f;
    if (st.range(0) == 1) pl::cpu::clear_memory_cache();
    auto f = st.range(0) == 2 ? warm : quickstart_matmul(st.range(0) == 0 ? salt : 0.5f);
    benchmark::DoNotOptimize(f(x, y).data());
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  ::unsetenv("PALLADIUM_CACHE_DIR");
}

// ---- norms: layer norm, RMS norm and softmax forward, f32 4096 x 1024 ----

constexpr int64_t kNormRows = 4096, kNormFeatures = 1024;
const char* const kNormNames[] = {"layer_norm", "rms_norm", "softmax"};

struct NormInputs {
  pl::Array x, w, b;
  static const NormInputs& get() {
    static const NormInputs in = [] {
      auto keys = pl::random::split(pl::random::key(5), 3);
      return NormInputs{pl::random::normal(keys[0], {kNormRows, kNormFeatures}),
                        pl::random::normal(keys[1], {kNormFeatures}), pl::random::normal(keys[2], {kNormFeatures})};
    }();
    return in;
  }
};

// range(0): 0 layer norm, 1 RMS norm, 2 softmax; range(1): rows per program (0: the ops default).
void BM_NormPalladium(benchmark::State& st) {
  const NormInputs& in = NormInputs::get();
  const int which = static_cast<int>(st.range(0));
  const pl::ops::NormOptions o{.block_rows = st.range(1), .backend = "cpu"};
  auto run = [&] {
    return which == 0 ? pl::ops::layer_norm(in.x, in.w, in.b, o) : which == 1 ? pl::ops::rms_norm(in.x, in.w, o)
                                                                               : pl::ops::softmax(in.x, o);
  };
  const pl::Array x = in.x.astype(pl::f64), w = in.w.astype(pl::f64);
  const pl::Array c = x - pl::jnp::mean(x, {1}, true);
  const pl::Array want =
      which == 0   ? c * pl::jnp::rsqrt(pl::jnp::mean(c * c, {1}, true) + 1e-5) * w + in.b.astype(pl::f64)
      : which == 1 ? x * pl::jnp::rsqrt(pl::jnp::mean(x * x, {1}, true) + 1e-5) * w
                   : pl::nn::softmax(x, -1);
  if (!checked(st, kNormNames[which], pl::rel_error(run(), want), 1e-5)) return;
  for (auto _ : st) benchmark::DoNotOptimize(run().data());
  set_bandwidth(st, 2.0 * kNormRows * kNormFeatures * 4);
}

// The plain -O3 loops, row by row; range(1): threads.
void BM_NormPlain(benchmark::State& st) {
  const NormInputs& in = NormInputs::get();
  const int which = static_cast<int>(st.range(0));
  const float* x = static_cast<const float*>(in.x.data());
  const float* w = static_cast<const float*>(in.w.data());
  const float* b = static_cast<const float*>(in.b.data());
  std::vector<float> out(static_cast<size_t>(kNormRows * kNormFeatures));
  const int64_t n = kNormFeatures;
  auto rows = [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * n;
      float* o = out.data() + r * n;
      if (which == 0) {
        float mean = 0, var = 0;
        for (int64_t i = 0; i < n; ++i) mean += xr[i];
        mean /= static_cast<float>(n);
        for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        const float rstd = 1.0f / std::sqrt(var / static_cast<float>(n) + 1e-5f);
        for (int64_t i = 0; i < n; ++i) o[i] = (xr[i] - mean) * rstd * w[i] + b[i];
      } else if (which == 1) {
        float ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
        const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(n) + 1e-5f);
        for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * rstd * w[i];
      } else {
        float m = -INFINITY, l = 0;
        for (int64_t i = 0; i < n; ++i) m = std::max(m, xr[i]);
        for (int64_t i = 0; i < n; ++i) l += (o[i] = std::exp(xr[i] - m));
        for (int64_t i = 0; i < n; ++i) o[i] /= l;
      }
    }
  };
  for (auto _ : st) {
    if (st.range(1) == 1) rows(0, kNormRows);
    else parallel_for(kNormRows, rows);
    benchmark::DoNotOptimize(out.data());
  }
  set_bandwidth(st, 2.0 * kNormRows * kNormFeatures * 4);
}

// Forward and backward: the ops' custom VJPs under jit (vjp(...).second(dy): the loss adds no work).
void BM_NormBackwardPalladium(benchmark::State& st) {
  const NormInputs& in = NormInputs::get();
  const int which = static_cast<int>(st.range(0));
  const pl::ops::NormOptions o{.block_rows = st.range(1), .backend = "cpu"};
  const pl::Array dy = pl::random::normal(pl::random::key(6), {kNormRows, kNormFeatures});
  auto ln = pl::jit([o](const pl::Array& x, const pl::Array& w, const pl::Array& b, const pl::Array& d) {
    return pl::vjp([o](const pl::Array& a, const pl::Array& c, const pl::Array& e) { return pl::ops::layer_norm(a, c, e, o); },
                   x, w, b).second(d);
  });
  auto rms = pl::jit([o](const pl::Array& x, const pl::Array& w, const pl::Array& d) {
    return pl::vjp([o](const pl::Array& a, const pl::Array& c) { return pl::ops::rms_norm(a, c, o); }, x, w).second(d);
  });
  auto soft = pl::jit([o](const pl::Array& x, const pl::Array& d) {
    return pl::vjp([o](const pl::Array& a) { return pl::ops::softmax(a, o); }, x).second(d);
  });
  auto run = [&] {
    if (which == 0) return std::get<0>(ln(in.x, in.w, in.b, dy));
    if (which == 1) return std::get<0>(rms(in.x, in.w, dy));
    return std::get<0>(soft(in.x, dy));
  };
  // dx against float64 formulas.
  const pl::Array x = in.x.astype(pl::f64), g = which == 2 ? dy.astype(pl::f64) : dy.astype(pl::f64) * in.w.astype(pl::f64);
  auto mean = [](const pl::Array& a) { return pl::jnp::mean(a, {1}, true); };
  const pl::Array c = which == 0 ? x - mean(x) : x;
  const pl::Array rstd = pl::jnp::rsqrt(mean(c * c) + 1e-5), hat = c * rstd;
  const pl::Array sm = pl::nn::softmax(x, -1);
  const pl::Array want = which == 0   ? rstd * (g - mean(g) - hat * mean(g * hat))
                         : which == 1 ? rstd * (g - hat * mean(g * hat))
                                      : sm * (g - pl::jnp::sum(g * sm, {1}, true));
  if (!checked(st, std::string(kNormNames[which]) + " backward", pl::rel_error(run(), want), 1e-4)) return;
  for (auto _ : st) benchmark::DoNotOptimize(run().data());
  set_bandwidth(st, 3.0 * kNormRows * kNormFeatures * 4);
}

// The plain -O3 loops: per row the forward's statistics, then dx; dw and db summed per thread.
void BM_NormBackwardPlain(benchmark::State& st) {
  const NormInputs& in = NormInputs::get();
  const int which = static_cast<int>(st.range(0));
  const pl::Array dy_array = pl::random::normal(pl::random::key(6), {kNormRows, kNormFeatures});
  const float* x = static_cast<const float*>(in.x.data());
  const float* w = static_cast<const float*>(in.w.data());
  const float* dy = static_cast<const float*>(dy_array.data());
  const int64_t n = kNormFeatures;
  std::vector<float> dx(static_cast<size_t>(kNormRows * n));
  std::vector<std::vector<float>> dw(static_cast<size_t>(threads()), std::vector<float>(static_cast<size_t>(2 * n)));
  auto rows = [&](int64_t lo, int64_t hi) {
    std::vector<float>& acc = dw[static_cast<size_t>(lo * threads() / kNormRows)];
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * n;
      const float* d = dy + r * n;
      float* o = dx.data() + r * n;
      if (which == 2) {
        float m = -INFINITY, l = 0, dot = 0;
        for (int64_t i = 0; i < n; ++i) m = std::max(m, xr[i]);
        for (int64_t i = 0; i < n; ++i) l += (o[i] = std::exp(xr[i] - m));
        for (int64_t i = 0; i < n; ++i) dot += d[i] * (o[i] /= l);
        for (int64_t i = 0; i < n; ++i) o[i] *= d[i] - dot;
        continue;
      }
      float mean = 0, var = 0, mg = 0, mgx = 0;
      if (which == 0) {
        for (int64_t i = 0; i < n; ++i) mean += xr[i];
        mean /= static_cast<float>(n);
      }
      for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const float rstd = 1.0f / std::sqrt(var / static_cast<float>(n) + 1e-5f);
      for (int64_t i = 0; i < n; ++i) {
        const float hat = (xr[i] - mean) * rstd, g = d[i] * w[i];
        mg += g;
        mgx += g * hat;
        acc[static_cast<size_t>(i)] += d[i] * hat;
        acc[static_cast<size_t>(n + i)] += d[i];
      }
      mg = which == 0 ? mg / static_cast<float>(n) : 0.0f;
      mgx /= static_cast<float>(n);
      for (int64_t i = 0; i < n; ++i) o[i] = rstd * (d[i] * w[i] - mg - (xr[i] - mean) * rstd * mgx);
    }
  };
  for (auto _ : st) {
    if (st.range(1) == 1) rows(0, kNormRows);
    else parallel_for(kNormRows, rows);
    benchmark::DoNotOptimize(dx.data());
  }
  set_bandwidth(st, 3.0 * kNormRows * kNormFeatures * 4);
}

// Collects real times so the summary can print ratios.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  // "BM_X/1024/min_time:1.000" -> "BM_X/1024"
  static std::string short_name(const std::string& name) {
    std::string out;
    size_t pos = 0;
    while (pos <= name.size()) {
      size_t end = name.find('/', pos);
      if (end == std::string::npos) end = name.size();
      const std::string part = name.substr(pos, end - pos);
      if (part.find(':') == std::string::npos && part != "real_time") out += (out.empty() ? "" : "/") + part;
      pos = end + 1;
    }
    return out;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) times_[short_name(r.benchmark_name())] = r.GetAdjustedRealTime();
    ConsoleReporter::ReportRuns(runs);
  }
  // The fastest of `names` that ran (the first name where none did).
  std::string fastest(const std::vector<std::string>& names) const {
    std::string best = names.front();
    for (const std::string& n : names) {
      auto cand = times_.find(n), cur = times_.find(best);
      if (cand != times_.end() && (cur == times_.end() || cand->second < cur->second)) best = n;
    }
    return best;
  }
  // The last number of a benchmark's name: its block.
  static int64_t block_of(const std::string& name) { return std::stoll(name.substr(name.rfind('/') + 1)); }
  bool ran(const std::string& name) const { return times_.count(name) > 0; }

  void summary() const {
    auto ratio = [&](const std::string& what, const std::string& ours, const std::string& peer) {
      auto a = times_.find(ours), b = times_.find(peer);
      if (a == times_.end() || b == times_.end()) return;
      std::printf("  %-52s %8.3f ms vs %8.3f ms   speed ratio %.2f\n", what.c_str(), a->second, b->second, b->second / a->second);
    };
    std::printf("\nSummary (speed ratio = peer time / Palladium time; >1 means Palladium is faster), %d threads:\n",
                threads());
    // Matmul: the fastest block of the candidates (a user picks the block shape).
    const std::string mm1024 = fastest({"BM_MatmulPalladium/1024/512", "BM_MatmulPalladium/1024/256",
                                        "BM_MatmulPalladium/1024/128"});
    // 2048^3 in blocks of 1024 (four programs): on the Emerald Rapids of stop 41, one interleaved
    // harness run (minimum of 12 rounds), 122.5 ms against 512's 127.6 at 1 thread, 67.8 against 80.2 at 2.
    const std::string mm2048 = fastest({"BM_MatmulPalladium/2048/1024", "BM_MatmulPalladium/2048/512",
                                        "BM_MatmulPalladium/2048/256"});
    ratio("matmul 1024^3 (block " + mm1024.substr(mm1024.rfind('/') + 1) + ") vs OpenBLAS sgemm", mm1024,
          "BM_MatmulOpenBLAS/1024");
    ratio("matmul 2048^3 (block " + mm2048.substr(mm2048.rfind('/') + 1) + ") vs OpenBLAS sgemm", mm2048,
          "BM_MatmulOpenBLAS/2048");
    ratio("jit(jnp::matmul) 1024^3 vs OpenBLAS sgemm", "BM_MatmulJit/1024", "BM_MatmulOpenBLAS/1024");
    ratio("jit(jnp::matmul) 2048^3 vs OpenBLAS sgemm", "BM_MatmulJit/2048", "BM_MatmulOpenBLAS/2048");
    // Bandwidth ratio: add moves 3/2 the bytes of the copy. The fastest block, as for the matmul.
    const std::string add = fastest({"BM_AddPalladium/65536", "BM_AddPalladium/16384", "BM_AddPalladium/4096",
                                     "BM_AddPalladium/1024"});
    for (const char* peer : {"BM_Memcpy/1", "BM_Memcpy/2"}) {
      auto a = times_.find(add), b = times_.find(peer);
      if (a != times_.end() && b != times_.end())
        std::printf("  %-52s %8.3f ms vs %8.3f ms   bandwidth ratio %.2f\n",
                    ("add 2^26 (block " + add.substr(add.rfind('/') + 1) + ") vs " + peer).c_str(), a->second, b->second,
                    1.5 * b->second / a->second);
    }
    // IndRNN: the fastest feature block, as the blog picks its best block shape. One program per
    // thread does best: on the Zen 4 at 1 thread block 1024 ran 0.119 ms against block 128's
    // 0.156 (stop 31), at 2 threads blocks 256-512.
    std::string indrnn = "BM_IndRnnPalladium/128/1";
    for (const char* b : {"BM_IndRnnPalladium/64/1", "BM_IndRnnPalladium/256/1", "BM_IndRnnPalladium/512/1",
                          "BM_IndRnnPalladium/1024/1"}) {
      auto cand = times_.find(b), cur = times_.find(indrnn);
      if (cand != times_.end() && cur != times_.end() && cand->second < cur->second) indrnn = b;
    }
    const std::string block = indrnn.substr(indrnn.find('/') + 1, indrnn.rfind('/') - indrnn.find('/') - 1);
    ratio("IndRNN (block " + block + ") vs plain loop (1 thread)", indrnn, "BM_IndRnnPlainLoop/1");
    ratio("IndRNN (block " + block + ") vs plain loop (threads)", indrnn, "BM_IndRnnPlainLoop/2");
    ratio("IndRNN vs the interpreter (block 128)", "BM_IndRnnPalladium/128/1", "BM_IndRnnPalladium/128/0");
    ratio("attention fwd vs plain C++ (1 thread)", "BM_AttentionPalladium/128/128", "BM_AttentionPlain/1");
    ratio("attention fwd vs plain C++ (threads)", "BM_AttentionPalladium/128/128", "BM_AttentionPlain/2");
#ifdef PL_HAVE_OPENBLAS
    const std::string blas_attention = BlasAttention::fastest_of(*this);
    ratio(std::string("attention fwd vs OpenBLAS sgemm + softmax (") +
              BlasAttention::form_name(BlasAttention::sliced_form(blas_attention)) + ")",
          "BM_AttentionPalladium/128/128", blas_attention);
#endif
    ratio("paged attention decode vs plain loop (1 thread)", "BM_PagedAttentionPalladium", "BM_PagedAttentionPlain/1");
    ratio("paged attention decode vs plain loop (threads)", "BM_PagedAttentionPalladium", "BM_PagedAttentionPlain/2");
    for (int which = 0; which < 3; ++which) {
      const std::string ours = fastest({"BM_NormPalladium/" + std::to_string(which) + "/0",
                                        "BM_NormPalladium/" + std::to_string(which) + "/64"});
      for (const char* t : {"1", "2"})
        ratio(std::string(kNormNames[which]) + " (rows/program " + ours.substr(ours.rfind('/') + 1) + ") vs plain loop (" +
                  (t[0] == '1' ? "1 thread" : "threads") + ")",
              ours, "BM_NormPlain/" + std::to_string(which) + "/" + t);
      const std::string bwd = "BM_NormBackwardPalladium/" + std::to_string(which) + "/0";
      for (const char* t : {"1", "2"})
        ratio(std::string(kNormNames[which]) + " fwd+bwd vs plain loop (" + (t[0] == '1' ? "1 thread" : "threads") + ")", bwd,
              "BM_NormBackwardPlain/" + std::to_string(which) + "/" + t);
    }
  }

 private:
  std::map<std::string, double> times_;
};

// ---- paired rounds ----
// The machines are shared: a neighbour's load moves memory bandwidth and clocks by 10-30% within a
// minute, so rows measured a minute apart compare the neighbours as much as the code (memcpy at 2
// threads ran 11.5 and 14.1 ms in two runs of one binary on a 2-core Xeon, stop 52). Here the
// ratios the issues name are measured again in alternating rounds, one call of each side a
// round, each side's best round kept: both sides see the same neighbours. Where the peer runs a
// threaded OpenBLAS (`quiet`), each call of either side starts after a pause: OpenBLAS's workers spin
// for about 2^28 cycles after a call before they sleep, and a call of ours made in that window shared
// the cores with them (2048^3 at 2 threads on the stop-54 Xeon: 87 ms right after an sgemm against 60
// ms after 300 ms of quiet). Elsewhere no pause: a pause costs a short call its warm thread pool.
constexpr auto kQuietBetweenCalls = std::chrono::milliseconds(250);
struct Paired {
  double ours_ms = 0, peer_ms = 0;
};
Paired alternate(const std::function<void()>& ours, const std::function<void()>& peer, int rounds, bool quiet) {
  using Clock = std::chrono::steady_clock;
  auto once = [quiet](const std::function<void()>& f) {
    if (quiet && threads() > 1) std::this_thread::sleep_for(kQuietBetweenCalls);
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  ours();  // warm: compiled, output blocks allocated, pages touched
  peer();
  Paired best{1e300, 1e300};
  for (int r = 0; r < rounds; ++r) {
    best.ours_ms = std::min(best.ours_ms, once(ours));
    best.peer_ms = std::min(best.peer_ms, once(peer));
  }
  return best;
}

void paired_summary(const RatioReporter& times) {
  std::printf("\nPaired rounds (alternating calls of each side, best of each), %d threads:\n", threads());
  auto print = [](const std::string& what, Paired p, double bytes_ratio, const char* kind) {
    std::printf("  %-52s %8.3f ms vs %8.3f ms   %s ratio %.2f\n", what.c_str(), p.ours_ms, p.peer_ms, kind,
                bytes_ratio * p.peer_ms / p.ours_ms);
  };
#ifdef PL_HAVE_OPENBLAS
  openblas_set_num_threads(threads());
  for (int64_t n : {int64_t{1024}, int64_t{2048}}) {
    const std::string prefix = "BM_MatmulPalladium/" + std::to_string(n) + "/";
    const std::string best = times.fastest({prefix + std::to_string(n / 2), prefix + std::to_string(n / 4),
                                            prefix + std::to_string(n / 8)});
    if (!times.ran(best)) continue;
    auto keys = pl::random::split(pl::random::key(0));
    const pl::Array x = pl::random::normal(keys[0], {n, n}), y = pl::random::normal(keys[1], {n, n});
    const std::vector<float> a = x.to_vector<float>(), b = y.to_vector<float>();
    std::vector<float> c(a.size());
    auto f = matmul_call(n, RatioReporter::block_of(best));
    const int dim = static_cast<int>(n);
    const Paired p = alternate([&] { benchmark::DoNotOptimize(f(x, y).data()); },
                               [&] {
                                 cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim, dim, dim, 1.0f, a.data(), dim,
                                             b.data(), dim, 0.0f, c.data(), dim);
                                 benchmark::DoNotOptimize(c.data());
                               },
                               n == 1024 ? 30 : 8, /*quiet=*/true);
    print("matmul " + std::to_string(n) + "^3 (block " + std::to_string(RatioReporter::block_of(best)) +
              ") vs OpenBLAS sgemm",
          p, 1.0, "speed");
  }
  const std::string blas_attention = BlasAttention::fastest_of(times);
  if (times.ran("BM_AttentionPalladium/128/128") && times.ran(blas_attention)) {
    BlasAttention peer(BlasAttention::sliced_form(blas_attention));
    const pl::ops::MhaOptions o{.sm_scale = kScale, .block_q = 128, .block_k = 128, .backend = "cpu"};
    const Paired p = alternate([&] { benchmark::DoNotOptimize(pl::ops::mha(peer.in.q, peer.in.k, peer.in.v, pl::Array(), o).data()); },
                               [&] {
                                 peer.run();
                                 benchmark::DoNotOptimize(peer.out.data());
                               },
                               30, /*quiet=*/!peer.sliced);
    print(std::string("attention fwd vs OpenBLAS sgemm + softmax (") + BlasAttention::form_name(peer.sliced) + ")", p, 1.0, "speed");
  }
#endif
  const std::string add = times.fastest({"BM_AddPalladium/65536", "BM_AddPalladium/16384", "BM_AddPalladium/4096",
                                         "BM_AddPalladium/1024"});
  if (times.ran(add)) {
    const int64_t block = RatioReporter::block_of(add);
    auto f = add_call(block);
    auto keys = pl::random::split(pl::random::key(3));
    const pl::Array x = pl::random::normal(keys[0], {kAddElements}), y = pl::random::normal(keys[1], {kAddElements});
    const size_t bytes = static_cast<size_t>(kAddElements) * 4;
    std::vector<char> src(bytes, 1), dst(bytes, 0);
    const Paired p = alternate([&] { benchmark::DoNotOptimize(f(x, y).data()); },
                               [&] {
                                 copy_in_parts(dst.data(), src.data(), bytes, threads());
                                 benchmark::DoNotOptimize(dst.data());
                               },
                               20, /*quiet=*/false);
    print("add 2^26 (block " + std::to_string(block) + ") vs memcpy, same threads", p, 1.5, "bandwidth");
  }
}

}  // namespace

BENCHMARK(BM_MatmulPalladium)->Args({1024, 512})->Args({1024, 256})->Args({1024, 128})->Args({2048, 1024})->Args({2048, 512})->Args({2048, 256})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_MatmulJit)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
#ifdef PL_HAVE_OPENBLAS
BENCHMARK(BM_MatmulOpenBLAS)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
#endif
BENCHMARK(BM_AddPalladium)->Arg(65536)->Arg(1 << 14)->Arg(4096)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_Memcpy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_IndRnnPalladium)->Args({128, 1})->Args({64, 1})->Args({256, 1})->Args({512, 1})->Args({1024, 1})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_IndRnnPalladium)->Args({128, 0})->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_IndRnnPlainLoop)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionPalladium)->Args({128, 128})->Args({64, 64})->Args({128, 64})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionPlain)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
#ifdef PL_HAVE_OPENBLAS
BENCHMARK(BM_AttentionOpenBLAS)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif
BENCHMARK(BM_PagedAttentionPalladium)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PagedAttentionPlain)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_NormPalladium)->ArgsProduct({{0, 1, 2}, {0, 64}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_NormPlain)->ArgsProduct({{0, 1, 2}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_NormBackwardPalladium)->ArgsProduct({{0, 1, 2}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_NormBackwardPlain)->ArgsProduct({{0, 1, 2}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_QuickstartMatmulFirstCall)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

#ifdef PL_HAVE_OPENBLAS
// OpenBLAS picks its kernels by CPU model, once, as it loads. A model newer than the installed
// OpenBLAS knows falls back to generic kernels: Debian 12's 0.3.21 on an Emerald Rapids Xeon
// (family 6, model 207; stop 41) chose "Prescott", SSE3 kernels that ran the 1024^3 sgemm in 103-132
// ms against 20.8 with its AVX-512 ones: a peer of straw. Where OpenBLAS chose kernels without
// AVX2 on a CPU with AVX2 and FMA, the run starts itself again with OPENBLAS_CORETYPE naming
// SkylakeX (AVX-512) or Haswell (AVX2); a choice OpenBLAS made among its AVX2 and AVX-512 kernels
// (Zen on an AMD CPU, say) is kept, as is a name the user set.
void give_openblas_its_best_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
#if defined(__x86_64__)
  const std::string core = openblas_get_corename();
  bool generic = false;  // OpenBLAS's x86-64 kernels older than AVX2
  for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Sandybridge", "Katmai", "Banias"})
    generic = generic || strcasecmp(core.c_str(), old) == 0;
  if (!generic || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
  const char* wanted = __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell";
  std::fprintf(stderr, "cpu_bench: OpenBLAS chose its '%s' kernels for this CPU; running again with OPENBLAS_CORETYPE=%s\n",
               core.c_str(), wanted);
  setenv("OPENBLAS_CORETYPE", wanted, 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "cpu_bench: could not start again (%s); OpenBLAS keeps its '%s' kernels\n", std::strerror(errno),
               core.c_str());
#else
  (void)argv;
#endif
}
#endif

int main(int argc, char** argv) {
#ifdef PL_HAVE_OPENBLAS
  give_openblas_its_best_kernels(argv);
  std::printf("OpenBLAS kernels: %s\n", openblas_get_corename());
#endif
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.summary();
  paired_summary(reporter);
  benchmark::Shutdown();
  return 0;
}
