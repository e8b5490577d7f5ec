// Bad input inside a kernel: shape and dtype mismatches, dtypes an op does not take, bad indices,
// bad control flow, Values used where they cannot be. Each Error names the kernel and the op.
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>

#include "errors_test_util.h"

namespace palladium::etest {
namespace {

const Array kX48 = pl::random::uniform(pl::random::key(48), {4, 8}, f32, -1, 1);
const Array kX84 = pl::random::uniform(pl::random::key(84), {8, 4}, f32, -1, 1);
const Array kX8 = pl::random::uniform(pl::random::key(8), {8}, f32, -1, 1);
const Array kI8 = pl::random::uniform(pl::random::key(9), {8}, i32, -100, 100);

// ---------------------------------------------------------------------------------------------
// Shapes and dtypes.

TEST(OpErrors, AddShapeMismatch) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref y, Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; }, ShapeDtype({4, 8}, f32),
                           {.name = "bad_add"}, kX48, kX84);
              }),
              AllOf(HasSubstr("pallas_call 'bad_add'"), HasSubstr("op 'add'"),
                    HasSubstr("shapes (4, 8) and (8, 4) are not broadcast-compatible")));
}

TEST(OpErrors, CompareAndWhereShapeMismatch) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref y, Ref o) { o[pl::all] = x[pl::all] < y[pl::all]; }, ShapeDtype({4, 8}, bool_),
                           {.name = "bad_lt"}, kX48, kX84);
              }),
              AllOf(HasSubstr("pallas_call 'bad_lt'"), HasSubstr("op 'lt'"), HasSubstr("(4, 8) and (8, 4)")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref y, Ref o) { o[pl::all] = jnp::where(x[pl::all] > 0, x[pl::all], y[pl::all]); },
                           ShapeDtype({4, 8}, f32), {.name = "bad_where"}, kX48, kX84);
              }),
              AllOf(HasSubstr("pallas_call 'bad_where'"), HasSubstr("op 'select'"), HasSubstr("(4, 8) and (8, 4)")));
}

TEST(OpErrors, StoreOfTheWrongDtype) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = x[pl::all]; }, ShapeDtype({8}, i32), {.name = "bad_store"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'bad_store'"), HasSubstr("op 'store'"), HasSubstr("float32"),
                    HasSubstr("does not match ref o0 of dtype int32"), HasSubstr("astype")));
}

TEST(OpErrors, StoreOfTheWrongShape) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = x[pl::all]; }, ShapeDtype({4}, f32), {.name = "bad_store_shape"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'bad_store_shape'"), HasSubstr("op 'store'"), HasSubstr("(8,)"), HasSubstr("(4,)")));
}

// dot of float32 and bfloat16 is not an error: the operands are promoted (to float32), as jnp.dot.
TEST(OpErrors, DotOfMixedFloatDtypesPromotes) {
  Array a = pl::random::normal(pl::random::key(1), {4, 8}, f32), b = pl::random::normal(pl::random::key(2), {8, 3}, bf16);
  Array o = run_kernel([](Ref x, Ref y, Ref z) { z[pl::all] = pl::dot(x[pl::all], y[pl::all]); }, ShapeDtype({4, 3}, f32),
                       {.name = "dot_mixed"}, a, b);
  EXPECT_LT(rel_error(o, matmul(a, b.astype(f32))), 1e-5);
}

TEST(OpErrors, DotShapes) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref y, Ref z) { z[pl::all] = pl::dot(x[pl::all], y[pl::all]); }, ShapeDtype({4, 4}, f32),
                           {.name = "dot_k"}, kX48, kX48);
              }),
              AllOf(HasSubstr("pallas_call 'dot_k'"), HasSubstr("op 'dot'"), HasSubstr("contracting dimensions differ"),
                    HasSubstr("(4, 8) @ (4, 8)")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref y, Ref z) { z[pl::all] = pl::dot(x[pl::all], y[pl::all]); }, ShapeDtype({}, f32),
                           {.name = "dot_rank"}, kX8, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'dot_rank'"), HasSubstr("op 'dot'"), HasSubstr("rank-2 operands"), HasSubstr("(8,)")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref z) { z[pl::all] = pl::dot(x[pl::all] > 0, x[pl::all] > 0, false, true); },
                           ShapeDtype({4, 4}, i32), {.name = "dot_bool"}, kX48);
              }),
              AllOf(HasSubstr("pallas_call 'dot_bool'"), HasSubstr("op 'dot'"), HasSubstr("bool")));
}

// ---------------------------------------------------------------------------------------------
// Dtypes an op does not take. (exp of an integer is not one: it computes in float32, as jnp.exp.)

TEST(OpErrors, ExpOfIntegersComputesInFloat32) {
  Array o = run_kernel([](Ref x, Ref z) { z[pl::all] = jnp::exp(x[pl::all]); }, ShapeDtype({8}, f32), {.name = "exp_int"},
                       pl::arange(8));
  EXPECT_NEAR(o.get(3), std::exp(3.0), 1e-4);
}

TEST(OpErrors, BitwiseOpsOfFloats) {
  for (const char* op : {"and", "or", "xor"}) {
    SCOPED_TRACE(op);
    const std::string what = op;
    EXPECT_THAT(error_message([&] {
                  run_kernel(
                      [what](Ref x, Ref o) {
                        Value v = x[pl::all];
                        o[pl::all] = what == "and" ? (v & v) : what == "or" ? (v | v) : (v ^ v);
                      },
                      ShapeDtype({8}, f32), {.name = "bitwise_float"}, kX8);
                }),
                AllOf(HasSubstr("pallas_call 'bitwise_float'"), HasSubstr("op '" + what + "'"),
                      HasSubstr("takes bool or integer operands, not float32")));
  }
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = ~Value(x[pl::all]); }, ShapeDtype({8}, f32), {.name = "invert_float"},
                           kX8);
              }),
              AllOf(HasSubstr("pallas_call 'invert_float'"), HasSubstr("op 'not'"), HasSubstr("float32")));
}

TEST(OpErrors, NumericOpsOfBools) {
  const Array b = kI8.astype(bool_);
  EXPECT_THAT(error_message([&] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = Value(x[pl::all]).sum(); }, ShapeDtype({}, bool_), {.name = "sum_bool"}, b);
              }),
              AllOf(HasSubstr("pallas_call 'sum_bool'"), HasSubstr("op 'reduce_sum'"), HasSubstr("not bool")));
  EXPECT_THAT(error_message([&] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = jnp::cumsum(x[pl::all]); }, ShapeDtype({8}, bool_), {.name = "cumsum_bool"}, b);
              }),
              AllOf(HasSubstr("pallas_call 'cumsum_bool'"), HasSubstr("op 'cumsum'"), HasSubstr("not bool")));
  EXPECT_THAT(error_message([&] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = -Value(x[pl::all]); }, ShapeDtype({8}, bool_), {.name = "neg_bool"}, b);
              }),
              AllOf(HasSubstr("pallas_call 'neg_bool'"), HasSubstr("op 'neg'"), HasSubstr("not bool")));
  EXPECT_THAT(error_message([&] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = x[pl::all] * x[pl::all]; }, ShapeDtype({8}, bool_), {.name = "mul_bool"}, b);
              }),
              AllOf(HasSubstr("pallas_call 'mul_bool'"), HasSubstr("op 'mul'"), HasSubstr("not bool")));
}

TEST(OpErrors, WhereConditionMustBeBool) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = jnp::where(x[pl::all], 1.0f, 2.0f); }, ShapeDtype({8}, f32),
                           {.name = "where_int"}, kI8);
              }),
              AllOf(HasSubstr("pallas_call 'where_int'"), HasSubstr("op 'select'"), HasSubstr("condition must be bool, not int32")));
}

TEST(OpErrors, AtomicsTakeOnly32And64BitRefs) {
  const Array small = kI8.astype(i8), half = kX8.astype(f16);
  EXPECT_THAT(error_message([&] {
                run_kernel([](Ref x, Ref o) { pl::atomic_add(o, pl::idx(pl::all), x[pl::all]); }, ShapeDtype({8}, i8),
                           {.input_output_aliases = {{0, 0}}, .name = "atomic_i8"}, small);
              }),
              AllOf(HasSubstr("pallas_call 'atomic_i8'"), HasSubstr("op 'atomic_add'"), HasSubstr("does not take int8 refs")));
  EXPECT_THAT(error_message([&] {
                run_kernel([](Ref x, Ref o) { pl::atomic_max(o, pl::idx(pl::all), x[pl::all]); }, ShapeDtype({8}, f16),
                           {.input_output_aliases = {{0, 0}}, .name = "atomic_f16"}, half);
              }),
              AllOf(HasSubstr("pallas_call 'atomic_f16'"), HasSubstr("op 'atomic_max'"), HasSubstr("does not take float16 refs")));
}

// Writes into input refs are refused while tracing, on every backend, even where they would never
// run: here under a cond whose predicate (program_id(0) > 0 on a grid of one) is always false.
TEST(OpErrors, StoresAndAtomicsIntoInputRefs) {
  auto never = [](Ref x, Ref o) {
    o[pl::all] = x[pl::all];
    pl::when(pl::program_id(0) > 0, [&] { x[pl::all] = Value(x[pl::all]) + 1.0f; });
  };
  const std::string store_message = error_message([&] {
    pallas_call(never, ShapeDtype({8}, f32), {.grid = {1}, .name = "store_input"}).lower({ShapeDtype({8}, f32)});
  });
  EXPECT_EQ(store_message,
            "pallas_call 'store_input', op 'store': writes to input ref x0; inputs are read-only (to update an array "
            "in place, alias it to an output with input_output_aliases and write the output's ref)");
  for (const std::string& backend : pl::available_backends()) {
    auto f = pallas_call(never, ShapeDtype({8}, f32), {.grid = {1}, .name = "store_input", .backend = backend});
    EXPECT_EQ(error_message([&] { f(kX8); }), store_message) << backend;
  }
  EXPECT_THAT(error_message([&] {
                run_kernel([](Ref x, Ref o) {
                  o[pl::all] = x[pl::all];
                  pl::atomic_add(x, pl::idx(pl::all), Value(o[pl::all]));
                }, ShapeDtype({8}, f32), {.name = "atomic_input"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'atomic_input', op 'atomic_add': writes to input ref x0; inputs are read-only"),
                    Not(HasSubstr("program ("))));
}

TEST(OpErrors, MaskMustBeBoolOfTheSelectionsShape) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = pl::load(x, pl::idx(pl::all), Value(x[pl::all]), Value(0.0f)); },
                           ShapeDtype({8}, f32), {.name = "mask_float"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'mask_float'"), HasSubstr("op 'load'"), HasSubstr("mask must be bool, not float32")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { pl::store(o, pl::idx(pl::all), x[pl::all], jnp::arange(3) < 2); },
                           ShapeDtype({8}, f32), {.name = "mask_shape"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'mask_shape'"), HasSubstr("op 'store'"), HasSubstr("(3,)"), HasSubstr("(8,)")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = pl::load(x, pl::idx(pl::all), std::nullopt, Value(0.0f)); },
                           ShapeDtype({8}, f32), {.name = "other_no_mask"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'other_no_mask'"), HasSubstr("op 'load'"), HasSubstr("`other` needs a mask")));
}

// A weak literal that does not fit the integer dtype it meets is an error, as JAX's OverflowError
// (rather than wrapping silently: i8_tile + 300 would add 44).
TEST(OpErrors, LiteralOutOfRangeOfTheTilesDtype) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = x[pl::all] + 300; }, ShapeDtype({8}, i8), {.name = "lit_i8"},
                           kI8.astype(i8));
              }),
              AllOf(HasSubstr("pallas_call 'lit_i8'"), HasSubstr("op 'add'"), HasSubstr("300"), HasSubstr("int8")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = x[pl::all] > -1; }, ShapeDtype({8}, bool_), {.name = "lit_u32"},
                           kI8.astype(u32));
              }),
              AllOf(HasSubstr("pallas_call 'lit_u32'"), HasSubstr("op 'gt'"), HasSubstr("-1"), HasSubstr("uint32")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = x[pl::all] * (int64_t{1} << 40); }, ShapeDtype({8}, i32),
                           {.name = "lit_i64"}, kI8);
              }),
              AllOf(HasSubstr("pallas_call 'lit_i64'"), HasSubstr("int32")));
}

TEST(OpErrors, IotaAndCdivDtypes) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref o) { o[pl::all] = jnp::iota(bool_, {8}, 0); }, ShapeDtype({8}, bool_), {.name = "iota_bool"});
              }),
              AllOf(HasSubstr("pallas_call 'iota_bool'"), HasSubstr("op 'iota'"), HasSubstr("bool")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref o) { o[pl::all] = jnp::iota(i32, {8}, 1); }, ShapeDtype({8}, i32), {.name = "iota_dim"});
              }),
              AllOf(HasSubstr("pallas_call 'iota_dim'"), HasSubstr("op 'iota'"), HasSubstr("dimension 1 is outside shape (8,)")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = pl::cdiv(x[0], Value(2.5)); }, ShapeDtype({}, f32), {.name = "cdiv_f"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'cdiv_f'"), HasSubstr("op 'cdiv'"), HasSubstr("integer operands")));
}

// ---------------------------------------------------------------------------------------------
// Layout ops.

TEST(OpErrors, LayoutOps) {
  struct Case {
    std::string name;
    std::function<void(Ref, Ref)> kernel;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"reshape_count", [](Ref x, Ref o) { o[pl::all] = Value(x[pl::all]).reshape({5, 6}); },
       {"op 'reshape'", "cannot reshape (4, 8) to (5, 6)"}},
      {"reshape_two_infer", [](Ref x, Ref o) { o[pl::all] = Value(x[pl::all]).reshape({-1, -1}); },
       {"op 'reshape'", "more than one -1"}},
      {"transpose_perm", [](Ref x, Ref o) { o[pl::all] = Value(x[pl::all]).transpose({0, 0}); },
       {"op 'transpose'", "permutation [0, 0] does not fit rank 2"}},
      {"broadcast_to", [](Ref x, Ref o) { o[pl::all] = Value(x[pl::all]).broadcast_to({4, 5}); },
       {"op 'broadcast_to'", "cannot broadcast shape (4, 8) to (4, 5)"}},
      {"reduce_axis", [](Ref x, Ref o) { o[pl::all] = Value(x[pl::all]).sum(2); }, {"op 'sum'", "axis 2 is out of range for rank 2"}},
      {"argmax_axis", [](Ref x, Ref o) { o[pl::all] = jnp::argmax(x[pl::all], -3); },
       {"op 'argmax'", "axis -3 is out of range for rank 2"}},
      {"cumsum_axis", [](Ref x, Ref o) { o[pl::all] = jnp::cumsum(x[pl::all], 5); }, {"op 'cumsum'", "axis 5 is out of range"}},
      {"expand_dims_axis", [](Ref x, Ref o) { o[pl::all] = jnp::expand_dims(x[pl::all], 4); },
       {"op 'expand_dims'", "axis 4 is out of range for rank 3"}},
      {"value_index", [](Ref x, Ref o) { o[pl::all] = Value(x[pl::all])(pl::slice(0, 2)); },
       {"op 'index'", "a Value can be indexed only with pl::all, full slices and pl::None"}},
      {"value_index_count", [](Ref x, Ref o) { o[pl::all] = Value(x[pl::all])(pl::slice(), pl::slice(), pl::slice()); },
       {"op 'index'", "too many indices (3)", "(4, 8)"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string msg = error_message([&] { run_kernel(c.kernel, ShapeDtype({4, 8}, f32), {.name = c.name}, kX48); });
    EXPECT_THAT(msg, HasSubstr("pallas_call '" + c.name + "'"));
    for (const std::string& p : c.parts) EXPECT_THAT(msg, HasSubstr(p));
  }
}

// Regression: negative dimensions in a tile's shape are caught by the op that makes the tile.
TEST(OpErrors, NegativeDimensionsInTileShapes) {
  struct Case {
    std::string op;
    std::function<Value()> make;
  };
  const std::vector<Case> cases = {
      {"full", [] { return jnp::zeros({-3}); }},
      {"iota", [] { return jnp::iota(i32, {-4}, 0); }},
      {"iota", [] { return jnp::arange(-1); }},
      {"broadcast_to", [] { return Value(1.0f).broadcast_to({2, -1}); }},
      {"reshape", [] { return jnp::zeros({4, 8}).reshape({-2, -16}); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    auto make = c.make;
    EXPECT_THAT(error_message([&] {
                  run_kernel([make](Ref o) { o[pl::all] = make().astype(f32).sum(); }, ShapeDtype({}, f32), {.name = "neg_shape"});
                }),
                AllOf(HasSubstr("pallas_call 'neg_shape'"), HasSubstr("op '" + c.op + "'"), HasSubstr("negative")));
  }
}

// ---------------------------------------------------------------------------------------------
// Ref indexing.

TEST(OpErrors, RefIndexing) {
  struct Case {
    std::string name;
    std::function<void(Ref, Ref)> kernel;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"static_oob", [](Ref x, Ref o) { o[pl::all] = x[8]; }, {"op 'load'", "index 8 is out of bounds for dimension 0 of ref x0 with shape (8,)"}},
      {"negative_oob", [](Ref x, Ref o) { o[pl::all] = x[-9]; }, {"op 'load'", "index -9 is out of bounds"}},
      {"too_many", [](Ref x, Ref o) { o[pl::all] = x(0, 0); }, {"op 'load'", "too many indices (2) for ref x0 of shape (8,)"}},
      {"none_index", [](Ref x, Ref o) { o[pl::all] = x(pl::None); }, {"op 'load'", "pl::None", "ref x0"}},
      {"two_ellipses", [](Ref x, Ref o) { o[pl::all] = x(pl::all, pl::all); }, {"op 'load'", "more than one pl::all"}},
      {"float_index", [](Ref x, Ref o) { o[pl::all] = x[Value(x[0])]; }, {"op 'load'", "index 0 of ref x0 must be an integer scalar"}},
      // An integer tile gathers (tests/kernels/gather_test.cc), but a view cannot take one.
      {"tile_view", [](Ref x, Ref o) { o[pl::all] = x.at(pl::idx(jnp::arange(2)))[0]; }, {"op 'at'", "a view of a ref takes scalars and slices, not an integer tile"}},
      {"ds_stride", [](Ref x, Ref o) { o[pl::all] = x(pl::ds(0, 4, 0)); }, {"op 'load'", "stride >= 1"}},
      {"ds_float_start", [](Ref x, Ref o) { o[pl::all] = x(pl::ds(Value(x[0]), 4)); }, {"op 'load'", "pl::ds start must be an integer scalar"}},
      {"slice_step", [](Ref x, Ref o) { o[pl::all] = x(pl::slice(0, 8, -1)); }, {"op 'load'", "slice step must be positive"}},
      {"store_oob", [](Ref x, Ref) { x[9] = Value(x[0]); }, {"op 'store'", "index 9 is out of bounds for dimension 0 of ref x0"}},
      {"view_oob", [](Ref x, Ref o) { o[pl::all] = x.at(pl::slice(2, 6))[4]; }, {"op 'load'", "index 4 is out of bounds", "(4,)"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string msg = error_message([&] { run_kernel(c.kernel, ShapeDtype({}, f32), {.name = c.name}, kX8); });
    EXPECT_THAT(msg, HasSubstr("pallas_call '" + c.name + "'"));
    for (const std::string& p : c.parts) EXPECT_THAT(msg, HasSubstr(p));
  }
}

TEST(OpErrors, NoneRef) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref y, Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; }, ShapeDtype({8}, f32),
                           {.name = "none_ref"}, kX8, Array());
              }),
              AllOf(HasSubstr("pallas_call 'none_ref'"), HasSubstr("the ref is None")));
}

TEST(OpErrors, ProgramIdAxisOutsideTheGrid) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref o) { o[pl::all] = pl::program_id(1); }, ShapeDtype({}, i32), {.name = "pid_axis"});
              }),
              AllOf(HasSubstr("pallas_call 'pid_axis'"), HasSubstr("op 'program_id'"), HasSubstr("axis 1 is outside the grid of rank 0")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref o) { o[pl::all] = pl::num_programs(-1); }, ShapeDtype({}, i32), {.grid = {2}, .name = "np_axis"});
              }),
              AllOf(HasSubstr("pallas_call 'np_axis'"), HasSubstr("op 'num_programs'"), HasSubstr("axis -1")));
}

// ---------------------------------------------------------------------------------------------
// Control flow.

TEST(OpErrors, ForiLoop) {
  EXPECT_THAT(error_message([] {
                run_kernel(
                    [](Ref x, Ref o) {
                      o[pl::all] = pl::fori_loop(0, 4, [&](Value, Value c) { return c.astype(i32); }, Value(x[pl::all]));
                    },
                    ShapeDtype({8}, f32), {.name = "fori_type"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'fori_type'"), HasSubstr("op 'fori_loop'"),
                    HasSubstr("body must return the carry's types"), HasSubstr("f32[8]"), HasSubstr("i32[8]")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = pl::fori_loop(0, Value(x[0]), [&](Value, Value c) { return c; }, Value(0.0f)); },
                           ShapeDtype({}, f32), {.name = "fori_bounds"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'fori_bounds'"), HasSubstr("op 'fori_loop'"), HasSubstr("bounds must be integers, not float32")));
}

TEST(OpErrors, WhileLoop) {
  EXPECT_THAT(error_message([] {
                run_kernel(
                    [](Ref x, Ref o) {
                      o[pl::all] = pl::while_loop([](Value c) { return c; }, [](Value c) { return c - 1; }, Value(x[0]));
                    },
                    ShapeDtype({}, i32), {.name = "while_cond"}, kI8);
              }),
              AllOf(HasSubstr("pallas_call 'while_cond'"), HasSubstr("op 'while_loop'"), HasSubstr("cond_fun must return one bool scalar")));
  EXPECT_THAT(error_message([] {
                run_kernel(
                    [](Ref x, Ref o) {
                      o[pl::all] = pl::while_loop([](Value c) { return c > 0; }, [](Value c) { return (c - 1).astype(f32); }, Value(x[0]));
                    },
                    ShapeDtype({}, i32), {.name = "while_body"}, kI8);
              }),
              AllOf(HasSubstr("pallas_call 'while_body'"), HasSubstr("op 'while_loop'"), HasSubstr("body_fun must return the carry's types")));
}

TEST(OpErrors, Cond) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = pl::cond(Value(x[0]) > 0, [&] { return Value(x[0]); }, [&] { return Value(x[1]).astype(i32); }); },
                           ShapeDtype({}, f32), {.name = "cond_types"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'cond_types'"), HasSubstr("op 'cond'"), HasSubstr("both branches must return values of the same types")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { pl::when(Value(x[0]), [&] { o[pl::all] = Value(x[0]); }); }, ShapeDtype({}, f32),
                           {.name = "cond_pred"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'cond_pred'"), HasSubstr("op 'cond'"), HasSubstr("predicate must be a bool scalar")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { pl::when(x[pl::all] > 0, [&] { o[pl::all] = Value(x[0]); }); }, ShapeDtype({}, f32),
                           {.name = "cond_vector"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'cond_vector'"), HasSubstr("op 'cond'")));
}

TEST(OpErrors, DebugPrintPlaceholders) {
  EXPECT_THAT(error_message([] {
                run_kernel(
                    [](Ref x, Ref o) {
                      pl::debug_print("x {} y {}", Value(x[0]));
                      o[pl::all] = Value(x[0]);
                    },
                    ShapeDtype({}, f32), {.name = "print"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'print'"), HasSubstr("op 'debug_print'"), HasSubstr("2 {} placeholders for 1 values")));
}

// ---------------------------------------------------------------------------------------------
// Values where they cannot be.

TEST(OpErrors, KernelCapturesAnArray) {
  const Array captured = kX8;
  EXPECT_THAT(error_message([&] {
                run_kernel([captured](Ref x, Ref o) { o[pl::all] = x[pl::all] + captured; }, ShapeDtype({8}, f32),
                           {.name = "capture"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'capture'"), HasSubstr("op 'capture'"), HasSubstr("captures an array of shape (8,)"),
                    HasSubstr("float32"), HasSubstr("pass it to the call as an input")));
}

TEST(OpErrors, ValueLeakedOutOfALoopBody) {
  EXPECT_THAT(error_message([] {
                run_kernel(
                    [](Ref x, Ref o) {
                      Value leaked;
                      Value r = pl::fori_loop(0, 3, [&](Value i, Value c) {
                        leaked = c * 2.0f;
                        (void)i;
                        return c + 1.0f;
                      }, Value(x[pl::all]));
                      o[pl::all] = r + leaked;
                    },
                    ShapeDtype({8}, f32), {.name = "leak"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'leak'"), HasSubstr("op 'add'"),
                    HasSubstr("made inside a loop or cond body after that body ended")));
  EXPECT_THAT(error_message([] {
                run_kernel(
                    [](Ref x, Ref o) {
                      Value leaked;
                      pl::when(Value(x[0]) > 0, [&] { leaked = Value(x[1]); });
                      o[pl::all] = leaked;
                    },
                    ShapeDtype({}, f32), {.name = "leak_cond"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'leak_cond'"), HasSubstr("op 'store'"), HasSubstr("after that body ended")));
}

TEST(OpErrors, ValueKeptFromAnotherKernel) {
  auto kept = std::make_shared<Value>();
  run_kernel([kept](Ref x, Ref o) { *kept = x[pl::all]; o[pl::all] = *kept; }, ShapeDtype({8}, f32), {.name = "first"}, kX8);
  EXPECT_THAT(error_message([&] {
                run_kernel([kept](Ref x, Ref o) { o[pl::all] = x[pl::all] + *kept; }, ShapeDtype({8}, f32), {.name = "second"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'second'"), HasSubstr("another kernel's trace")));
}

TEST(OpErrors, EmptyValue) {
  EXPECT_THAT(error_message([] {
                run_kernel(
                    [](Ref x, Ref o) {
                      Value never;
                      o[pl::all] = x[pl::all] * never;
                    },
                    ShapeDtype({8}, f32), {.name = "empty"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'empty'"), HasSubstr("op 'mul'"), HasSubstr("empty Value")));
}

// A trace abandoned by an Error (here deep inside nested control flow) or by a foreign exception
// leaves nothing behind: the next kernel traces normally, and kernel ops outside a kernel still
// say so.
TEST(OpErrors, AbandonedTraceLeavesNoState) {
  EXPECT_THAT(error_message([] {
                run_kernel(
                    [](Ref x, Ref o) {
                      o[pl::all] = pl::fori_loop(0, 2, [&](Value, Value c) {
                        return pl::cond(c.sum() > 0, [&] { return c + x[pl::all]; }, [&] { return c * Value(x[pl::all]).reshape({2, 4}); });
                      }, Value(x[pl::all]));
                    },
                    ShapeDtype({8}, f32), {.name = "deep"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'deep'"), HasSubstr("op 'mul'")));
  EXPECT_THROW(run_kernel([](Ref x, Ref o) {
                 pl::fori_loop(0, 2, [&](Value) { throw std::runtime_error("user code failed"); });
                 o[pl::all] = x[pl::all];
               }, ShapeDtype({8}, f32), {.name = "throws"}, kX8),
               std::runtime_error);
  Array o = run_kernel([](Ref x, Ref out) { out[pl::all] = x[pl::all] * 2.0f; }, ShapeDtype({8}, f32), {.name = "after"}, kX8);
  EXPECT_EQ(o.get(3), 2 * kX8.get(3));
  EXPECT_THAT(error_message([] { pl::program_id(0); }), HasSubstr("outside a kernel"));
}

}  // namespace
}  // namespace palladium::etest
