// IndRNN from the blog post: the recurrence h_t = relu(u * h_{t-1} + x_t) as one kernel whose
// programs each own a block of features and loop over time, checked against a plain loop.
#include <chrono>
#include <cstdio>

#include <palladium/palladium.h>

#include "ops/indrnn.h"

namespace pl = palladium;

int main() {
  const int64_t steps = 1000, features = 1000;
  auto keys = pl::random::split(pl::random::key(7), 3);
  pl::Array x = pl::random::normal(keys[0], {steps, features});
  pl::Array u = pl::random::uniform(keys[1], {features});
  pl::Array h0 = pl::random::normal(keys[2], {features});
  pl::Array ref = pl::ops::indrnn_reference(x, u, h0);
  bool ok = true;
  for (int64_t block : {1, 4, 64, 128}) {
    auto t0 = std::chrono::steady_clock::now();
    pl::Array h = pl::ops::indrnn(x, u, h0, block);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double err = pl::rel_error(h, ref);
    std::printf("block (%lld, %lld): %4lld programs, rel err vs plain loop %.1e, %.1f ms%s\n",
                static_cast<long long>(steps), static_cast<long long>(block),
                static_cast<long long>(pl::cdiv(features, block)), err, ms, err < 1e-6 ? "" : "  MISMATCH");
    ok = ok && err < 1e-6;
  }
  return ok ? 0 : 1;
}
