// The interpreter's run-time checks (interpreter only): out-of-bounds ref accesses, reads of output
// memory that nothing wrote, two programs writing one output element, edge-block padding (poison)
// reaching a store, an index, a loop bound or a predicate, and integer division by zero. Each
// Error names the kernel, the program, the op and the index.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>

#include "kernel_test_util.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using ::testing::AllOf;
using ::testing::HasSubstr;

CallOptions interp(CallOptions o) {
  o.backend = "interpret";
  return o;
}

TEST(InterpreterChecks, OutOfBoundsLoad) {
  Rng rng;
  Array x = rng.normal({16});
  auto f = pallas_call([](Ref x_ref, Ref o_ref) { o_ref[pl::all] = x_ref(pl::ds(pl::program_id(0) * 3, 8)); },
                       ShapeDtype({16}, f32),
                       interp({.grid = {2},
                               .in_specs = {BlockSpec({8}, [](Index i) { return i; })},
                               .out_specs = {BlockSpec({8}, [](Index i) { return i; })},
                               .name = "oob_load"}));
  EXPECT_THAT(error_message([&] { f(x); }),
              AllOf(HasSubstr("pallas_call 'oob_load'"), HasSubstr("program (1)"), HasSubstr("op 'load'"),
                    HasSubstr("index 8 is out of bounds for dimension 0 of ref x0 with shape (8,)")));
}

TEST(InterpreterChecks, OutOfBoundsStoreOnAGridOfRank2) {
  Rng rng;
  Array x = rng.normal({4, 6});
  auto f = pallas_call(
      [](Ref x_ref, Ref o_ref) {
        o_ref[pl::all] = x_ref[pl::all];
        // Program (1, 1) writes a column past the block's end.
        Value col = pl::program_id(0) + pl::program_id(1) * 2;
        o_ref(pl::slice(), pl::ds(col, 1)) = Value(x_ref(pl::slice(), pl::ds(0, 1)));
      },
      ShapeDtype({4, 6}, f32),
      interp({.grid = {2, 2},
              .in_specs = {BlockSpec({2, 3}, [](Index i, Index j) { return pl::idx(i, j); })},
              .out_specs = {BlockSpec({2, 3}, [](Index i, Index j) { return pl::idx(i, j); })},
              .name = "oob_store"}));
  EXPECT_THAT(error_message([&] { f(x); }),
              AllOf(HasSubstr("pallas_call 'oob_store'"), HasSubstr("program (1, 1)"), HasSubstr("op 'store'"),
                    HasSubstr("index 3 is out of bounds for dimension 1 of ref o0 with shape (2, 3)")));
}

TEST(InterpreterChecks, ReadOfUnwrittenOutput) {
  Rng rng;
  Array x = rng.normal({8});
  auto f = pallas_call(
      [](Ref x_ref, Ref o_ref) {
        o_ref(pl::slice(0, 2)) = x_ref(pl::slice(0, 2));
        o_ref[pl::all] = o_ref[pl::all] * 2.0f;  // elements 2, 3 of the block were never written
      },
      ShapeDtype({8}, f32),
      interp({.grid = {2},
              .in_specs = {BlockSpec({4}, [](Index i) { return i; })},
              .out_specs = {BlockSpec({4}, [](Index i) { return i; })},
              .name = "unwritten"}));
  EXPECT_THAT(error_message([&] { f(x); }),
              AllOf(HasSubstr("pallas_call 'unwritten'"), HasSubstr("program (0)"), HasSubstr("op 'load'"),
                    HasSubstr("reads element (2) of the selection in ref o0, output memory that nothing has written")));
}

TEST(InterpreterChecks, AtomicOnUnwrittenOutput) {
  Rng rng;
  Array x = rng.normal({4});
  auto f = pallas_call([](Ref x_ref, Ref o_ref) { pl::atomic_add(o_ref, pl::idx(pl::all), x_ref[pl::all]); },
                       ShapeDtype({4}, f32), interp({.name = "atomic_unwritten"}));
  EXPECT_THAT(error_message([&] { f(x); }),
              AllOf(HasSubstr("pallas_call 'atomic_unwritten'"), HasSubstr("program ()"), HasSubstr("op 'atomic_add'"),
                    HasSubstr("updates element (0) of the selection in ref o0, output memory that nothing has written")));
}

TEST(InterpreterChecks, TwoProgramsWriteOneElement) {
  Rng rng;
  Array x = rng.normal({12});
  auto f = pallas_call(
      [](Ref x_ref, Ref o_ref) {
        Value s = pl::program_id(0) * 3;  // windows [0, 4), [3, 7), [6, 10): element 3 twice
        o_ref(pl::ds(s, 4)) = x_ref(pl::ds(s, 4));
      },
      ShapeDtype({12}, f32), interp({.grid = {3}, .name = "overlap"}));
  EXPECT_THAT(error_message([&] { f(x); }),
              AllOf(HasSubstr("pallas_call 'overlap'"), HasSubstr("program (1)"), HasSubstr("op 'store'"),
                    HasSubstr("writes element (0) of the selection in ref o0, which program 0 (row-major linear id) also wrote")));
}

// One program may rewrite its own elements; outputs are checked afresh on every call.
TEST(InterpreterChecks, OneProgramRewritingIsFine) {
  Rng rng;
  Array x = rng.normal({8});
  auto f = pallas_call(
      [](Ref x_ref, Ref o_ref) {
        o_ref[pl::all] = x_ref[pl::all];
        o_ref[pl::all] = o_ref[pl::all] + 1.0f;
      },
      ShapeDtype({8}, f32),
      interp({.grid = {2}, .in_specs = {BlockSpec({4}, [](Index i) { return i; })},
              .out_specs = {BlockSpec({4}, [](Index i) { return i; })}, .name = "rewrite"}));
  for (int call = 0; call < 2; ++call)
    EXPECT_TRUE(matches(f(x), ref_f64({8}, [&](int64_t i) { return x.get(i) + 1; }), f32));
}

// A value computed from edge-block padding must not reach a valid element of an output.
TEST(InterpreterChecks, PoisonReachesAStore) {
  Rng rng;
  Array x = rng.normal({10});
  BlockSpec spec({4}, [](Index i) { return i; });
  auto f = pallas_call([](Ref x_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] - Value(x_ref[pl::all]).sum(); },
                       ShapeDtype({10}, f32), interp({.grid = {3}, .in_specs = {spec}, .out_specs = {spec}, .name = "poison"}));
  EXPECT_THAT(error_message([&] { f(x); }),
              AllOf(HasSubstr("pallas_call 'poison'"), HasSubstr("program (2)"), HasSubstr("op 'store'"),
                    HasSubstr("stores a value computed from poison"), HasSubstr("edge-block padding"),
                    HasSubstr("into element (0) of the selection in ref o0")));
}

TEST(InterpreterChecks, PoisonAsIndexLoopBoundOrPredicate) {
  Rng rng;
  Array n = rng.values({10}, i32, 1, 4), y = rng.normal({4});
  BlockSpec spec({4}, [](Index i) { return i; });
  CallOptions base{.grid = {3}, .in_specs = {spec, BlockSpec()}, .out_specs = {BlockSpec({pl::None}, [](Index i) { return i; })}};
  {
    CallOptions o = base;
    o.name = "poison_index";
    auto f = pallas_call([](Ref n_ref, Ref y_ref, Ref o_ref) { o_ref[pl::all] = y_ref[Value(n_ref[3])]; },
                         ShapeDtype({3}, f32), interp(o));
    EXPECT_THAT(error_message([&] { f(n, y); }),
                AllOf(HasSubstr("pallas_call 'poison_index'"), HasSubstr("program (2)"), HasSubstr("op 'load'"),
                      HasSubstr("an index is computed from poison"), HasSubstr("edge-block padding")));
  }
  {
    CallOptions o = base;
    o.name = "poison_bound";
    auto f = pallas_call(
        [](Ref n_ref, Ref y_ref, Ref o_ref) {
          o_ref[pl::all] = pl::fori_loop(0, Value(n_ref[3]), [&](Value i, Value acc) { return acc + y_ref[i]; }, Value(0.0f));
        },
        ShapeDtype({3}, f32), interp(o));
    EXPECT_THAT(error_message([&] { f(n, y); }),
                AllOf(HasSubstr("pallas_call 'poison_bound'"), HasSubstr("program (2)"), HasSubstr("op 'for'"),
                      HasSubstr("the loop's upper bound is computed from poison"), HasSubstr("edge-block padding")));
  }
  {
    CallOptions o = base;
    o.name = "poison_pred";
    auto f = pallas_call(
        [](Ref n_ref, Ref y_ref, Ref o_ref) {
          o_ref[pl::all] = pl::cond(Value(n_ref[3]) > 1, [&] { return Value(y_ref[0]); }, [&] { return Value(y_ref[1]); });
        },
        ShapeDtype({3}, f32), interp(o));
    EXPECT_THAT(error_message([&] { f(n, y); }),
                AllOf(HasSubstr("pallas_call 'poison_pred'"), HasSubstr("program (2)"), HasSubstr("op 'if'"),
                      HasSubstr("the cond predicate is computed from poison"), HasSubstr("edge-block padding")));
  }
}

// Masked-off lanes of a load without `other` are undefined (poison): summing them is caught, and
// storing them under the same mask is fine.
TEST(InterpreterChecks, MaskedLoadWithoutOther) {
  Rng rng;
  Array x = rng.normal({8});
  auto ok = pallas_call(
      [](Ref x_ref, Ref o_ref) {
        Value m = jnp::arange(8) < 5;
        pl::store(o_ref, pl::idx(pl::all), pl::load(x_ref, pl::idx(pl::all), m), m);
        pl::store(o_ref, pl::idx(pl::all), Value(x_ref[pl::all]) * 0.0f + 2.0f, !m);
      },
      ShapeDtype({8}, f32), interp({.name = "masked_ok"}));
  EXPECT_TRUE(matches(ok(x), ref_f64({8}, [&](int64_t i) { return i < 5 ? x.get(i) : 2.0; }), f32));
  auto bad = pallas_call(
      [](Ref x_ref, Ref o_ref) { o_ref[pl::all] = pl::load(x_ref, pl::idx(pl::all), jnp::arange(8) < 5).sum(); },
      ShapeDtype({}, f32), interp({.name = "masked_poison"}));
  EXPECT_THAT(error_message([&] { bad(x); }),
              AllOf(HasSubstr("pallas_call 'masked_poison'"), HasSubstr("op 'store'"), HasSubstr("poison")));
}

TEST(InterpreterChecks, IntegerDivisionByZero) {
  Rng rng;
  Array x = rng.values({4}, i32, 1, 100), y = from_vector<int32_t>({3, -2, 0, 5});
  auto f = pallas_call([](Ref x_ref, Ref y_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] / y_ref[pl::all]; },
                       ShapeDtype({4}, i32), interp({.name = "div0"}));
  EXPECT_THAT(error_message([&] { f(x, y); }),
              AllOf(HasSubstr("pallas_call 'div0'"), HasSubstr("program ()"), HasSubstr("op 'div'"),
                    HasSubstr("integer division by zero")));
}

// Runs INT64_MIN / -1 and INT64_MIN % -1; exits 0 when they give lax's results (INT64_MIN, 0).
void divide_int64_min_by_minus_one() {
  Array x = from_vector<int64_t>({INT64_MIN, INT64_MIN});
  Array y = from_vector<int64_t>({-1, -1});
  auto f = pallas_call(
      [](Ref x_ref, Ref y_ref, Ref q, Ref r) {
        q[pl::all] = x_ref[pl::all] / y_ref[pl::all];
        r[pl::all] = x_ref[pl::all] % y_ref[pl::all];
      },
      {ShapeDtype({2}, i64), ShapeDtype({2}, i64)}, interp({.name = "div_min"}));
  std::vector<Array> outs = f(x, y);
  std::exit(outs[0].get_int(0) == INT64_MIN && outs[1].get_int(0) == 0 ? 0 : 3);
}

// INT64_MIN / -1 and INT64_MIN % -1 are undefined behaviour in C++ and raised SIGFPE on x86 in
// eval_binary (src/backends/interp/eval_elementwise.cc) when these tests were written; lax.div
// wraps to INT64_MIN and lax.rem gives 0. Runs in a child process so that a crash fails only this
// test.
TEST(InterpreterChecks, Int64MinDividedByMinusOneDoesNotCrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(divide_int64_min_by_minus_one(), ::testing::ExitedWithCode(0), "");
}

// An index_map that places a block wholly outside its array is a bug, not an edge block.
TEST(InterpreterChecks, BlockEntirelyOutsideTheArray) {
  Rng rng;
  Array x = rng.normal({10});
  auto f = pallas_call([](Ref x_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all]; }, ShapeDtype({8}, f32),
                       interp({.grid = {2},
                               .in_specs = {BlockSpec({4}, [](Index i) { return i * 3; })},  // blocks 0 and 3
                               .out_specs = {BlockSpec({4}, [](Index i) { return i; })},
                               .name = "outside"}));
  EXPECT_THAT(error_message([&] { f(x); }),
              AllOf(HasSubstr("pallas_call 'outside'"), HasSubstr("program (1)"), HasSubstr("op 'load'"),
                    HasSubstr("ref x0"), HasSubstr("element 12 of dimension 0"), HasSubstr("outside the array of shape (10,)")));
}

// After a run-time error the callable (and the interpreter) still work.
TEST(InterpreterChecks, ErrorLeavesCallableUsable) {
  Rng rng;
  Array y_bad = from_vector<int32_t>({1, 0}), y_good = from_vector<int32_t>({4, -3}), x = rng.values({2}, i32, -50, 50);
  auto f = pallas_call([](Ref x_ref, Ref y_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] % y_ref[pl::all]; },
                       ShapeDtype({2}, i32), interp({.name = "recover"}));
  EXPECT_THAT(error_message([&] { f(x, y_bad); }), HasSubstr("division by zero"));
  EXPECT_TRUE(matches(f(x, y_good), ref_int({2}, i32, [&](int64_t i) { return x.get_int(i) % y_good.get_int(i); }), i32));
  EXPECT_EQ(f.trace_count(), 1);
}

}  // namespace
}  // namespace palladium::ktest
