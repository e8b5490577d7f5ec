// What cuda_bench's files share: timing, the report table, float64 checks and the matmul kernel
// (defined in bench/cuda_bench.cc), and the attention benchmarks (bench/cuda/attention.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <palladium/device.h>
#include <palladium/palladium.h>

namespace pl_bench {

// Device time of `launch` (one pallas_call): the median over `iters` of the event-timed launch.
double kernel_ms(const std::function<void()>& launch, int warmup, int iters);
// Device time of arbitrary queued work, by events around `iters` repetitions, median of 5.
double events_ms(const std::function<void()>& work, int iters);

// A row of the table (printed at once as "ROW ...", and again as markdown at the end).
void report(const std::string& what, const std::string& shape, const std::string& system, double ms,
            const std::string& rate);
// A benchmark whose result is wrong, or that failed, makes the program exit non-zero.
void fail(const std::string& what);
// Prints the check and fails when err exceeds tol.
void check(const std::string& what, double err, double tol);

std::string tflops(double flops, double ms);
std::string fixed(double v);
std::string gbps(double bytes, double ms);
palladium::Device gpu();

// The bf16 matmul n^3 as the quickstart writes it (a k loop in the kernel), tiles bm x bn x bk.
palladium::Callable<palladium::Array> matmul_call(int64_t n, int64_t bm, int64_t bn, int64_t bk, int warps, int stages);

// bench/cuda/attention.cc
void bench_autotune();
void bench_profile_launches();
void bench_attention();
void bench_attention_backward();
void bench_attention_preprocess();
void bench_grad_attention();
void bench_paged();

}  // namespace pl_bench
