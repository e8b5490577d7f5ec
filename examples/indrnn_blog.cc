// The IndRNN blog's comparison at the program level: a naive loop of Array ops, lax.scan, and the
// Pallas kernel (ops::indrnn), each eager and under jit, with block shapes (T,1), (T,4) and a wide
// one; then the jitted naive loop's compile time at growing T. Every version is checked against
// the float64 loop. Usage: indrnn_blog [T] [F] (defaults keep the run short on a CPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "ops/indrnn.h"
#include "palladium/device.h"
#include "palladium/palladium.h"

namespace pl = palladium;
using pl::Array;

namespace {

double median_ms(const std::function<Array()>& f, int reps) {
  pl::synchronize(f().device());  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    Array r = f();
    pl::synchronize(r.device());  // waits for the device work, without timing a copy back
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The blog's indrnn_naive: a C++ loop over time steps (unrolled when traced, as Python's is).
Array naive(const Array& x, const Array& u, const Array& h0) {
  std::vector<Array> hs;
  Array h = h0;
  for (int64_t t = 0; t < x.shape()[0]; ++t) {
    h = pl::nn::relu(u * h + pl::lax::index(x, t));
    hs.push_back(h);
  }
  return pl::jnp::stack(hs);
}

// The blog's indrnn_scan.
Array scanned(const Array& x, const Array& u, const Array& h0) {
  return pl::scan([&u](const Array& h, const Array& xt) {
    Array n = pl::nn::relu(u * h + xt);
    return std::make_pair(n, n);
  }, h0, x).second;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 50;
  const int64_t F = argc > 2 ? std::atoll(argv[2]) : 256;
  const bool gpu = pl::cuda_device_count() > 0;
  auto place = [&](const Array& a) { return gpu ? pl::to_device(a, pl::cuda_device(0)) : a; };
  auto keys = pl::random::split(pl::random::key(0), 3);
  Array x = place(pl::random::normal(keys[0], {T, F}));
  Array u = place(pl::random::uniform(keys[1], {F}, pl::f32, 0.5, 1.0));
  Array h0 = place(pl::random::normal(keys[2], {F}));
  const Array ref = pl::ops::indrnn_reference(pl::to_host(x), pl::to_host(u), pl::to_host(h0));
  std::printf("IndRNN T=%lld F=%lld on %s (%s arrays)\n", static_cast<long long>(T), static_cast<long long>(F),
              gpu ? "cuda" : pl::array_backend(pl::Device{}).c_str(), gpu ? "device" : "host");

  bool ok = true;
  auto row = [&](const char* name, const std::function<Array()>& eager, const std::function<Array()>& jitted) {
    const double err_e = pl::rel_error(pl::to_host(eager()), ref), err_j = pl::rel_error(pl::to_host(jitted()), ref);
    ok = ok && err_e < 1e-5 && err_j < 1e-5;
    std::printf("| %-26s | %10.3f ms | %10.3f ms | err %.1e / %.1e\n", name, median_ms(eager, 3), median_ms(jitted, 21),
                err_e, err_j);
  };
  std::printf("| %-26s | %13s | %13s |\n", "version", "eager", "jit");
  auto jit_naive = pl::jit(naive);
  auto jit_scan = pl::jit(scanned);
  row("naive loop", [&] { return naive(x, u, h0); }, [&] { return jit_naive(x, u, h0); });
  row("scan", [&] { return scanned(x, u, h0); }, [&] { return jit_scan(x, u, h0); });
  for (int64_t bf : {int64_t{1}, int64_t{4}, int64_t{64}}) {
    auto kernel = [bf](const Array& a, const Array& b, const Array& c) { return pl::ops::indrnn(a, b, c, bf); };
    auto jit_kernel = pl::jit(kernel);
    char name[64];
    std::snprintf(name, sizeof name, "kernel block (%lld,%lld)", static_cast<long long>(T), static_cast<long long>(bf));
    row(name, [&] { return kernel(x, u, h0); }, [&] { return jit_kernel(x, u, h0); });
  }

  std::printf("\njit compile time of the naive loop (trace + optimise + compile + first run):\n");
  for (int64_t t : {T, 2 * T, 10 * T}) {
    Array xt = place(pl::random::normal(keys[0], {t, F}));
    auto fresh = pl::jit(naive);
    auto a = std::chrono::steady_clock::now();
    pl::to_host(fresh(xt, u, h0));
    std::printf("  T=%-6lld %9.1f ms\n", static_cast<long long>(t),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::printf("%s\n", ok ? "all versions match the float64 loop" : "MISMATCH against the float64 loop");
  return ok ? 0 : 1;
}
