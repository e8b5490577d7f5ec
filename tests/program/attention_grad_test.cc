// grad of a loss over ops::mha runs the seed's backward kernels through the custom VJP, as the
// seed wires them; checked against the float64 reference gradients.
#include <gtest/gtest.h>

#include "ops/attention.h"
#include "palladium/palladium.h"

namespace pl = palladium;
using pl::Array;

TEST(AttentionGrad, GradOfLossRunsTheBackwardKernels) {
  const std::string backend = [] {
    for (const std::string& b : pl::available_backends())
      if (b == "cpu") return b;
    return std::string("interpret");
  }();
  pl::BackendScope scope(backend);
  auto key = pl::random::key(31);
  auto ks = pl::random::split(key, 4);
  const pl::Shape s{1, 64, 2, 16};
  Array q = pl::random::normal(ks[0], s), k = pl::random::normal(ks[1], s), v = pl::random::normal(ks[2], s);
  Array dout = pl::random::normal(ks[3], s);
  pl::ops::MhaOptions o{.sm_scale = 0.25f, .causal = true, .block_q = 32, .block_k = 32, .backend = backend};
  o.backward_block = 32;
  auto loss = [&](const Array& a, const Array& b, const Array& c) { return pl::jnp::sum(pl::ops::mha(a, b, c, Array(), o) * dout); };
  auto [dq, dk, dv] = pl::grad<0, 1, 2>(loss)(q, k, v);
  auto [rq, rk, rv] = pl::ops::mha_reference_backward(q, k, v, Array(), dout, 0.25, true);
  EXPECT_LT(pl::rel_error(dq, rq), 2e-5);
  EXPECT_LT(pl::rel_error(dk, rk), 2e-5);
  EXPECT_LT(pl::rel_error(dv, rv), 2e-5);
  // Under jit the gradient program holds the forward kernel, the preprocess and the backward kernel.
  auto jitted = pl::jit(pl::grad<0, 1, 2>(loss));
  const std::string lowered = jitted.lower(q, k, v);
  EXPECT_NE(lowered.find("name=mha_backward]"), std::string::npos) << lowered;
  // ...and nothing else: sum's seed cotangent of ones times dout is dout itself, not a kernel.
  EXPECT_NE(lowered.find("--- steps (0 kernels) ---"), std::string::npos) << lowered;
  auto [jq, jk, jv] = jitted(q, k, v);
  EXPECT_LT(pl::rel_error(jq, dq), 1e-6);
  EXPECT_LT(pl::rel_error(jv, dv), 1e-6);
}
