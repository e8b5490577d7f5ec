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
// The attention and paged-attention benchmarks are in bench/cuda/attention.cc.
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
#include "bench/cuda/harness.h"
#include "ops/attention.h"
#include "ops/indrnn.h"
#include "ops/norms.h"

#ifdef PL_HAVE_CUBLASLT
#include <cublasLt.h>
#endif

namespace pl = palladium;
namespace jnp = palladium::jnp;

namespace pl_bench {

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

}  // namespace pl_bench

using namespace pl_bench;

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
      auto kernel = [](pl::Ref x_ref, pl::Ref y_ref, pl::Ref o_ref) {
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
