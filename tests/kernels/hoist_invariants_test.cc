// Loop-invariant code motion before CUDA code generation (backends/common/hoist_invariants.h): what
// moves in front of a loop and what stays, each kernel run as rewritten on the interpreter and
// the cpu backend against float64.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/common/hoist_invariants.h"
#include "kernel_test_util.h"
#include "tests/support/program_support.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;

// The body of the kernel's (only) loop, as printed: from "= for " to the end.
std::string loop_text(const ir::Kernel& k) {
  const std::string text = ir::print(k);
  const size_t at = text.find("= for ");
  return at == std::string::npos ? "" : text.substr(at);
}

// acc += x * w[None, :] + i, four times, where w's row and its broadcast are loop invariants and
// the load of x is not moved (memory ops stay).
TEST(HoistInvariants, InvariantReshapeAndBroadcastMoveInFrontOfTheLoop) {
  Rng rng;
  auto call = pallas_call(
      [](Ref x, Ref o) {
        Value w = jnp::arange(16).astype(f32) * 0.5f;
        Value acc = pl::lax::fori_loop(0, 4, [&](Value i, Value a) {
          Value wide = jnp::zeros({8, 16}) + w(pl::None, pl::slice());
          return a + x[pl::all] * wide + i.astype(f32);
        }, jnp::zeros({8, 16}));
        o[pl::all] = acc;
      },
      ShapeDtype({8, 16}, f32), CallOptions{.name = "hoist_row"});
  const ir::Kernel kernel = traced(call, {ShapeDtype({8, 16}, f32)});
  ASSERT_THAT(loop_text(kernel), ::testing::HasSubstr("reshape"));
  const ir::Kernel hoisted = backend::hoist_loop_invariants(kernel);
  const std::string body = loop_text(hoisted);
  EXPECT_THAT(body, ::testing::Not(::testing::HasSubstr("reshape"))) << ir::print(hoisted);
  // Two broadcasts before (w's row and the loop index), the index's alone after.
  EXPECT_EQ(test_support::count_of(loop_text(kernel), "broadcast"), 2u);
  EXPECT_EQ(test_support::count_of(body, "broadcast"), 1u) << ir::print(hoisted);
  EXPECT_THAT(body, ::testing::HasSubstr("load x0"));
  Array x = rng.normal({8, 16});
  const Array want = ref_f64({8, 16}, [&](int64_t e) { return 4.0 * x.get(e) * 0.5 * static_cast<double>(e % 16) + 6.0; });
  for (const std::string& be : test_support::host_backends()) {
    SCOPED_TRACE(be);
    EXPECT_TRUE(matches(run_ir(hoisted, be, {x}).at(0), want, f32));
  }
}

// An invariant tile larger than kMaxHoistedElements stays in the loop (it would hold registers
// across the whole loop); so do values that read the loop index or a carry.
TEST(HoistInvariants, LargeTilesAndLoopDependentValuesStay) {
  Rng rng;
  auto call = pallas_call(
      [](Ref x, Ref o) {
        Value acc = pl::lax::fori_loop(0, 3, [&](Value i, Value a) {
          Value big = jnp::zeros({64, 64}) + 2.0f;
          return a * 0.5f + x[pl::all] * big + i.astype(f32);
        }, jnp::zeros({64, 64}));
        o[pl::all] = acc;
      },
      ShapeDtype({64, 64}, f32), CallOptions{.name = "hoist_big"});
  const ir::Kernel kernel = traced(call, {ShapeDtype({64, 64}, f32)});
  const ir::Kernel hoisted = backend::hoist_loop_invariants(kernel);
  EXPECT_EQ(test_support::count_of(loop_text(hoisted), "f32[64,64] = add"),
            test_support::count_of(loop_text(kernel), "f32[64,64] = add"));
  Array x = rng.normal({64, 64});
  // a_3 = ((x*2 + 0)*0.5 + x*2 + 1)*0.5 + x*2 + 2
  const Array want = ref_f64({64, 64}, [&](int64_t e) {
    double a = 0;
    for (int i = 0; i < 3; ++i) a = a * 0.5 + x.get(e) * 2.0 + i;
    return a;
  });
  for (const std::string& be : test_support::host_backends()) {
    SCOPED_TRACE(be);
    EXPECT_TRUE(matches(run_ir(hoisted, be, {x}).at(0), want, f32));
  }
}

}  // namespace
}  // namespace palladium::ktest
