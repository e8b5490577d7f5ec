// CUDA backend benchmarks, printed as one table (run on a GPU; peers run in the same job by
// tools/gpu_run.sh):
//   - f32 vector add of 2^28 elements as a Palladium kernel vs the device-to-device copy bandwidth;
//   - bf16 matmul 4096^3 and 8192^3 as a Palladium kernel vs cuBLASLt called from this binary;
//   - the seed attention forward (ops::mha), bf16, batch*seq = 16384, hidden 2048, and forward +
//     backward through the custom VJP;
//   - IndRNN, T=1000, F=1024 (peers: jax lax.scan and Pallas-Triton, in peers/jax_peers.py);
//   - compile time of the attention kernel, cold and from the disk cache;
//   - the launch overhead of a tiny kernel;
//   - the program level ("program"): a jitted chain of 8 ops against one pallas_call, and the host
//     dispatch cost of a jitted 21-op program, a mixed one and an eager op.
// Kernel times are CUDA-event medians around each launch (the backend's launch timing); "call"
// times are host wall-clock per pallas_call including tracing-cache lookups and allocation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <palladium/device.h>
#include <palladium/palladium.h>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_runtime.h"
#include "ops/attention.h"
#include "ops/indrnn.h"
#include "ops/norms.h"
#include "ops/paged_attention.h"

#ifdef PL_HAVE_CUBLASLT
#include <cublasLt.h>
#endif

namespace pl = palladium;
namespace jnp = palladium::jnp;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Device time of `launch` (one pallas_call): the median over `iters` of the event-timed launch.
double kernel_ms(const std::function<void()>& launch, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    launch();
    t.push_back(palladium::cuda::last_launch_ms());
  }
  return median(t);
}

// Device time of arbitrary queued work, by events around `iters` repetitions, median of 5.
double events_ms(const std::function<void()>& work, int iters) {
  const palladium::cuda::DriverApi& d = *palladium::cuda::driver();
  palladium::cuda::CUevent a, b;
  d.cuEventCreate(&a, 0);
  d.cuEventCreate(&b, 0);
  work();
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    d.cuEventRecord(a, nullptr);
    for (int i = 0; i < iters; ++i) work();
    d.cuEventRecord(b, nullptr);
    d.cuEventSynchronize(b);
    float ms = 0;
    d.cuEventElapsedTime(&ms, a, b);
    t.push_back(ms / iters);
  }
  d.cuEventDestroy(a);
  d.cuEventDestroy(b);
  return median(t);
}

struct Row {
  std::string what, shape, system;
  double ms;
  std::string rate;
};
std::vector<Row> rows;

void report(const std::string& what, const std::string& shape, const std::string& system, double ms,
            const std::string& rate) {
  rows.push_back({what, shape, system, ms, rate});
  std::printf("ROW %-22s %-28s %-34s %9.3f ms %s\n", what.c_str(), shape.c_str(), system.c_str(), ms, rate.c_str());
  std::fflush(stdout);
}
// A benchmark whose result is wrong, or that failed, makes the program exit non-zero.
bool any_failure = false;
void fail(const std::string& what) {
  any_failure = true;
  std::printf("FAIL %s\n", what.c_str());
  std::fflush(stdout);
}
// Prints the check and fails when err exceeds tol.
void check(const std::string& what, double err, double tol) {
  std::printf("CHECK %s: %.2e (limit %.0e)\n", what.c_str(), err, tol);
  if (!(err <= tol)) fail(what + ": error " + std::to_string(err) + " over " + std::to_string(tol));
}

std::string tflops(double flops, double ms) { return std::to_string(static_cast<int>(flops / ms / 1e9)) + " TFLOP/s"; }
std::string fixed(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}
std::string gbps(double bytes, double ms) { return std::to_string(static_cast<int>(bytes / ms / 1e6)) + " GB/s"; }

pl::Device gpu() { return pl::cuda_device(0); }

// ---------------------------------------------------------------- memory bound

void bench_add() {
  const int64_t n = int64_t{1} << 28;
  pl::Array x = pl::to_device(pl::random::normal(pl::random::key(1), {n}), gpu());
  pl::Array y = pl::to_device(pl::random::normal(pl::random::key(2), {n}), gpu());
  // Device-to-device copy of the same bytes: the ceiling, measured in this run.
  pl::Array dst = pl::empty({n}, pl::f32, gpu());
  const auto& d = *palladium::cuda::driver();
  const double copy = events_ms([&] {
    d.cuMemcpyDtoDAsync(reinterpret_cast<palladium::cuda::CUdeviceptr>(dst.data()),
                        reinterpret_cast<palladium::cuda::CUdeviceptr>(x.data()), static_cast<size_t>(n) * 4, nullptr);
  }, 10);
  report("d2d copy f32", "2^28", "cuMemcpyDtoDAsync", copy, gbps(8.0 * n, copy));
  for (int64_t block : {2048, 8192, 32768}) {
    auto add = pl::pallas_call(
        [](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = a[pl::all] + b[pl::all]; }, pl::ShapeDtype({n}, pl::f32),
        {.grid = {n / block},
         .in_specs = {pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); }),
                      pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); })},
         .out_specs = {pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); })},
         .backend = "cuda"});
    pl::Array out = add(x, y);
    {
      // Sampled against the float64 sum: one float32 rounding, half an ulp.
      pl::Array h = pl::to_host(out), hx = pl::to_host(x), hy = pl::to_host(y);
      double err = 0;
      for (int64_t i = block % 4099; i < n; i += 4099) {
        const double want = hx.get(i) + hy.get(i);
        err = std::max(err, std::fabs(h.get(i) - want) / std::max(1.0, std::fabs(want)));
      }
      check("add block " + std::to_string(block) + " vs float64 (sampled, max relative)", err, 1e-7);
    }
    const double ms = kernel_ms([&] { out = add(x, y); }, 3, 20);
    report("add f32", "2^28 block " + std::to_string(block), "palladium cuda", ms,
           gbps(12.0 * n, ms) + " (" + std::to_string(static_cast<int>(100 * (12.0 * n / ms) / (8.0 * n / copy))) +
               "% of copy)");
  }
}

// ---------------------------------------------------------------- matmul

pl::Callable<pl::Array> matmul_call(int64_t n, int64_t bm, int64_t bn, int64_t bk, int warps, int stages) {
  auto kernel = [n, bk, bm, bn](pl::Ref x_ref, pl::Ref y_ref, pl::Ref o_ref) {
    pl::Value acc = jnp::zeros({bm, bn}, pl::f32);
    acc = pl::lax::fori_loop(0, n / bk, [&](pl::Value i, pl::Value a) {
      pl::Value x = x_ref(pl::slice(), pl::ds(i * bk, bk));
      pl::Value y = y_ref(pl::ds(i * bk, bk), pl::slice());
      return a + pl::dot(x, y);
    }, acc);
    o_ref[pl::all] = acc.astype(pl::bf16);
  };
  return pl::pallas_call(
      kernel, pl::ShapeDtype({n, n}, pl::bf16),
      {.grid = {n / bm, n / bn},
       .in_specs = {pl::BlockSpec({bm, n}, [](pl::Index i, pl::Index) { return pl::idx(i, 0); }),
                    pl::BlockSpec({n, bn}, [](pl::Index, pl::Index j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); })},
       .name = "matmul",
       .debug = std::getenv("PL_BENCH_DEBUG") != nullptr,
       .backend = "cuda",
       .compiler_params = {.num_warps = warps, .num_stages = stages}});
}

#ifdef PL_HAVE_CUBLASLT
// C (row-major n x n, bf16) = A @ B through cuBLASLt: column-major C^T = B^T A^T.
struct Cublas {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void* workspace = nullptr;
  size_t ws = 64u << 20;
  bool ok = false;
  explicit Cublas(int64_t n) {
    if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, n, n);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, n, n);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, n, n);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (found < 1) return;
    algo = res.algo;
    workspace = reinterpret_cast<void*>(palladium::cuda::allocate(0, ws));
    ok = true;
  }
  void run(const void* a, const void* b, void* c) {
    const float alpha = 1.0f, beta = 0.0f;
    cublasLtMatmul(h, op, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &algo, workspace, ws, nullptr);
  }
};
#endif

// bf16 matmul at 4096^3 and 8192^3 (the sizes of the peers' tables): cuBLASLt from this binary,
// jnp::matmul under jit, and the blocked kernel at fixed tilings.
void bench_matmul_size(int64_t n) {
  const double flops = 2.0 * n * n * n;
  const std::string shape = std::to_string(n) + "^3";
  pl::Array a = pl::to_device(pl::random::normal(pl::random::key(3), {n, n}, pl::bf16), gpu());
  pl::Array b = pl::to_device(pl::random::normal(pl::random::key(4), {n, n}, pl::bf16), gpu());
  const pl::Array ha = pl::to_host(a), hb = pl::to_host(b);
  pl::Array ref;
#ifdef PL_HAVE_CUBLASLT
  Cublas blas(n);
  if (blas.ok) {
    ref = pl::empty({n, n}, pl::bf16, gpu());
    const double ms = events_ms([&] { blas.run(a.data(), b.data(), ref.data()); }, 10);
    report("matmul bf16", shape, "cuBLASLt (same binary)", ms, tflops(flops, ms));
  }
#endif
  // The program level's matmul (jnp::matmul under jit): its candidate tilings autotuned at the
  // first call (PALLADIUM_AUTOTUNE_VERBOSE=1 prints the times and the choice), and the first
  // tiling alone (PALLADIUM_AUTOTUNE=0).
  for (const bool tuned : {false, true}) {
    try {
      auto jm = pl::jit([](const pl::Array& x, const pl::Array& y) { return jnp::matmul(x, y); });
      if (!tuned) ::setenv("PALLADIUM_AUTOTUNE", "0", 1);  // every call takes the first tiling
      pl::Array out = jm(a, b);
      if (ref.defined())
        check("jit(jnp::matmul) vs cuBLASLt (relative)", pl::rel_error(pl::to_host(out).astype(pl::f64), pl::to_host(ref).astype(pl::f64)), 1.0 / 128);
      // Queued calls timed by events: from the second call on, the jitted program replays as a CUDA
      // graph, whose launches the per-launch timing (kernel_ms) never sees.
      const double ms = events_ms([&] { out = jm(a, b); }, 10);
      ::unsetenv("PALLADIUM_AUTOTUNE");
      report("matmul bf16", shape, tuned ? "palladium jit(jnp::matmul), autotuned" : "palladium jit(jnp::matmul), first tiling",
             ms, tflops(flops, ms));
    } catch (const std::exception& e) {
      ::unsetenv("PALLADIUM_AUTOTUNE");
      fail(std::string("jit(jnp::matmul): ") + e.what());
    }
  }
  struct Config { int64_t bm, bn, bk; int warps, stages; };
  // 8 warps per 128 rows (16 per 256) run on wgmma (sm_90a); 4 warps per 128 rows on mma.sync.
  for (Config c : {Config{128, 128, 64, 8, 3}, Config{128, 128, 64, 8, 4}, Config{128, 256, 64, 8, 3},
                   Config{128, 256, 64, 8, 4}, Config{256, 128, 64, 16, 3}, Config{128, 128, 64, 4, 3}}) {
    try {
      auto mm = matmul_call(n, c.bm, c.bn, c.bk, c.warps, c.stages);
      pl::Array out = mm(a, b);
      {
        // 64 sampled elements against float64 dot products of the bf16 inputs (the output is bf16).
        pl::Array h = pl::to_host(out);
        double num = 0, den = 0;
        for (int64_t s = 0; s < 64; ++s) {
          const int64_t i = (s * 2654435761LL) % n, j = (s * 40503LL + 17) % n;
          double want = 0;
          for (int64_t t = 0; t < n; ++t) want += ha.get(i * n + t) * hb.get(t * n + j);
          num += std::pow(h.get(i * n + j) - want, 2);
          den += want * want;
        }
        check("matmul " + std::to_string(c.bm) + "x" + std::to_string(c.bn) + "x" + std::to_string(c.bk) + " w" +
                  std::to_string(c.warps) + " s" + std::to_string(c.stages) + " vs float64 (64 samples)",
              std::sqrt(num / den), 1e-2);
      }
      // Queued calls timed by events, as cuBLASLt and the jitted matmul above are, so that the rows
      // compare: per-launch timing (kernel_ms, the GPU idle between launches) had this kernel at
      // 1.420 ms where the jitted program running it replayed at 1.475 (H100, stop 40 job 1).
      const double ms = events_ms([&] { out = mm(a, b); }, 10);
      report("matmul bf16", shape, "palladium " + std::to_string(c.bm) + "x" + std::to_string(c.bn) + "x" +
                                          std::to_string(c.bk) + " w" + std::to_string(c.warps) + " s" +
                                          std::to_string(c.stages), ms, tflops(flops, ms));
    } catch (const std::exception& e) {
      fail(std::string("matmul config: ") + e.what());
    }
  }
}

void bench_matmul() {
  for (int64_t n : {4096, 8192}) bench_matmul_size(n);
}

// ---------------------------------------------------------------- attention

// The attention problems of the peers' tables: bf16, batch * seq = 16384 tokens, hidden 2048,
// head_dim 64 and 128, seq 2048 and 8192, causal and not; fresh random q, k, v, dout on the GPU.
struct AttentionCase {
  int64_t d, seq, batch, heads;
  bool causal;
  pl::Array q, k, v, dout;
  double forward_flops() const { return 4.0 * batch * heads * seq * seq * d / (causal ? 2 : 1); }
  std::string tag() const {
    return "b" + std::to_string(batch) + " s" + std::to_string(seq) + " h" + std::to_string(heads) + " d" +
           std::to_string(d) + " c" + std::to_string(causal);
  }
};
// Head 0 of batch 0 of a (batch, seq, heads, d) array, on the host: (1, seq, 1, d).
pl::Array first_head(const pl::Array& a) {
  const pl::Array h = pl::to_host(a);
  const int64_t seq = h.shape()[1], heads = h.shape()[2], d = h.shape()[3];
  pl::Array out({1, seq, 1, d}, h.dtype());
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t e = 0; e < d; ++e) out.set(t * d + e, h.get((t * heads) * d + e));
  return out;
}

// PL_BENCH_ATTN_D and PL_BENCH_ATTN_SEQ restrict the cases to one head size or sequence length.
void for_each_attention_case(const std::function<void(const AttentionCase&)>& run) {
  auto only = [](const char* var, int64_t x) {
    const char* v = std::getenv(var);
    return !v || !*v || std::atoll(v) == x;
  };
  for (int64_t d : {64, 128}) {
    if (!only("PL_BENCH_ATTN_D", d)) continue;
    for (int64_t seq : {2048, 8192}) {
      if (!only("PL_BENCH_ATTN_SEQ", seq)) continue;
      AttentionCase c{d, seq, 16384 / seq, 2048 / d, false, {}, {}, {}, {}};
      const pl::Shape shape{c.batch, seq, c.heads, d};
      c.q = pl::to_device(pl::random::normal(pl::random::key(5), shape, pl::bf16), gpu());
      c.k = pl::to_device(pl::random::normal(pl::random::key(6), shape, pl::bf16), gpu());
      c.v = pl::to_device(pl::random::normal(pl::random::key(7), shape, pl::bf16), gpu());
      c.dout = pl::to_device(pl::random::normal(pl::random::key(9), shape, pl::bf16), gpu());
      for (bool causal : {false, true}) {
        c.causal = causal;
        run(c);
      }
    }
  }
}

// MhaOptions::autotune against the default blocks (128 x 128), forward, seq 2048, both head sizes:
// the tuned call's first run times its candidates (PALLADIUM_AUTOTUNE_VERBOSE=1 prints them).
void bench_autotune() {
  for_each_attention_case([&](const AttentionCase& c) {
    if (c.seq != 2048) return;
    double base_ms = 0;
    for (bool tuned : {false, true}) {
      pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d))),
                            .causal = c.causal, .block_q = 128, .block_k = 128, .backend = "cuda"};
      o.autotune = tuned;
      try {
        pl::Array out;
        const double ms = kernel_ms([&] { out = pl::ops::mha(c.q, c.k, c.v, pl::Array(), o); }, 2, 10);
        if (!tuned) base_ms = ms;
        report("attn fwd", c.tag(), tuned ? "palladium mha, autotuned blocks" : "palladium mha, blocks 128 x 128", ms,
               tflops(c.forward_flops(), ms) + (tuned ? "; " + fixed(base_ms / ms) + "x the default" : ""));
        auto ref = pl::ops::mha_reference(first_head(c.q), first_head(c.k), first_head(c.v), pl::Array(), o.sm_scale,
                                          c.causal);
        check("attn fwd " + c.tag() + (tuned ? " autotuned" : " default") + " head 0 vs float64",
              pl::rel_error(first_head(out), ref.out), 5e-3);
      } catch (const std::exception& e) {
        fail("attention autotune " + c.tag() + ": " + e.what());
      }
    }
  });
}

// One launch of each kernel the profile looks at (tools/gpu_run.sh profile runs Nsight Compute on
// them): the bf16 matmul 4096^3 at 128 x 256 tiles and 4 stages, then for the first attention case
// (PL_BENCH_ATTN_D / PL_BENCH_ATTN_SEQ pick it; PL_BENCH_PROFILE_CAUSAL=1 masks it) the forward at
// blocks 128 x 128 and the forward and backward at the defaults of the fwd+bwd rows (128, backward 64).
void bench_profile_launches() {
  const int64_t n = 4096;
  const pl::Array a = pl::to_device(pl::random::normal(pl::random::key(1), {n, n}, pl::bf16), gpu());
  const pl::Array b = pl::to_device(pl::random::normal(pl::random::key(2), {n, n}, pl::bf16), gpu());
  pl::Array out = matmul_call(n, 128, 256, 64, 8, 4)(a, b);
  bool done = false;
  for_each_attention_case([&](const AttentionCase& c) {
    if (done) return;
    done = true;
    const char* causal = std::getenv("PL_BENCH_PROFILE_CAUSAL");
    pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d))),
                          .causal = causal && std::string(causal) == "1", .block_q = 128, .block_k = 128,
                          .backend = "cuda"};
    out = pl::ops::mha(c.q, c.k, c.v, pl::Array(), o);
    o.backward_block = 64;
    (void)pl::ops::mha_vjp(c.q, c.k, c.v, pl::Array(), o).backward(c.dout);
  });
  pl::to_host(out);
}

void bench_attention() {
  // fast_math (the default of ops::mha, as Triton's exp); PL_BENCH_EXACT_EXP=1 adds the exact
  // libdevice exp for comparison.
  const char* exact_env = std::getenv("PL_BENCH_EXACT_EXP");
  const bool exact_too = exact_env && std::string(exact_env) == "1";
  for_each_attention_case([&](const AttentionCase& c) {
    for (int64_t bk : {64, 128}) {
      for (bool fast : {true, false}) {
        if (!fast && !exact_too) continue;
        pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d))),
                              .causal = c.causal, .block_q = 128, .block_k = bk, .backend = "cuda", .fast_math = fast};
        const std::string name = "palladium mha bq128 bk" + std::to_string(bk) + (fast ? "" : " exact-exp");
        try {
          pl::Array out;
          const double ms = kernel_ms([&] { out = pl::ops::mha(c.q, c.k, c.v, pl::Array(), o); }, 2, 10);
          report("attn fwd", c.tag(), name, ms, tflops(c.forward_flops(), ms));
          if (c.seq == 2048) {  // head 0 against float64 (the float64 reference at 8192 takes too long)
            auto ref = pl::ops::mha_reference(first_head(c.q), first_head(c.k), first_head(c.v), pl::Array(),
                                              o.sm_scale, c.causal);
            check("attn fwd " + c.tag() + " " + name + " head 0 vs float64", pl::rel_error(first_head(out), ref.out),
                  5e-3);
          }
        } catch (const std::exception& e) {
          fail("attention " + c.tag() + " " + name + ": " + e.what());
        }
      }
    }
  });
}

// Forward + backward through the custom VJP (forward with residuals, preprocess, dq/dk/dv),
// counted as 3.5x the forward's flops like the peers.
void bench_attention_backward() {
  // Forward blocks, backward blocks, backward stages (0: the default, the seed's 2).
  // The defaults are forward 128 and backward 64. On an H100 (stop 26) a third backward stage
  // (one program per SM instead of two) ran at 0.73-0.93x these, and backward blocks of 128 at
  // 0.75-1.0x; 8 warps at block 64 had measured 0.55-0.7x the backend's 4.
  // "atomic" (PL_BENCH_ATTN_ATOMIC=1): dq by atomic adds in the dk/dv scan (MhaBackwardDq::Atomic),
  // five dots per block pair instead of the seed's seven (0.74-0.87x the seed's way on an H100,
  // stop 30; 0.75-0.85x in stop 31 job 5). Left out by default: with it the stage ran past
  // gpu_run.sh's 150 s on a fresh machine (stop 31 job 5).
  struct Config {
    int64_t fwd_block, bwd_block;
    int stages;
    pl::ops::MhaBackwardDq dq;
    int64_t bwd_block_q = 0;  // atomic only: a query block other than bwd_block (its key block)
  };
  using Dq = pl::ops::MhaBackwardDq;
  const char* atomic_env = std::getenv("PL_BENCH_ATTN_ATOMIC");
  std::vector<Config> configs{{128, 64, 0, Dq::SeparateLoop}, {64, 64, 0, Dq::SeparateLoop}};
  if (atomic_env && std::string(atomic_env) == "1") configs.push_back({128, 64, 0, Dq::Atomic});
  // PL_BENCH_ATTN_BWD_CONFIGS="fwd/bwd/stages[/atomic],...", e.g. "128/64/0,128/128/0/atomic", replaces the list
  // (to try other backward blocks within one stage's time); bwd may be QxK with atomic, e.g.
  // "128/64x128/0/atomic" for 64 query rows by 128 keys.
  if (const char* list = std::getenv("PL_BENCH_ATTN_BWD_CONFIGS"); list && *list) {
    configs.clear();
    std::stringstream items(list);
    for (std::string item; std::getline(items, item, ',');) {
      Config cfg{0, 0, 0, Dq::SeparateLoop};
      char dq[16] = "";
      int fields = std::sscanf(item.c_str(), "%ld/%ldx%ld/%d/%15s", &cfg.fwd_block, &cfg.bwd_block_q, &cfg.bwd_block,
                               &cfg.stages, dq);
      if (fields >= 4) {
        --fields;  // counted as fwd/bwd/stages[/atomic]
      } else {
        cfg.bwd_block_q = 0;
        fields = std::sscanf(item.c_str(), "%ld/%ld/%d/%15s", &cfg.fwd_block, &cfg.bwd_block, &cfg.stages, dq);
      }
      const std::string dq_name = dq;
      if (fields < 3 || cfg.fwd_block <= 0 || cfg.bwd_block <= 0 || cfg.stages < 0 || cfg.bwd_block_q < 0 ||
          (fields == 4 && dq_name != "atomic") || (cfg.bwd_block_q > 0 && dq_name != "atomic")) {
        fail("PL_BENCH_ATTN_BWD_CONFIGS: '" + item +
             "' is not fwd/bwd/stages[/atomic] (positive blocks, bwd as QxK only with atomic, stages 0 for the default)");
        return;
      }
      if (dq_name == "atomic") cfg.dq = Dq::Atomic;
      configs.push_back(cfg);
    }
  }
  for_each_attention_case([&configs](const AttentionCase& c) {
    for (const Config& cfg : configs) {
      pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d))),
                            .causal = c.causal, .block_q = cfg.fwd_block, .block_k = cfg.fwd_block, .backend = "cuda"};
      o.backward_block = cfg.bwd_block;
      o.backward_block_q = cfg.bwd_block_q;
      o.backward_dq = cfg.dq;
      if (cfg.stages) o.backward_num_stages = cfg.stages;
      const std::string blocks = (cfg.bwd_block_q ? std::to_string(cfg.bwd_block_q) + "x" : "") + std::to_string(cfg.bwd_block);
      const std::string name = "palladium mha_vjp f" + std::to_string(cfg.fwd_block) + " b" + blocks +
                               (cfg.stages ? " s" + std::to_string(cfg.stages) : "") + (cfg.dq == Dq::Atomic ? " atomic" : "");
      try {
        const double ms = events_ms([&] { (void)pl::ops::mha_vjp(c.q, c.k, c.v, pl::Array(), o).backward(c.dout); }, 3);
        report("attn fwd+bwd", c.tag(), name, ms, tflops(3.5 * c.forward_flops(), ms));
        if (c.seq == 2048) {  // the gradients of head 0 against float64
          auto [dq, dk, dv] = pl::ops::mha_vjp(c.q, c.k, c.v, pl::Array(), o).backward(c.dout);
          auto [rq, rk, rv] = pl::ops::mha_reference_backward(first_head(c.q), first_head(c.k), first_head(c.v),
                                                              pl::Array(), first_head(c.dout), o.sm_scale, c.causal);
          const double err = std::max({pl::rel_error(first_head(dq), rq), pl::rel_error(first_head(dk), rk),
                                       pl::rel_error(first_head(dv), rv)});
          check("attn fwd+bwd " + c.tag() + " " + name + " head 0 gradients vs float64", err, 1e-2);
        }
      } catch (const std::exception& e) {
        fail("attention bwd " + c.tag() + " " + name + ": " + e.what());
      }
    }
  });
}

// The backward's preprocess, delta = sum(out * dout, -1), alone at several row blocks (the
// backward passes its own, 64 by default), in GB/s of the two bf16 inputs read, each result
// checked against float64 first.
void bench_attention_preprocess() {
  for_each_attention_case([](const AttentionCase& c) {
    if (c.causal) return;  // the preprocess does not depend on the mask
    // Head 0 of batch 0 in float64, on the host.
    const pl::Array ref = pl::jnp::reshape(
        pl::jnp::sum(first_head(c.q).astype(pl::f64) * first_head(c.dout).astype(pl::f64), {-1}), {1, 1, c.seq});
    for (int64_t block : {16, 32, 64, 128}) {
      pl::ops::MhaOptions o{.block_q = block, .backend = "cuda"};
      const std::string name = "palladium preprocess b" + std::to_string(block);
      try {
        const pl::Array delta = pl::to_host(pl::ops::mha_preprocess_backward(c.q, c.dout, o));
        pl::Array head0({1, 1, c.seq}, pl::f32);
        for (int64_t t = 0; t < c.seq; ++t) head0.set(t, delta.get(t));
        check("attn preprocess " + c.tag() + " " + name + " head 0 vs float64", pl::rel_error(head0, ref), 1e-5);
        const double ms = events_ms([&] { (void)pl::ops::mha_preprocess_backward(c.q, c.dout, o); }, 10);
        report("attn preprocess", c.tag(), name, ms, gbps(2.0 * 2.0 * c.batch * c.seq * c.heads * c.d, ms));
      } catch (const std::exception& e) {
        fail("attention preprocess " + c.tag() + " " + name + ": " + e.what());
      }
    }
  });
}

// grad of the attention loss sum(mha(q, k, v) * dout) through the custom VJP (eager and under jit)
// against the forward and backward kernels called by hand (mha_vjp(...).backward(dout)): the
// program level's overhead. The loss adds one multiply and one sum over the output.
void bench_grad_attention() {
  for_each_attention_case([](const AttentionCase& c) {
    if (c.seq != 2048) return;
    pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d))), .causal = c.causal,
                          .block_q = 128, .block_k = 128, .backend = "cuda"};
    const pl::Array dout = c.dout;
    auto loss = [o, dout](const pl::Array& q, const pl::Array& k, const pl::Array& v) {
      return pl::jnp::sum(pl::ops::mha(q, k, v, pl::Array(), o) * dout);
    };
    auto grad = pl::grad<0, 1, 2>(loss);
    auto jitted = pl::jit(pl::grad<0, 1, 2>(loss));
    try {
      const double by_hand = events_ms([&] { (void)pl::ops::mha_vjp(c.q, c.k, c.v, pl::Array(), o).backward(c.dout); }, 3);
      const double eager = events_ms([&] { (void)grad(c.q, c.k, c.v); }, 3);
      const double jit = events_ms([&] { (void)jitted(c.q, c.k, c.v); }, 3);
      auto [dq, dk, dv] = jitted(c.q, c.k, c.v);
      auto [hq, hk, hv] = pl::ops::mha_vjp(c.q, c.k, c.v, pl::Array(), o).backward(c.dout);
      check("grad attention " + c.tag() + " jit(grad) vs by hand",
            std::max({pl::rel_error(pl::to_host(dq).astype(pl::f64), pl::to_host(hq).astype(pl::f64)),
                      pl::rel_error(pl::to_host(dk).astype(pl::f64), pl::to_host(hk).astype(pl::f64)),
                      pl::rel_error(pl::to_host(dv).astype(pl::f64), pl::to_host(hv).astype(pl::f64))}),
            1e-2);
      report("attn grad", c.tag(), "mha_vjp forward+backward by hand", by_hand, "");
      report("attn grad", c.tag(), "grad(loss), eager", eager, std::to_string(by_hand / eager).substr(0, 4) + "x by hand");
      report("attn grad", c.tag(), "jit(grad(loss))", jit, std::to_string(by_hand / jit).substr(0, 4) + "x by hand");
    } catch (const std::exception& e) {
      fail("grad attention " + c.tag() + ": " + e.what());
    }
  });
}

// IndRNN (T=1000, F=1024, float32): one program per block of features runs all 1000 steps; the
// peers are jax's lax.scan and the Pallas-Triton kernel (peers/jax_peers.py indrnn, same job).
void bench_indrnn() {
  const int64_t steps = 1000, features = 1024;
  auto keys = pl::random::split(pl::random::key(11), 3);
  pl::Array x = pl::random::normal(keys[0], {steps, features});
  pl::Array u = pl::random::uniform(keys[1], {features}, pl::f32, -1.0, 1.0);
  pl::Array h0 = pl::random::normal(keys[2], {features});
  const pl::Array reference = pl::ops::indrnn_reference(x, u, h0);
  pl::Array dx = pl::to_device(x, gpu()), du = pl::to_device(u, gpu()), dh = pl::to_device(h0, gpu());
  for (int64_t bf : {16, 32, 64, 128, 256}) {
    pl::Array out;
    const double ms = kernel_ms([&] { out = pl::ops::indrnn(dx, du, dh, bf, "cuda"); }, 2, 20);
    const double err = pl::rel_error(pl::to_host(out), reference);
    check("indrnn bf" + std::to_string(bf) + " vs float64", err, 1e-6);
    report("indrnn f32", "T1000 F1024", "palladium bf" + std::to_string(bf), ms, "");
  }
}

// Layer norm, RMS norm and softmax forward over (tokens, hidden): bytes moved are one read and
// one write of x (the affine vectors and row statistics are noise); checked against float64.
void bench_norms() {
  const int64_t rows = 8192, features = 4096;
  for (pl::DType t : {pl::DType::bfloat16, pl::f32}) {
    auto keys = pl::random::split(pl::random::key(21), 3);
    pl::Array x = pl::random::normal(keys[0], {rows, features}, t);
    pl::Array w = pl::random::normal(keys[1], {features}, t), b = pl::random::normal(keys[2], {features}, t);
    pl::Array dx = pl::to_device(x, gpu()), dw = pl::to_device(w, gpu()), db = pl::to_device(b, gpu());
    const std::string shape = std::string(pl::dtype_short_name(t)) + " " + std::to_string(rows) + "x" + std::to_string(features);
    const double bytes = 2.0 * static_cast<double>(rows * features) * static_cast<double>(pl::itemsize(t));
    const double tol = t == pl::f32 ? 1e-5 : 1e-2;
    pl::Array x64 = x.astype(pl::f64), w64 = w.astype(pl::f64), b64 = b.astype(pl::f64);
    pl::Array centered = x64 - pl::jnp::mean(x64, {1}, true);
    const pl::Array ln_ref = centered * pl::jnp::rsqrt(pl::jnp::mean(centered * centered, {1}, true) + 1e-5) * w64 + b64;
    const pl::Array rms_ref = x64 * pl::jnp::rsqrt(pl::jnp::mean(x64 * x64, {1}, true) + 1e-5) * w64;
    const pl::Array sm_ref = pl::nn::softmax(x64, -1);
    for (int64_t block : {1, 4, 16}) {
      pl::ops::NormOptions o{.eps = 1e-5, .block_rows = block, .backend = "cuda"};
      const std::string sys = "palladium rows/program " + std::to_string(block);
      pl::Array out;
      double ms = kernel_ms([&] { out = pl::ops::layer_norm(dx, dw, db, o); }, 2, 20);
      check("layer_norm " + shape + " b" + std::to_string(block), pl::rel_error(pl::to_host(out), ln_ref), tol);
      report("layer_norm fwd", shape, sys, ms, gbps(bytes, ms));
      ms = kernel_ms([&] { out = pl::ops::rms_norm(dx, dw, o); }, 2, 20);
      check("rms_norm " + shape + " b" + std::to_string(block), pl::rel_error(pl::to_host(out), rms_ref), tol);
      report("rms_norm fwd", shape, sys, ms, gbps(bytes, ms));
      ms = kernel_ms([&] { out = pl::ops::softmax(dx, o); }, 2, 20);
      check("softmax " + shape + " b" + std::to_string(block), pl::rel_error(pl::to_host(out), sm_ref), tol);
      report("softmax fwd", shape, sys, ms, gbps(bytes, ms));
    }
  }
}

// Forward and backward of the norms, 8192x4096, at 1 and 4 rows per program: the backward kernels through
// the ops' custom VJPs (jit of vjp, so the loss adds no work), beside torch's y.backward(dy)
// (bench/peers/norms_torch.py). Each gradient is checked against float64 formulas first.
void bench_norms_backward() {
  const int64_t rows = 8192, features = 4096;
  for (pl::DType t : {pl::DType::bfloat16, pl::f32}) {
    auto keys = pl::random::split(pl::random::key(23), 4);
    const pl::Array x = pl::random::normal(keys[0], {rows, features}, t), w = pl::random::normal(keys[1], {features}, t);
    const pl::Array b = pl::random::normal(keys[2], {features}, t), dy = pl::random::normal(keys[3], {rows, features}, t);
    const pl::Array gx = pl::to_device(x, gpu()), gw = pl::to_device(w, gpu()), gb = pl::to_device(b, gpu());
    const pl::Array gdy = pl::to_device(dy, gpu());
    const std::string shape = std::string(pl::dtype_short_name(t)) + " " + std::to_string(rows) + "x" + std::to_string(features);
    const double tol = t == pl::f32 ? 1e-4 : 1e-2;  // bf16 measured 1.6e-3 to 2.4e-3 (H100)
    // float64 references
    const pl::Array x64 = x.astype(pl::f64), w64 = w.astype(pl::f64), dy64 = dy.astype(pl::f64);
    const double inv_n = 1.0 / static_cast<double>(features);
    auto row_mean = [&](const pl::Array& a) { return pl::jnp::sum(a, {1}, true) * inv_n; };
    const pl::Array centered = x64 - row_mean(x64);
    const pl::Array ln_rstd = pl::jnp::rsqrt(row_mean(centered * centered) + 1e-5), ln_hat = centered * ln_rstd;
    const pl::Array g = dy64 * w64;
    const pl::Array ln_dx = ln_rstd * (g - row_mean(g) - ln_hat * row_mean(g * ln_hat));
    const pl::Array rms_rstd = pl::jnp::rsqrt(row_mean(x64 * x64) + 1e-5), rms_hat = x64 * rms_rstd;
    const pl::Array rms_dx = rms_rstd * (g - rms_hat * row_mean(g * rms_hat));
    const pl::Array sm = pl::nn::softmax(x64, -1);
    const pl::Array sm_dx = sm * (dy64 - pl::jnp::sum(dy64 * sm, {1}, true));
    auto host = [](const pl::Array& a) { return pl::to_host(a).astype(pl::f64); };
    const double bytes = 3.0 * static_cast<double>(rows * features) * static_cast<double>(pl::itemsize(t));  // x, dy in; dx out
    for (int64_t block : {0, 4}) try {
      const pl::ops::NormOptions o{.eps = 1e-5, .block_rows = block, .backend = "cuda"};
      const std::string sys = "palladium jit(vjp) rows/program " + std::to_string(block == 0 ? 1 : block);
      auto ln = pl::jit([o](const pl::Array& xx, const pl::Array& ww, const pl::Array& bb, const pl::Array& d) {
        return pl::vjp([o](const pl::Array& a, const pl::Array& c, const pl::Array& e) { return pl::ops::layer_norm(a, c, e, o); },
                       xx, ww, bb).second(d);
      });
      auto [dx, dw, db] = ln(gx, gw, gb, gdy);
      check("layer_norm bwd " + shape + " dx", pl::rel_error(host(dx), ln_dx), tol);
      check("layer_norm bwd " + shape + " dw", pl::rel_error(host(dw), pl::jnp::sum(dy64 * ln_hat, {0})), tol);
      check("layer_norm bwd " + shape + " db", pl::rel_error(host(db), pl::jnp::sum(dy64, {0})), tol);
      double ms = events_ms([&] { (void)ln(gx, gw, gb, gdy); }, 20);  // several kernels: events around them
      report("layer_norm fwd+bwd", shape, sys, ms, gbps(bytes, ms));
      auto rms = pl::jit([o](const pl::Array& xx, const pl::Array& ww, const pl::Array& d) {
        return pl::vjp([o](const pl::Array& a, const pl::Array& c) { return pl::ops::rms_norm(a, c, o); }, xx, ww).second(d);
      });
      auto [rdx, rdw] = rms(gx, gw, gdy);
      check("rms_norm bwd " + shape + " dx", pl::rel_error(host(rdx), rms_dx), tol);
      check("rms_norm bwd " + shape + " dw", pl::rel_error(host(rdw), pl::jnp::sum(dy64 * rms_hat, {0})), tol);
      ms = events_ms([&] { (void)rms(gx, gw, gdy); }, 20);
      report("rms_norm fwd+bwd", shape, sys, ms, gbps(bytes, ms));
      auto soft = pl::jit([o](const pl::Array& xx, const pl::Array& d) {
        return pl::vjp([o](const pl::Array& a) { return pl::ops::softmax(a, o); }, xx).second(d);
      });
      auto [sdx] = soft(gx, gdy);
      check("softmax bwd " + shape + " dx", pl::rel_error(host(sdx), sm_dx), tol);
      ms = events_ms([&] { (void)soft(gx, gdy); }, 20);
      report("softmax fwd+bwd", shape, sys, ms, gbps(bytes, ms));
    } catch (const std::exception& e) {
      fail("norms backward " + shape + ": " + e.what());
    }
  }
}

// Paged attention decode, bf16: batch 64, 32 query heads on 8 kv heads, head_dim 128, pages of 16
// tokens, up to 128 pages (2048 tokens) per sequence, random lengths; the peer
// (bench/peers/paged_attention_torch.py) gathers the pages and calls SDPA on the same shapes.
// Rate: the bytes of the keys and values the sequences really hold.
void bench_paged() {
  const int64_t batch = 64, heads = 32, kv_heads = 8, hd = 128, page = 16, per_seq = 128, pool = batch * per_seq;
  auto keys = pl::random::split(pl::random::key(41), 5);
  // Lengths from one formula that the torch peer uses too (so both attend over the same tokens).
  pl::Array lengths({batch}, pl::i32);
  for (int64_t b = 0; b < batch; ++b) lengths.set(b, static_cast<double>(1 + (b * 977) % (per_seq * page)));
  // Each sequence's pages are a random slice of a shuffled pool (no page shared).
  pl::Array perm = pl::random::uniform(keys[1], {pool}, pl::f64, 0, 1);
  std::vector<std::pair<double, int64_t>> order;
  for (int64_t i = 0; i < pool; ++i) order.emplace_back(perm.get(i), i);
  std::sort(order.begin(), order.end());
  pl::Array table({batch, per_seq}, pl::i32);
  for (int64_t i = 0; i < pool; ++i) table.set(i, static_cast<double>(order[static_cast<size_t>(i)].second));
  pl::Array q = pl::random::normal(keys[2], {batch, heads, hd}, pl::bf16);
  pl::Array k = pl::random::normal(keys[3], {kv_heads, pool, page, hd}, pl::bf16);
  pl::Array v = pl::random::normal(keys[4], {kv_heads, pool, page, hd}, pl::bf16);
  double tokens = 0;
  for (int64_t b = 0; b < batch; ++b) tokens += static_cast<double>(lengths.get_int(b));
  const double bytes = tokens * static_cast<double>(kv_heads * hd * 2 * 2);
  pl::Array dq = pl::to_device(q, gpu()), dk = pl::to_device(k, gpu()), dv = pl::to_device(v, gpu());
  pl::Array dl = pl::to_device(lengths, gpu()), dt = pl::to_device(table, gpu());
  pl::ops::PagedAttentionOptions o{.backend = "cuda"};
  pl::Array out = pl::ops::paged_attention(dq, dk, dv, dl, dt, o);
  {
    // Four sequences against the float64 reference (the whole batch would take minutes on the host).
    const int64_t n = 4;
    pl::Array q4({n, heads, hd}, pl::f64), l4({n}, pl::i32), t4({n, per_seq}, pl::i32);
    for (int64_t i = 0; i < n * heads * hd; ++i) q4.set(i, q.get(i));
    for (int64_t i = 0; i < n; ++i) l4.set(i, lengths.get(i));
    for (int64_t i = 0; i < n * per_seq; ++i) t4.set(i, table.get(i));
    pl::Array want = pl::ops::paged_attention_reference(q4, k.astype(pl::f64), v.astype(pl::f64), l4, t4);
    pl::Array got = pl::to_host(out).astype(pl::f64);
    double num = 0, den = 0;
    for (int64_t i = 0; i < 4 * heads * hd; ++i) {
      num += std::pow(got.get(i) - want.get(i), 2);
      den += want.get(i) * want.get(i);
    }
    check("paged attention vs float64 (4 sequences)", std::sqrt(num / den), 1e-2);
  }
  const double ms = kernel_ms([&] { out = pl::ops::paged_attention(dq, dk, dv, dl, dt, o); }, 2, 10);
  report("paged attention decode", "bf16 b64 h32/8 d128 p16 x128", "palladium", ms, gbps(bytes, ms));
}

// Compile time of the attention kernel: the first call in this process (device already
// initialised). With an empty cache directory that is trace + codegen + NVRTC + module load
// ("compile"); run again as a second process on the same directory ("compile-disk") it is
// trace + codegen + disk-cache read + module load. The repeat call hits the library's cached
// pallas_call (no compile at all).
void bench_compile(bool from_disk) {
  pl::Shape shape{1, 2048, 16, 128};
  pl::Array q = pl::to_device(pl::random::normal(pl::random::key(8), shape, pl::bf16), gpu());
  pl::ops::MhaOptions o{.sm_scale = 0.088f, .causal = true, .block_q = 128, .block_k = 64, .backend = "cuda"};
  pl::synchronize(gpu());
  auto t0 = Clock::now();
  pl::Array out = pl::ops::mha(q, q, q, pl::Array(), o);
  pl::synchronize(gpu());
  const double first = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  report("compile attn fwd", "d128 causal bq128 bk64",
         from_disk ? "first call, from disk cache (trace+codegen+read+load)" : "first call, cold (trace+codegen+NVRTC+load)",
         first, "");
  t0 = Clock::now();
  out = pl::ops::mha(q, q, q, pl::Array(), o);
  pl::synchronize(gpu());
  const double again = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  report("compile attn fwd", "d128 causal bq128 bk64", "repeat call (cached pallas_call)", again, "");
}

void bench_launch() {
  pl::Array x = pl::to_device(pl::arange(32, pl::f32), gpu());
  auto tiny = pl::pallas_call([](pl::Ref a, pl::Ref o) { o[pl::all] = a[pl::all] + 1.0f; }, pl::ShapeDtype({32}, pl::f32),
                              {.name = "tiny", .backend = "cuda"});
  pl::Array y = tiny(x);
  palladium::cuda::set_launch_timing(false);
  pl::synchronize(gpu());
  const int n = 2000;
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) y = tiny(x);
  pl::synchronize(gpu());
  const double per_call = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / n;
  report("launch tiny kernel", "f32[32]", "pallas_call, device arrays (host)", per_call, "");
  palladium::cuda::set_launch_timing(true);
  const double dev = kernel_ms([&] { y = tiny(x); }, 5, 50);
  report("launch tiny kernel", "f32[32]", "device time of the kernel", dev, "");
  t0 = Clock::now();
  pl::Array host_x = pl::arange(32, pl::f32);
  palladium::cuda::set_launch_timing(false);
  for (int i = 0; i < 200; ++i) y = tiny(host_x);
  const double host_call = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / 200;
  report("launch tiny kernel", "f32[32]", "pallas_call, host arrays (copies)", host_call, "");
  palladium::cuda::set_launch_timing(true);
}

// ---------------------------------------------------------------- the program level

// The chain of 8 elementwise ops of the fused-chain benchmark, for Arrays (jit) and Values (kernel).
template <class T> T chain8(const T& a, const T& b) {
  T h = a * b;
  h = h + a;
  h = jnp::tanh(h);
  h = h * 0.5;
  h = h - b;
  h = jnp::maximum(h, a);
  return jnp::exp(h * 0.1);
}

// 21 elementwise equations that do not repeat (so no rerolling): one fused kernel under jit.
pl::Array program21(const pl::Array& a, const pl::Array& b) {
  pl::Array h = a * b;
  h = jnp::sin(h + a) * 0.5;
  h = jnp::exp((jnp::cos(h) - b) * 0.1);
  h = jnp::tanh(h);
  h = jnp::log(jnp::sqrt(h * h + 1.0));
  h = jnp::minimum(jnp::maximum(h, a), 2.0);
  h = h / (jnp::abs(b) + 1.0);
  return jnp::abs(-h) * a;
}

// A 20-equation program of several kernels: matmuls, reductions, a transpose and elementwise ops.
pl::Array program_mixed(const pl::Array& a, const pl::Array& b) {
  pl::Array s = jnp::matmul(a, b);
  s = s - jnp::max(s, {1}, true);
  pl::Array e = jnp::exp(s);
  pl::Array p = e / jnp::sum(e, {1}, true);
  pl::Array t = jnp::transpose(p, {1, 0});
  pl::Array o = jnp::matmul(t, a) * 0.5 + b;
  return jnp::tanh(o) + jnp::mean(o, {0}, true);
}

// Host wall time per call of `call` over n back-to-back calls (the device work queues behind).
double per_call_us(const std::function<void()>& call, int n) {
  call();
  pl::synchronize(gpu());
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) call();
  pl::synchronize(gpu());
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
}

// Host time per call of `call` alone: n calls queued without waiting (few enough that the device's
// launch queue never fills and blocks the host), the device's work finished outside the timing.
double enqueue_us(const std::function<void()>& call, int n) {
  call();
  pl::synchronize(gpu());
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) call();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n);
    pl::synchronize(gpu());
  }
  return median(t);
}

void bench_program() {
  palladium::cuda::set_launch_timing(false);
  {
    // Fused chain: 8 ops on 2^26 float32 under jit against the same chain as one pallas_call.
    const int64_t n = int64_t{1} << 26, block = 8192;
    pl::Array x = pl::to_device(pl::random::normal(pl::random::key(5), {n}), gpu());
    pl::Array y = pl::to_device(pl::random::normal(pl::random::key(6), {n}), gpu());
    auto jitted = pl::jit([](const pl::Array& a, const pl::Array& b) { return chain8<pl::Array>(a, b); });
    auto spec = pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); });
    auto kernel = pl::pallas_call([](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = chain8<pl::Value>(a[pl::all], b[pl::all]); },
                                  pl::ShapeDtype({n}, pl::f32),
                                  {.grid = {n / block}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "chain8", .backend = "cuda"});
    pl::Array r = jitted(x, y), k = kernel(x, y);
    check("jitted chain of 8 vs the same pallas_call (relative)", pl::rel_error(pl::to_host(r), pl::to_host(k)), 1e-6);
    const pl::Array hx = pl::to_host(x), hy = pl::to_host(y), hr = pl::to_host(r);
    double err = 0;
    for (int64_t i = 7; i < n; i += 65537) {
      double h = std::exp(std::max(std::tanh(hx.get(i) * hy.get(i) + hx.get(i)) * 0.5 - hy.get(i), hx.get(i)) * 0.1);
      err = std::max(err, std::abs(hr.get(i) - h) / std::max(std::abs(h), 1e-30));
    }
    check("jitted chain of 8 vs float64 (sampled, max relative)", err, 1e-5);
    const double ms_jit = events_ms([&] { r = jitted(x, y); }, 20);
    const double ms_kernel = events_ms([&] { k = kernel(x, y); }, 20);
    report("chain of 8 f32", "2^26", "one pallas_call", ms_kernel, gbps(12.0 * n, ms_kernel));
    report("chain of 8 f32", "2^26", "jit of 8 Array ops", ms_jit,
           gbps(12.0 * n, ms_jit) + ", " + std::to_string(ms_kernel / ms_jit).substr(0, 4) + "x the kernel");
  }
  {
    // Dispatch: host time per call on small device arrays, where the device work is ~a launch.
    pl::Array a = pl::to_device(pl::random::normal(pl::random::key(7), {256}), gpu());
    pl::Array b = pl::to_device(pl::random::normal(pl::random::key(8), {256}), gpu());
    auto j21 = pl::jit(program21);
    pl::Array out = j21(a, b);
    check("jitted 21-op program vs eager", pl::rel_error(pl::to_host(out), pl::to_host(program21(a, b))), 1e-5);
    std::printf("jitted 21-op program: %s\n", j21.lower(a, b).substr(j21.lower(a, b).find("--- steps")).c_str());
    report("dispatch", "21 ops f32[256]", "jit, per call (host)", per_call_us([&] { out = j21(a, b); }, 2000) / 1e3, "");
    report("dispatch", "1 op f32[256]", "eager a + b, per call (host)", per_call_us([&] { out = a + b; }, 2000) / 1e3, "");
    report("dispatch", "21 ops f32[256]", "eager, per call (host)", per_call_us([&] { out = program21(a, b); }, 200) / 1e3, "");
    pl::Array m = pl::to_device(pl::random::normal(pl::random::key(9), {32, 32}), gpu());
    pl::Array w = pl::to_device(pl::random::normal(pl::random::key(10), {32, 32}), gpu());
    auto jmixed = pl::jit(program_mixed);
    out = jmixed(m, w);
    check("jitted mixed program vs eager", pl::rel_error(pl::to_host(out), pl::to_host(program_mixed(m, w))), 1e-4);
    const std::string steps = jmixed.lower(m, w);
    std::printf("jitted mixed program: %s\n", steps.substr(steps.find("--- steps")).c_str());
    report("dispatch", "mixed 20 ops f32[32,32]", "jit, per call (host)", per_call_us([&] { out = jmixed(m, w); }, 2000) / 1e3, "");
    // The same, split: what the host spends per call, and the device's own time per call.
    report("dispatch", "mixed 20 ops f32[32,32]", "jit, host enqueue per call", enqueue_us([&] { out = jmixed(m, w); }, 64) / 1e3, "");
    report("dispatch", "21 ops f32[256]", "jit, host enqueue per call", enqueue_us([&] { out = j21(a, b); }, 64) / 1e3, "");
    report("dispatch", "1 op f32[256]", "eager a + b, host enqueue per call", enqueue_us([&] { out = a + b; }, 64) / 1e3, "");
    report("dispatch", "mixed 20 ops f32[32,32]", "jit, device time per call (events)", events_ms([&] { out = jmixed(m, w); }, 200), "");
  }
  palladium::cuda::set_launch_timing(true);
}

}  // namespace

// ---------------------------------------------------------------- checked runs, sequential axes

// The cost of a checked run (CompilerParams::checks) on add and matmul, and the matmul written
// as JAX's Pallas tests write it: a 3-D grid whose last (arbitrary) axis accumulates the output
// block, beside the same matmul with its k loop inside the kernel.
void bench_checks() {
  const int64_t n = int64_t{1} << 28;
  pl::Array x = pl::to_device(pl::random::normal(pl::random::key(1), {n}), gpu());
  pl::Array y = pl::to_device(pl::random::normal(pl::random::key(2), {n}), gpu());
  for (bool checked : {false, true}) {
    const int64_t block = 8192;
    pl::CallOptions o{.grid = {n / block},
                      .in_specs = {pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); }),
                                   pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); })},
                      .out_specs = {pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); })},
                      .backend = "cuda"};
    o.compiler_params.checks = checked;
    auto add = pl::pallas_call([](pl::Ref a, pl::Ref b, pl::Ref out) { out[pl::all] = a[pl::all] + b[pl::all]; },
                               pl::ShapeDtype({n}, pl::f32), o);
    pl::Array out = add(x, y);
    const double ms = kernel_ms([&] { out = add(x, y); }, 3, 20);
    report("add f32", "2^28 block 8192", checked ? "palladium cuda, checked" : "palladium cuda", ms, gbps(12.0 * n, ms));
  }
  const int64_t m = 4096;
  const double flops = 2.0 * m * m * m;
  pl::Array a = pl::to_device(pl::random::normal(pl::random::key(3), {m, m}, pl::bf16), gpu());
  pl::Array b = pl::to_device(pl::random::normal(pl::random::key(4), {m, m}, pl::bf16), gpu());
  pl::Array reference;
  for (bool checked : {false, true}) {
    auto mm = matmul_call(m, 128, 128, 64, 8, 3);
    if (checked) {  // the same kernel, checked
      auto kernel = [m](pl::Ref x_ref, pl::Ref y_ref, pl::Ref o_ref) {
        pl::Value acc = jnp::zeros({128, 128}, pl::f32);
        acc = pl::lax::fori_loop(0, m / 64, [&](pl::Value i, pl::Value c) {
          return c + pl::dot(x_ref(pl::slice(), pl::ds(i * 64, 64)), y_ref(pl::ds(i * 64, 64), pl::slice()));
        }, acc);
        o_ref[pl::all] = acc.astype(pl::bf16);
      };
      pl::CallOptions o{.grid = {m / 128, m / 128},
                        .in_specs = {pl::BlockSpec({128, m}, [](pl::Index i, pl::Index) { return pl::idx(i, 0); }),
                                     pl::BlockSpec({m, 128}, [](pl::Index, pl::Index j) { return pl::idx(0, j); })},
                        .out_specs = {pl::BlockSpec({128, 128}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); })},
                        .name = "matmul_checked", .backend = "cuda",
                        .compiler_params = {.num_warps = 8, .num_stages = 3, .checks = true}};
      mm = pl::pallas_call(kernel, pl::ShapeDtype({m, m}, pl::bf16), o);
    }
    pl::Array out = mm(a, b);
    if (!checked) reference = pl::to_host(out);
    else check("checked matmul vs unchecked (relative)", pl::rel_error(pl::to_host(out).astype(pl::f64), reference.astype(pl::f64)), 1e-6);
    const double ms = kernel_ms([&] { out = mm(a, b); }, 2, 10);
    report("matmul bf16", "4096^3 k loop in kernel", checked ? "palladium, checked" : "palladium", ms, tflops(flops, ms));
  }
  // The 3-D grid, k arbitrary: the f32 output block accumulated at every step, and the TPU-style
  // form with a float32 scratch accumulator and the bf16 output written at the last step.
  for (bool scratch : {false, true}) {
    pl::CallOptions o{.grid = {m / 128, m / 128, m / 64},
                      .dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary},
                      .in_specs = {pl::BlockSpec({128, 64}, [](pl::Index i, pl::Index, pl::Index k) { return pl::idx(i, k); }),
                                   pl::BlockSpec({64, 128}, [](pl::Index, pl::Index j, pl::Index k) { return pl::idx(k, j); })},
                      .out_specs = {pl::BlockSpec({128, 128}, [](pl::Index i, pl::Index j, pl::Index) { return pl::idx(i, j); })},
                      .name = scratch ? "matmul_grid_k_scratch" : "matmul_grid_k", .backend = "cuda",
                      .compiler_params = {.num_warps = 8, .num_stages = 3}};
    auto make = [&]() {
      if (!scratch)
        return pl::pallas_call([](pl::Ref x_ref, pl::Ref y_ref, pl::Ref o_ref) {
        pl::when(pl::program_id(2) == 0, [&] { o_ref[pl::all] = jnp::zeros({128, 128}); });
        o_ref[pl::all] = o_ref[pl::all] + pl::dot(x_ref[pl::all], y_ref[pl::all]);
      }, pl::ShapeDtype({m, m}, pl::f32), o);
      o.scratch_shapes = {pl::ShapeDtype({128, 128}, pl::f32)};
      return pl::pallas_call([](pl::Ref x_ref, pl::Ref y_ref, pl::Ref o_ref, pl::Ref acc) {
        pl::when(pl::program_id(2) == 0, [&] { acc[pl::all] = jnp::zeros({128, 128}); });
        acc[pl::all] = acc[pl::all] + pl::dot(x_ref[pl::all], y_ref[pl::all]);
        pl::when(pl::program_id(2) == pl::num_programs(2) - 1, [&] { o_ref[pl::all] = acc[pl::all].astype(pl::bf16); });
      }, pl::ShapeDtype({m, m}, pl::bf16), o);
    };
    auto mm = make();
    const std::string form = scratch ? "3-D grid, scratch accumulator" : "3-D grid, k arbitrary";
    pl::Array out = mm(a, b);
    check(form + " matmul vs k-loop matmul (relative)",
          pl::rel_error(pl::to_host(out).astype(pl::f64), reference.astype(pl::f64)), 1e-2);
    const double ms = kernel_ms([&] { out = mm(a, b); }, 2, 10);
    report("matmul bf16", "4096^3 " + form, "palladium", ms, tflops(flops, ms));
  }
}

int main(int argc, char** argv) {
  if (!pl::cuda_unavailable_reason().empty()) {
    std::printf("no CUDA device: %s\n", pl::cuda_unavailable_reason().c_str());
    return 0;
  }
  // The kernel cache: PL_BENCH_CACHE_DIR (shared by a "compile" run and a later "compile-disk"
  // run), else a fresh directory, so the compile benchmark starts cold.
  std::string cache = (std::filesystem::temp_directory_path() / ("pl-bench-cache-" + std::to_string(::getpid()))).string();
  if (const char* d = std::getenv("PL_BENCH_CACHE_DIR"); d && *d) cache = d;
  setenv("PALLADIUM_CACHE_DIR", cache.c_str(), 1);
  std::printf("device: %s\n", pl::device_description(gpu()).c_str());
  palladium::cuda::set_launch_timing(true);
  std::vector<std::string> parts;
  for (int i = 1; i < argc; ++i) parts.emplace_back(argv[i]);
  if (parts.empty()) parts = {"compile", "add", "matmul", "attention", "attention-bwd", "indrnn", "launch"};
  for (const std::string& p : parts) {
    try {
      if (p == "compile") bench_compile(false);
      else if (p == "compile-disk") bench_compile(true);
      else if (p == "add") bench_add();
      else if (p == "matmul") bench_matmul();
      else if (p == "attention") bench_attention();
      else if (p == "attention-bwd") bench_attention_backward();
      else if (p == "attention-preprocess") bench_attention_preprocess();
      else if (p == "indrnn") bench_indrnn();
      else if (p == "norms") bench_norms();
      else if (p == "norms-bwd") bench_norms_backward();
      else if (p == "autotune") bench_autotune();
      else if (p == "checks") bench_checks();
      else if (p == "paged") bench_paged();
      else if (p == "grad-attention") bench_grad_attention();
      else if (p == "launch") bench_launch();
      else if (p == "profile-launches") bench_profile_launches();
      else if (p == "program") bench_program();
    } catch (const std::exception& e) {
      fail(p + ": " + e.what());
    }
  }
  std::printf("\n| benchmark | shape | system | ms | rate |\n|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %s | %s | %.3f | %s |\n", r.what.c_str(), r.shape.c_str(), r.system.c_str(), r.ms, r.rate.c_str());
  return any_failure ? 1 : 0;
}
