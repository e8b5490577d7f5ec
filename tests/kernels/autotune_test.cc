// autotune: a choice among pallas_calls of one function, timed on the first inputs of each
// signature (src/core/autotune.cc). On the cpu backend (the interpreter where it is absent): the
// faster candidate is chosen and remembered on disk, PALLADIUM_AUTOTUNE=0 takes the first, failing
// candidates are skipped, jit and vmap call the choice, and misuse has messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;
using pl::Index;
using pl::Ref;
using pl::ShapeDtype;
using palladium::test_support::contains;
using palladium::test_support::error_message;
using palladium::test_support::ScopedEnv;

namespace {

constexpr int64_t kN = 1 << 16;

bool have_cpu() {
  for (const std::string& b : pl::available_backends())
    if (b == "cpu") return true;
  return false;
}
std::string backend() { return have_cpu() ? "cpu" : "interpret"; }

// y = a x + 1 in blocks of `block` elements (one program per block) on `on`.
pl::Callable<Array> affine(int64_t block, int64_t n = kN, const std::string& on = backend(), float a = 2.0f) {
  pl::BlockSpec spec({block}, [](Index i) { return pl::idx(i); });
  return pl::pallas_call([a](Ref x, Ref o) { o[pl::all] = x[pl::all] * a + 1.0f; }, ShapeDtype({n}, pl::f32),
                         {.grid = {n / block}, .in_specs = {spec}, .out_specs = {spec}, .name = "affine", .backend = on});
}
// The same function many times slower on every machine: the interpreter, a program per 8 elements.
pl::Callable<Array> slow_affine(int64_t n = kN, float a = 2.0f) { return affine(8, n, "interpret", a); }

Array reference(const Array& x) { return x.astype(pl::f64) * 2.0 + 1.0; }

// A cache folder of this test's own, removed at the end.
struct TempCache {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("pl-autotune-test-" + std::to_string(::getpid()) + "-" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                        .string();
  ScopedEnv env{"PALLADIUM_CACHE_DIR", dir};
  ~TempCache() { std::filesystem::remove_all(dir); }
};

// The interpreter running a program per 8 elements against the cpu backend's 16 programs: the
// second is many times faster, so the choice does not hang on timing noise.
TEST(Autotune, PicksTheFasterCandidateAndRemembersItOnDisk) {
  if (!have_cpu()) GTEST_SKIP() << "the cpu backend is unavailable: no faster candidate to find";
  TempCache cache;
  const Array x = pl::random::normal(pl::random::key(81), {kN});
  auto slow = slow_affine(), fast = affine(kN / 16);
  auto tuned = pl::autotune<Array>("affine", {{"interpret, block 8", slow}, {"block 4096", fast}});
  EXPECT_LT(pl::rel_error(tuned(x), reference(x)), 1e-7);
  EXPECT_EQ(pl::autotune_choice(tuned, {x}), "block 4096");
  // New calls of the same name and candidates, as a later process makes them: the choice comes
  // from the disk cache, and the slow candidate is never compiled.
  auto slow2 = slow_affine(), fast2 = affine(kN / 16);
  auto again = pl::autotune<Array>("affine", {{"interpret, block 8", slow2}, {"block 4096", fast2}});
  const Array x2 = pl::random::normal(pl::random::key(82), {kN});
  EXPECT_LT(pl::rel_error(again(x2), reference(x2)), 1e-7);
  EXPECT_EQ(slow2.trace_count(), 0);
  EXPECT_EQ(fast2.trace_count(), 1);
  // Candidates of the same name and labels computing another function are timed afresh (the disk
  // entry is keyed by the candidates' kernels): the slow one runs.
  auto slow3 = slow_affine(kN, 3.0f);
  auto other = pl::autotune<Array>("affine", {{"interpret, block 8", slow3}, {"block 4096", affine(kN / 16, kN, backend(), 3.0f)}});
  EXPECT_LT(pl::rel_error(other(x2), x2.astype(pl::f64) * 3.0 + 1.0), 1e-7);
  EXPECT_EQ(slow3.trace_count(), 1);
  // Another signature is timed afresh.
  const Array small = pl::random::normal(pl::random::key(83), {kN / 2});
  auto tuned_small = pl::autotune<Array>("affine", {{"interpret, block 8", slow_affine(kN / 2)}, {"block 2048", affine(kN / 32, kN / 2)}});
  EXPECT_EQ(pl::autotune_choice(tuned_small, {small}), "block 2048");
}

TEST(Autotune, OffTakesTheFirstCandidateWithoutTiming) {
  TempCache cache;
  ScopedEnv off("PALLADIUM_AUTOTUNE", "0");
  const Array x = pl::random::normal(pl::random::key(84), {kN});
  auto slow = slow_affine(), fast = affine(kN / 16);
  auto tuned = pl::autotune<Array>("affine", {{"interpret, block 8", slow}, {"block 4096", fast}});
  EXPECT_LT(pl::rel_error(tuned(x), reference(x)), 1e-7);
  EXPECT_EQ(pl::autotune_choice(tuned, {x}), "interpret, block 8");
  EXPECT_EQ(fast.trace_count(), 0);
}

// A candidate that cannot run is skipped; when none can, the error names every candidate's failure.
TEST(Autotune, FailingCandidatesAreSkippedOrReported) {
  TempCache cache;
  const Array x = pl::random::normal(pl::random::key(85), {1024});
  pl::BlockSpec spec({256}, [](Index i) { return pl::idx(i); });
  // Two in_specs for one input: an error when the call is described.
  auto broken = pl::pallas_call([](Ref a, Ref o) { o[pl::all] = a[pl::all]; }, ShapeDtype({1024}, pl::f32),
                                {.grid = {4}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "broken",
                                 .backend = backend()});
  auto tuned = pl::autotune<Array>("affine", {{"broken", broken}, {"whole", affine(1024, 1024)}});
  EXPECT_LT(pl::rel_error(tuned(x), reference(x)), 1e-7);
  EXPECT_EQ(pl::autotune_choice(tuned, {x}), "whole");
  auto none = pl::autotune<Array>("copies", {{"broken", broken}, {"also broken", broken}});
  const std::string msg = error_message([&] { (void)none(x); });
  EXPECT_TRUE(contains(msg, "autotune 'copies': every candidate failed on these inputs")) << msg;
  EXPECT_TRUE(contains(msg, "  broken: ")) << msg;
  EXPECT_TRUE(contains(msg, "  also broken: ")) << msg;
  EXPECT_TRUE(contains(msg, "in_specs")) << msg;
}

TEST(Autotune, MisuseHasMessages) {
  const std::string empty = error_message([] { (void)pl::autotune<Array>("nothing", {}); });
  EXPECT_TRUE(contains(empty, "autotune 'nothing': no candidates")) << empty;
  const std::string twice = error_message([] { (void)pl::autotune<Array>("affine", {{"a", affine(8, 64)}, {"a", affine(64, 64)}}); });
  EXPECT_TRUE(contains(twice, "autotune 'affine': two candidates are labelled 'a'")) << twice;
  const std::string differ = error_message([] { (void)pl::autotune<Array>("affine", {{"n64", affine(8, 64)}, {"n128", affine(8, 128)}}); });
  EXPECT_TRUE(contains(differ, "autotune 'affine': candidate 'n128' returns (f32(128,)) but 'n64' returns (f32(64,))")) << differ;
  const std::string not_tuned = error_message([] { (void)pl::autotune_choice(affine(8, 64), {Array({64}, pl::f32)}); });
  EXPECT_TRUE(contains(not_tuned, "autotune_choice: pallas_call 'affine' is not an autotune")) << not_tuned;
}

// Inside jit the choice is bound as a pallas_call and tuned at the program's first run; vmap tunes
// the batched candidates.
TEST(Autotune, JitAndVmapCallTheChoice) {
  TempCache cache;
  auto tuned = pl::autotune<Array>("affine", {{"block 1024", affine(1024, 4096)}, {"block 4096", affine(4096, 4096)}});
  auto f = pl::jit([tuned](const Array& x) { return pl::jnp::sin(tuned(x)); });
  for (uint64_t s = 0; s < 3; ++s) {
    const Array x = pl::random::normal(pl::random::key(86 + s), {4096});
    EXPECT_LT(pl::rel_error(f(x), pl::jnp::sin(reference(x))), 1e-6) << "call " << s;
  }
  auto batched = pl::vmap(tuned);
  const Array xs = pl::random::normal(pl::random::key(90), {3, 4096});
  EXPECT_LT(pl::rel_error(batched(xs), reference(xs)), 1e-7);
  // vmap kept the choice and its labels (autotune_choice throws on a call that is not an autotune).
  const std::string chosen = pl::autotune_choice(batched, {xs});
  EXPECT_TRUE(chosen == "block 1024" || chosen == "block 4096") << chosen;
  // The batched autotune bound inside jit has the batched result type.
  auto jb = pl::jit([batched](const Array& a) { return batched(a) * 3.0; });
  const Array got = jb(xs);
  EXPECT_EQ(got.shape(), (pl::Shape{3, 4096}));
  EXPECT_LT(pl::rel_error(got, reference(xs) * 3.0), 1e-7);
}

}  // namespace
