// Selects whose predicate compares index spans branch on the predicate's range for the whole block
// (uniform_select.cc): all true, or mixed (all false included), where alone the mask is computed.
// Against the interpreter on a grid whose programs see all true, all false and mixed blocks.
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/program_support.h"

namespace palladium::cudatest {
namespace {

namespace jnp = pl::jnp;

// Program (i, j) holds block (i, j) of 32 x 32 of a 128 x 96 array; rows and cols are its spans.
// Causal: below, on and above the diagonal. Banded, with a subtraction, a constant multiple, a
// negated equality and an And: row - 16 < 2 col and row != col. A division and an Or:
// col / 3 > row or row >= 100. On float32 and int32 values, the on-false side a tile or a constant.
void span_masks(pl::Ref x_ref, pl::Ref y_ref, pl::Ref causal_ref, pl::Ref band_ref, pl::Ref div_ref) {
  pl::Value rows = pl::program_id(0) * 32 + jnp::arange(32);
  pl::Value cols = pl::program_id(1) * 32 + jnp::arange(32);
  pl::Value r = rows(pl::slice(), pl::None), c = cols(pl::None, pl::slice());
  pl::Value x = x_ref[pl::all] * 2.0f, y = y_ref[pl::all];
  causal_ref[pl::all] = jnp::where(r >= c, x, -1.0e30f);
  band_ref[pl::all] = jnp::where(jnp::logical_and(r - 16 < c * 2, !(r == c)), x, y);
  div_ref[pl::all] = jnp::where((c / 3 > r) | (r >= 100), (x * 100.0f).astype(pl::i32), pl::Value(7));
}

pl::CallOptions span_options() {
  auto block = [] { return pl::BlockSpec({32, 32}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); }); };
  return {.grid = {4, 3}, .in_specs = {block(), block()}, .out_specs = {block(), block(), block()},
          .name = "span_masks", .debug = true};
}

std::vector<ShapeDtype> span_outputs() {
  return {ShapeDtype({128, 96}, f32), ShapeDtype({128, 96}, f32), ShapeDtype({128, 96}, i32)};
}

TEST(CudaUniformSelect, SpanMasksBranchOnTheirRange) {
  PL_REQUIRE_NVRTC();
  GeneratedSources sources("uniform-select-test");
  check_kernel(span_masks, span_outputs(), span_options(), {normal(71, {128, 96}), normal(72, {128, 96})});
  const std::string source = sources.source("span_masks");
  ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
  // Each select tests its range first, and no mask tile is computed outside the mixed branch.
  EXPECT_EQ(test_support::count_of(source, "all true or mixed over the block"), 3u) << source;
  EXPECT_GE(test_support::count_of(source, "((long long)"), 6u);
  EXPECT_EQ(source.find("bool v"), std::string::npos) << "a predicate tile outside its select's branch";
}

// PALLADIUM_CUDA_UNIFORM_SELECT=0: the plain elementwise selects, with their predicate tiles.
TEST(CudaUniformSelect, CanBeTurnedOff) {
  PL_REQUIRE_NVRTC();
  test_support::ScopedEnv off{"PALLADIUM_CUDA_UNIFORM_SELECT", "0"};
  GeneratedSources sources("uniform-select-off-test");
  check_kernel(span_masks, span_outputs(), span_options(), {normal(73, {128, 96}), normal(74, {128, 96})});
  const std::string source = sources.source("span_masks");
  ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
  EXPECT_EQ(source.find("all true or mixed over the block"), std::string::npos);
  EXPECT_NE(source.find("bool v"), std::string::npos);
}

// A predicate read by something else besides the select stays a tile of its own (computed once);
// the select still branches on its range. A predicate from memory does not branch.
TEST(CudaUniformSelect, SharedAndLoadedPredicates) {
  PL_REQUIRE_NVRTC();
  GeneratedSources sources("uniform-select-shared-test");
  auto kernel = [](pl::Ref x_ref, pl::Ref m_ref, pl::Ref o_ref, pl::Ref count_ref, pl::Ref loaded_ref) {
    pl::Value rows = pl::program_id(0) * 32 + jnp::arange(32);
    pl::Value cols = pl::program_id(1) * 32 + jnp::arange(32);
    pl::Value mask = rows(pl::slice(), pl::None) >= cols(pl::None, pl::slice());
    o_ref[pl::all] = jnp::where(mask, x_ref[pl::all], 0.5f);
    count_ref[pl::all] = mask.astype(pl::i32);
    loaded_ref[pl::all] = jnp::where(m_ref[pl::all] > 0.0f, x_ref[pl::all], -x_ref[pl::all]);
  };
  pl::CallOptions o = span_options();
  o.name = "shared_masks";
  o.out_specs = {o.in_specs[0], o.in_specs[0], o.in_specs[0]};
  check_kernel(kernel, {ShapeDtype({128, 96}, f32), ShapeDtype({128, 96}, i32), ShapeDtype({128, 96}, f32)}, o,
               {normal(75, {128, 96}), normal(76, {128, 96})});
  const std::string source = sources.source("shared_masks");
  ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
  EXPECT_EQ(test_support::count_of(source, "all true or mixed over the block"), 1u) << source;
  EXPECT_NE(source.find("bool v"), std::string::npos) << "the shared mask is a tile";
}

// Spans that wrap around int32 in some programs (rows from 2^31 - 48): there the ranges in 64 bits
// would disagree with the elements' wrapped values, so those blocks take the elementwise path.
TEST(CudaUniformSelect, WrappingSpansTakeTheElementwisePath) {
  PL_REQUIRE_NVRTC();
  auto kernel = [](pl::Ref x_ref, pl::Ref o_ref) {
    pl::Value rows = pl::program_id(0) * 32 + jnp::arange(32) + pl::Value(2147483600);
    pl::Value cols = pl::program_id(1) * 32 + jnp::arange(32) + pl::Value(2147483500);
    o_ref[pl::all] = jnp::where(rows(pl::slice(), pl::None) >= cols(pl::None, pl::slice()), x_ref[pl::all], -3.0f);
  };
  pl::CallOptions o = span_options();
  o.name = "wrapping_masks";
  o.in_specs = {o.in_specs[0]};
  o.out_specs = {o.in_specs[0]};
  GeneratedSources sources("uniform-select-wrap-test");
  const std::vector<Array> got = check_kernel(kernel, {ShapeDtype({128, 96}, f32)}, o, {normal(77, {128, 96})});
  const std::string source = sources.source("wrapping_masks");
  EXPECT_NE(source.find("all true or mixed over the block"), std::string::npos) << source;
  EXPECT_NE(source.find("2147483647ll"), std::string::npos) << "no int32 bound on the ranges";
  if (!results_are_real()) return;
  // Row 48 of program 1 wrapped to -2^31: below every column.
  EXPECT_EQ(to_host(got[0]).get(48 * 96 + 0), -3.0);
}

// An int8 span of 256 elements wraps past 127 inside the block: no range is taken for it (no
// branch), while one of 128 elements still branches.
TEST(CudaUniformSelect, NarrowSpansThatWrapDoNotBranch) {
  PL_REQUIRE_NVRTC();
  for (int64_t n : {128, 256}) {
    SCOPED_TRACE("int8 span of " + std::to_string(n));
    auto kernel = [n](pl::Ref x_ref, pl::Ref o_ref) {
      pl::Value span = jnp::arange(n, pl::i8);
      o_ref[pl::all] = jnp::where(span >= pl::Value(3).astype(pl::i8), x_ref[pl::all], 0.25f);
    };
    GeneratedSources sources("uniform-select-int8-test");
    check_kernel(kernel, {ShapeDtype({n}, f32)}, {.name = "int8_span", .debug = true}, {normal(78 + n, {n})});
    const std::string source = sources.source("int8_span");
    ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
    EXPECT_EQ(source.find("all true or mixed over the block") != std::string::npos, n == 128) << source;
  }
}

}  // namespace
}  // namespace palladium::cudatest
