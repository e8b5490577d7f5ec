// Checked runs of the compiled backends (CompilerParams::checks, PALLADIUM_CHECKS=1): every fault
// the interpreter finds in a ref access is found on the compiled backend too, worded the same.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using CheckedRunTest = KernelTest;

// The interpreter's message for a faulty call, and the same call's message on this backend in a
// checked run: they must be the same text, the second naming the backend.
class Faults {
 public:
  Faults(const std::string& backend, bool by_env = false) : backend_(backend), by_env_(by_env) {}

  template <class K>
  void expect_same(K kernel, ShapeDtype out, CallOptions o, const std::vector<Array>& inputs, const std::string& expected) {
    o.backend = "interpret";
    const std::string interp = test_support::error_message([&] { (void)pallas_call(kernel, out, o).call(inputs); });
    EXPECT_THAT(interp, ::testing::HasSubstr(expected));
    o.backend = backend_;
    o.compiler_params.checks = !by_env_;
    std::optional<test_support::ScopedEnv> env;
    if (by_env_) env.emplace("PALLADIUM_CHECKS", "1");
    const std::string checked = test_support::error_message([&] { (void)pallas_call(kernel, out, o).call(inputs); });
    EXPECT_EQ(checked, interp + " (found by a checked run on the " + backend_ + " backend)");
  }

 private:
  std::string backend_;
  bool by_env_;
};

TEST_P(CheckedRunTest, DsPastTheBlockEnd) {
  Array x = Rng().normal({16});
  Faults(backend_name()).expect_same(
      [](Ref x_ref, Ref o_ref) { o_ref[pl::all] = x_ref(pl::ds(pl::program_id(0) * 3, 8)); }, ShapeDtype({16}, f32),
      {.grid = {2}, .in_specs = {BlockSpec({8}, [](Index i) { return i; })},
       .out_specs = {BlockSpec({8}, [](Index i) { return i; })}, .name = "oob_load"},
      {x}, "program (1), op 'load': index 8 is out of bounds for dimension 0 of ref x0 with shape (8,)");
}

TEST_P(CheckedRunTest, StoreColumnPastTheBlockEnd) {
  Array x = Rng().normal({4, 6});
  Faults(backend_name()).expect_same(
      [](Ref x_ref, Ref o_ref) {
        o_ref[pl::all] = x_ref[pl::all];
        Value col = pl::program_id(0) + pl::program_id(1) * 2;
        o_ref(pl::slice(), pl::ds(col, 1)) = Value(x_ref(pl::slice(), pl::ds(0, 1)));
      },
      ShapeDtype({4, 6}, f32),
      {.grid = {2, 2}, .in_specs = {BlockSpec({2, 3}, [](Index i, Index j) { return pl::idx(i, j); })},
       .out_specs = {BlockSpec({2, 3}, [](Index i, Index j) { return pl::idx(i, j); })}, .name = "oob_store"},
      {x}, "program (1, 1), op 'store': index 3 is out of bounds for dimension 1 of ref o0 with shape (2, 3)");
}

// A scalar index, an atomic, and the switch by environment variable.
TEST_P(CheckedRunTest, ScalarIndexAndAtomicByEnvironment) {
  Array x = Rng().normal({8});
  Faults(backend_name(), /*by_env=*/true)
      .expect_same([](Ref x_ref, Ref o_ref) { o_ref[pl::all] = jnp::zeros({4}) + Value(x_ref(pl::program_id(0) * 5)); },
                   ShapeDtype({8}, f32),
                   {.grid = {2}, .in_specs = {BlockSpec({4}, [](Index i) { return i; })},
                    .out_specs = {BlockSpec({4}, [](Index i) { return i; })}, .name = "oob_scalar"},
                   {x}, "program (1), op 'load': index 5 is out of bounds for dimension 0 of ref x0 with shape (4,)");
  Faults(backend_name(), /*by_env=*/true)
      .expect_same(
          [](Ref x_ref, Ref o_ref) {
            pl::when(pl::program_id(0) == 0, [&] { o_ref[pl::all] = jnp::zeros({8}); });
            pl::atomic_add(o_ref, pl::idx(pl::ds(pl::program_id(0), 8)), x_ref[pl::all]);
          },
          ShapeDtype({8}, f32), {.grid = {2}, .dimension_semantics = {pl::arbitrary}, .name = "oob_atomic"}, {x},
          "program (1), op 'atomic_add': index 8 is out of bounds for dimension 0 of ref o0 with shape (8,)");
}

// An index_map that puts a block outside its array.
TEST_P(CheckedRunTest, BlockOutsideTheArray) {
  Array x = Rng().normal({16});
  Faults(backend_name()).expect_same(
      [](Ref x_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all]; }, ShapeDtype({16}, f32),
      {.grid = {2}, .in_specs = {BlockSpec({8}, [](Index i) { return i * 2; })},
       .out_specs = {BlockSpec({8}, [](Index i) { return i; })}, .name = "bad_map"},
      {x}, "program (1), op 'load': the index_map of ref x0 places its block at element 16 of dimension 0, entirely "
           "outside the array of shape (16,)");
}

// A gather whose one lane (12) points past the block; a masked-off wild lane is not a fault.
TEST_P(CheckedRunTest, GatherLanePastTheBlock) {
  Array x = Rng().normal({16});
  Faults(backend_name()).expect_same(
      [](Ref x_ref, Ref o_ref) {
        Value k = jnp::arange(16);
        Value idx = jnp::where(k == 12, k + 9, 15 - k);
        o_ref[pl::all] = pl::load(x_ref, pl::idx(jnp::where(k == 3, k + 100, idx)), k != 3, 0.0f);
      },
      ShapeDtype({16}, f32), {.name = "oob_gather"}, {x},
      "program (), op 'load': index 21 is out of bounds for dimension 0 of ref x0 with shape (16,)");
}

// Masked-off lanes may lie outside the ref (the usual tail handling); an active one may not.
TEST_P(CheckedRunTest, MasksDecide) {
  Array x = Rng().normal({10});
  CallOptions o{.grid = {2}, .in_specs = {BlockSpec({5}, [](Index i) { return i; })},
                .out_specs = {BlockSpec({8}, [](Index i) { return i; })}, .name = "tail"};
  o.compiler_params.checks = true;
  auto tail = [](int64_t limit) {
    return [limit](Ref x_ref, Ref o_ref) {
      Value k = jnp::arange(8);
      o_ref[pl::all] = pl::load(x_ref, pl::idx(pl::ds(0, 8)), k < limit, jnp::zeros({8}));
    };
  };
  Array good = run1(tail(5), ShapeDtype({16}, f32), o, {x});
  EXPECT_TRUE(matches(good, ref_f64({16}, [&](int64_t f) { return f % 8 < 5 ? x.get(f / 8 * 5 + f % 8) : 0.0; }), f32));
  Faults(backend_name()).expect_same(tail(6), ShapeDtype({16}, f32), o, {x},
                                     "program (0), op 'load': index 5 is out of bounds for dimension 0 of ref x0 with shape (5,)");
}

// Every program of a large grid faults, concurrently on a GPU: the report is still the
// interpreter's, the program first in grid order, in every run.
TEST_P(CheckedRunTest, FirstProgramInGridOrderReports) {
  Array x = Rng().normal({4 * 96});
  CallOptions o{.grid = {4, 24}, .in_specs = {BlockSpec({4}, [](Index i, Index j) { return i * 24 + j; })},
                .out_specs = {BlockSpec({4}, [](Index i, Index j) { return i * 24 + j; })}, .name = "all_fault"};
  auto kernel = [](Ref x_ref, Ref o_ref) {
    o_ref[pl::all] = x_ref[pl::all];
    o_ref[pl::all] = x_ref(pl::ds(pl::program_id(1) % 3 + 1, 4));  // every program reads past its block
  };
  for (int run = 0; run < 3; ++run)
    Faults(backend_name()).expect_same(kernel, ShapeDtype({4 * 96}, f32), o, {x},
                                       "program (0, 0), op 'load': index 4 is out of bounds for dimension 0 of ref x0 with shape (4,)");
}

// The compiled backends of this machine (the interpreter always checks).
std::vector<std::string> compiled_backends() {
  std::vector<std::string> names;
  for (const std::string& b : backend::available_names())
    if (b != "interpret") names.push_back(b);
  return names;
}
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CheckedRunTest);
INSTANTIATE_TEST_SUITE_P(Backends, CheckedRunTest, ::testing::ValuesIn(compiled_backends()), backend_param_name);

}  // namespace
}  // namespace palladium::ktest
