// The Builder's shape and dtype rules, used directly: result types of every op family, the
// identities it folds (cast/broadcast/reshape/transpose to the same type), and the user Errors
// (naming the kernel and the op) for operands that break a rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "ir/builder.h"
#include "palladium/error.h"
#include "tests/support/test_support.h"

namespace palladium::ir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using test_support::error_message;

class BuilderTest : public ::testing::Test {
 protected:
  BuilderTest() : b(k) {
    k.name = "rules";
    k.grid = {2, 3};
  }
  Type type(ValueId v) const { return k.type(v); }
  ValueId c(DType t, Shape s) { return b.constant(t, std::move(s), 1.0); }
  // Adds a ref parameter (an input of `block` shape, no squeezed dimensions) and returns its index.
  int ref(DType t, Shape block, bool is_output = false) {
    RefParam p;
    p.name = "x" + std::to_string(k.refs.size());
    p.is_output = is_output;
    p.dtype = t;
    p.array_shape = block;
    p.block_shape = block;
    p.squeezed.assign(block.size(), false);
    p.ref_shape = block;
    k.refs.push_back(p);
    return static_cast<int>(k.refs.size() - 1);
  }
  std::vector<ValueId> zeros(size_t n) {
    std::vector<ValueId> s;
    for (size_t i = 0; i < n; ++i) s.push_back(c(i32, {}));
    return s;
  }

  Kernel k;
  Builder b;
};

TEST_F(BuilderTest, LeavesAndConstants) {
  EXPECT_EQ(type(b.constant(f32, {4, 8}, 1.5)), (Type{f32, {4, 8}}));
  EXPECT_EQ(type(b.program_id(1)), (Type{i32, {}}));
  EXPECT_EQ(type(b.num_programs(0)), (Type{i32, {}}));
  EXPECT_EQ(type(b.iota(u8, {3, 5}, 1)), (Type{u8, {3, 5}}));
  // Constants are stored rounded to their dtype.
  ValueId h = b.constant(bf16, {}, 0.3);
  EXPECT_EQ(k.body.body.empty(), true);  // the body moves into the kernel at finish()
  b.finish();
  const Inst* found = nullptr;
  for (const Inst& in : k.body.body)
    if (!in.results.empty() && in.results[0] == h) found = &in;
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->f, 0.30078125);
  EXPECT_THAT(error_message([&] { b.program_id(2); }),
              AllOf(HasSubstr("pallas_call 'rules', op 'program_id'"), HasSubstr("axis 2 is outside the grid of rank 2")));
  EXPECT_THAT(error_message([&] { b.iota(f32, {4}, 1); }), AllOf(HasSubstr("op 'iota'"), HasSubstr("dimension 1 is outside shape (4,)")));
}

TEST_F(BuilderTest, ElementwiseRules) {
  ValueId a = c(f32, {4, 8}), a2 = c(f32, {4, 8}), t = c(f32, {8, 4}), i = c(i32, {4, 8}), p = c(bool_, {4, 8});
  EXPECT_EQ(type(b.binary(Op::Add, a, a2)), (Type{f32, {4, 8}}));
  EXPECT_EQ(type(b.compare(Op::Le, a, a2)), (Type{bool_, {4, 8}}));
  EXPECT_EQ(type(b.unary(Op::Exp, a)), (Type{f32, {4, 8}}));
  EXPECT_EQ(type(b.unary(Op::Not, i)), (Type{i32, {4, 8}}));
  EXPECT_EQ(type(b.select(p, i, i)), (Type{i32, {4, 8}}));
  // Strict: the front end broadcasts and promotes first, so the builder rejects mismatches.
  EXPECT_THAT(error_message([&] { b.binary(Op::Add, a, t); }),
              AllOf(HasSubstr("pallas_call 'rules', op 'add'"), HasSubstr("shapes (4, 8) and (8, 4) differ")));
  EXPECT_THAT(error_message([&] { b.binary(Op::Sub, a, i); }), AllOf(HasSubstr("op 'sub'"), HasSubstr("dtypes float32 and int32 differ")));
  EXPECT_THAT(error_message([&] { b.compare(Op::Eq, a, t); }), AllOf(HasSubstr("op 'eq'"), HasSubstr("differ")));
  EXPECT_THAT(error_message([&] { b.binary(Op::Xor, a, a2); }), AllOf(HasSubstr("op 'xor'"), HasSubstr("bool or integer")));
  EXPECT_THAT(error_message([&] { b.binary(Op::Pow, i, i); }), AllOf(HasSubstr("op 'pow'"), HasSubstr("floating-point")));
  EXPECT_THAT(error_message([&] { b.binary(Op::Max, p, p); }), AllOf(HasSubstr("op 'max'"), HasSubstr("numeric")));
  EXPECT_THAT(error_message([&] { b.unary(Op::Log, i); }), AllOf(HasSubstr("op 'log'"), HasSubstr("floating-point operand, not int32")));
  EXPECT_THAT(error_message([&] { b.unary(Op::Not, a); }), AllOf(HasSubstr("op 'not'"), HasSubstr("bool or integer")));
  EXPECT_THAT(error_message([&] { b.unary(Op::Abs, p); }), AllOf(HasSubstr("op 'abs'"), HasSubstr("numeric")));
  EXPECT_THAT(error_message([&] { b.select(i, a, a); }), AllOf(HasSubstr("op 'select'"), HasSubstr("condition must be bool")));
  EXPECT_THAT(error_message([&] { b.select(p, a, i); }), AllOf(HasSubstr("op 'select'"), HasSubstr("branch dtypes")));
  EXPECT_THAT(error_message([&] { b.select(p, t, t); }), AllOf(HasSubstr("op 'select'"), HasSubstr("shapes")));
}

TEST_F(BuilderTest, CastAndLayoutRules) {
  ValueId a = c(f32, {4, 8}), row = c(f32, {8}), col = c(f32, {4, 1});
  EXPECT_EQ(b.cast(a, f32), a);  // identities fold
  EXPECT_EQ(type(b.cast(a, bf16)), (Type{bf16, {4, 8}}));
  EXPECT_EQ(type(b.broadcast(row, {4, 8}, {1})), (Type{f32, {4, 8}}));
  EXPECT_EQ(type(b.broadcast(col, {4, 8}, {0, 1})), (Type{f32, {4, 8}}));
  EXPECT_EQ(type(b.broadcast(row, {8, 3}, {0})), (Type{f32, {8, 3}}));
  EXPECT_EQ(b.broadcast(a, {4, 8}, {0, 1}), a);
  EXPECT_EQ(type(b.reshape(a, {2, 16})), (Type{f32, {2, 16}}));
  EXPECT_EQ(b.reshape(a, {4, 8}), a);
  EXPECT_EQ(type(b.transpose(c(f32, {2, 3, 4}), {2, 0, 1})), (Type{f32, {4, 2, 3}}));
  EXPECT_EQ(b.transpose(a, {0, 1}), a);
  EXPECT_THAT(error_message([&] { b.broadcast(row, {4, 8}, {0}); }),
              AllOf(HasSubstr("op 'broadcast'"), HasSubstr("cannot broadcast shape (8,) to (4, 8)")));
  EXPECT_THAT(error_message([&] { b.broadcast(c(f32, {1, 1}), {4, 8}, {1, 0}); }),
              AllOf(HasSubstr("op 'broadcast'"), HasSubstr("dimension map [1, 0] is not increasing")));
  EXPECT_THAT(error_message([&] { b.broadcast(col, {4, 8}, {0}); }), AllOf(HasSubstr("op 'broadcast'"), HasSubstr("one target dimension per operand dimension")));
  EXPECT_THAT(error_message([&] { b.reshape(a, {5, 7}); }), AllOf(HasSubstr("op 'reshape'"), HasSubstr("element counts differ")));
  EXPECT_THAT(error_message([&] { b.transpose(a, {1, 1}); }), AllOf(HasSubstr("op 'transpose'"), HasSubstr("[1, 1] does not fit rank 2")));
  EXPECT_THAT(error_message([&] { b.transpose(a, {0}); }), AllOf(HasSubstr("op 'transpose'"), HasSubstr("does not fit rank 2")));
}

TEST_F(BuilderTest, ReductionRules) {
  ValueId a = c(bf16, {3, 4, 5});
  EXPECT_EQ(type(b.reduce(Op::ReduceSum, a, 1)), (Type{bf16, {3, 5}}));
  EXPECT_EQ(type(b.reduce(Op::ReduceMax, a, 2)), (Type{bf16, {3, 4}}));
  EXPECT_EQ(type(b.reduce(Op::ArgMin, a, 0)), (Type{i32, {4, 5}}));
  EXPECT_EQ(type(b.cumsum(a, 2)), (Type{bf16, {3, 4, 5}}));
  EXPECT_THAT(error_message([&] { b.reduce(Op::ReduceMin, a, 3); }), AllOf(HasSubstr("op 'reduce_min'"), HasSubstr("axis 3 is outside shape (3, 4, 5)")));
  EXPECT_THAT(error_message([&] { b.reduce(Op::ReduceSum, c(bool_, {4}), 0); }), AllOf(HasSubstr("op 'reduce_sum'"), HasSubstr("not bool")));
  EXPECT_THAT(error_message([&] { b.cumsum(a, -1); }), AllOf(HasSubstr("op 'cumsum'"), HasSubstr("axis -1")));
}

TEST_F(BuilderTest, DotRules) {
  ValueId a = c(f32, {4, 8}), bt = c(f32, {3, 8}), bn = c(f32, {8, 3});
  EXPECT_EQ(type(b.dot(a, bn, false, false)), (Type{f32, {4, 3}}));
  EXPECT_EQ(type(b.dot(a, bt, false, true)), (Type{f32, {4, 3}}));
  EXPECT_EQ(type(b.dot(a, a, true, false)), (Type{f32, {8, 8}}));
  EXPECT_EQ(type(b.dot(a, a, false, true)), (Type{f32, {4, 4}}));
  // Accumulation (result) dtypes.
  EXPECT_EQ(Builder::dot_result_dtype(f16), f32);
  EXPECT_EQ(Builder::dot_result_dtype(bf16), f32);
  EXPECT_EQ(Builder::dot_result_dtype(f32), f32);
  EXPECT_EQ(Builder::dot_result_dtype(f64), f64);
  EXPECT_EQ(Builder::dot_result_dtype(i8), i32);
  EXPECT_EQ(Builder::dot_result_dtype(u8), i32);
  EXPECT_EQ(Builder::dot_result_dtype(i16), i32);
  EXPECT_EQ(Builder::dot_result_dtype(i32), i32);
  EXPECT_EQ(Builder::dot_result_dtype(i64), i64);
  EXPECT_EQ(type(b.dot(c(i8, {2, 5}), c(i8, {5, 6}), false, false)), (Type{i32, {2, 6}}));
  EXPECT_EQ(type(b.dot(c(bf16, {2, 5}), c(bf16, {6, 5}), false, true)), (Type{f32, {2, 6}}));
  EXPECT_THAT(error_message([&] { b.dot(a, a, false, false); }),
              AllOf(HasSubstr("op 'dot'"), HasSubstr("contracting dimensions differ: (4, 8) @ (4, 8)")));
  EXPECT_THAT(error_message([&] { b.dot(a, bt, true, true); }), AllOf(HasSubstr("op 'dot'"), HasSubstr("(4, 8)^T @ (3, 8)^T")));
  EXPECT_THAT(error_message([&] { b.dot(c(f32, {8}), bn, false, false); }), AllOf(HasSubstr("op 'dot'"), HasSubstr("rank-2")));
  EXPECT_THAT(error_message([&] { b.dot(a, c(bf16, {8, 3}), false, false); }), AllOf(HasSubstr("op 'dot'"), HasSubstr("dtypes float32 and bfloat16 differ")));
  EXPECT_THAT(error_message([&] { b.dot(c(u32, {2, 2}), c(u32, {2, 2}), false, false); }), AllOf(HasSubstr("op 'dot'"), HasSubstr("uint32")));
  EXPECT_THAT(error_message([&] { b.dot(c(bool_, {2, 2}), c(bool_, {2, 2}), false, false); }), AllOf(HasSubstr("op 'dot'"), HasSubstr("bool")));
}

TEST_F(BuilderTest, MemoryRules) {
  const int x = ref(f32, {8, 16}, true), small = ref(i8, {4}, true), input = ref(f32, {4});
  // A slice keeps its size, a scalar index drops the dimension.
  ValueId v = b.load(x, {IndexEntry{false, 4, 2}, IndexEntry{false, 16, 1}}, zeros(2), -1, -1);
  EXPECT_EQ(type(v), (Type{f32, {4, 16}}));
  ValueId row = b.load(x, {IndexEntry{true, 1, 1}, IndexEntry{false, 16, 1}}, zeros(2), -1, -1);
  EXPECT_EQ(type(row), (Type{f32, {16}}));
  ValueId mask = c(bool_, {16}), other = c(f32, {16});
  EXPECT_EQ(type(b.load(x, {IndexEntry{true, 1, 1}, IndexEntry{false, 16, 1}}, zeros(2), mask, other)), (Type{f32, {16}}));
  b.store(x, {IndexEntry{true, 1, 1}, IndexEntry{false, 16, 1}}, zeros(2), row, mask);
  EXPECT_EQ(type(b.atomic(Op::AtomicAdd, x, {IndexEntry{true, 1, 1}, IndexEntry{false, 16, 1}}, zeros(2), row, -1)), (Type{f32, {16}}));

  EXPECT_THAT(error_message([&] { b.load(x, {IndexEntry{false, 16, 1}}, zeros(1), -1, -1); }),
              AllOf(HasSubstr("pallas_call 'rules', op 'load'"), HasSubstr("ref x0 of shape (8, 16) is indexed with 1 indices")));
  EXPECT_THAT(error_message([&] { b.load(x, {IndexEntry{true, 1, 1}, IndexEntry{true, 1, 1}}, {c(i32, {}), c(f32, {})}, -1, -1); }),
              AllOf(HasSubstr("op 'load'"), HasSubstr("index 1 of ref x0 must be an integer scalar, got f32[]")));
  EXPECT_THAT(error_message([&] { b.load(x, {IndexEntry{false, 4, 0}, IndexEntry{true, 1, 1}}, zeros(2), -1, -1); }),
              AllOf(HasSubstr("op 'load'"), HasSubstr("stride 0")));
  EXPECT_THAT(error_message([&] { b.load(x, {IndexEntry{true, 1, 1}, IndexEntry{false, 16, 1}}, zeros(2), c(bool_, {8}), -1); }),
              AllOf(HasSubstr("op 'load'"), HasSubstr("mask must be bool of shape (16,), got i1[8]")));
  EXPECT_THAT(error_message([&] { b.load(x, {IndexEntry{true, 1, 1}, IndexEntry{false, 16, 1}}, zeros(2), mask, c(i32, {16})); }),
              AllOf(HasSubstr("op 'load'"), HasSubstr("other must be f32[16], got i32[16]")));
  EXPECT_THAT(error_message([&] { b.store(x, {IndexEntry{true, 1, 1}, IndexEntry{false, 16, 1}}, zeros(2), c(f32, {8}), -1); }),
              AllOf(HasSubstr("op 'store'"), HasSubstr("value f32[8] does not match the indexed ref slot f32[16]")));
  EXPECT_THAT(error_message([&] { b.atomic(Op::AtomicMax, small, {IndexEntry{false, 4, 1}}, zeros(1), c(i8, {4}), -1); }),
              AllOf(HasSubstr("op 'atomic_max'"), HasSubstr("does not take int8 refs")));
  EXPECT_THAT(error_message([&] { b.load(7, {}, {}, -1, -1); }), AllOf(HasSubstr("op 'load'"), HasSubstr("refers to no ref parameter")));
  // Inputs are read-only.
  const ValueId four = c(f32, {4});
  EXPECT_EQ(type(b.load(input, {IndexEntry{false, 4, 1}}, zeros(1), -1, -1)), (Type{f32, {4}}));
  EXPECT_THAT(error_message([&] { b.store(input, {IndexEntry{false, 4, 1}}, zeros(1), four, -1); }),
              HasSubstr("pallas_call 'rules', op 'store': writes to input ref x2; inputs are read-only"));
  EXPECT_THAT(error_message([&] { b.atomic(Op::AtomicMin, input, {IndexEntry{false, 4, 1}}, zeros(1), four, -1); }),
              HasSubstr("pallas_call 'rules', op 'atomic_min': writes to input ref x2; inputs are read-only"));
}

TEST_F(BuilderTest, RegionsAndVisibility) {
  ValueId lo = c(i32, {}), hi = c(i32, {}), init = c(f32, {4});
  std::vector<ValueId> args = b.open_region({Type{i32, {}}, Type{f32, {4}}});
  ASSERT_EQ(args.size(), 2u);
  ValueId inside = b.binary(Op::Add, args[1], args[1]);
  Region body = b.close_region({inside});
  std::vector<ValueId> out = b.emit_for(lo, hi, {init}, std::move(body));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(type(out[0]), (Type{f32, {4}}));
  // A value of a closed region cannot be used any more.
  EXPECT_THAT(error_message([&] { b.binary(Op::Mul, inside, out[0]); }),
              AllOf(HasSubstr("op 'mul'"), HasSubstr("uses a Value (%" + std::to_string(inside) + ") made inside a loop or cond body")));
  // Carry types must match what the body yields.
  args = b.open_region({Type{i32, {}}, Type{f32, {4}}});
  Region bad = b.close_region({b.cast(args[1], f16)});
  EXPECT_THAT(error_message([&] { b.emit_for(lo, hi, {init}, std::move(bad)); }),
              AllOf(HasSubstr("op 'fori_loop'"), HasSubstr("body must return the carry's types (f32[4] ) but returned (f16[4] )")));
  args = b.open_region({});
  Region float_bounds = b.close_region({});
  EXPECT_THAT(error_message([&] { b.emit_for(c(f32, {}), hi, {}, std::move(float_bounds)); }),
              AllOf(HasSubstr("op 'fori_loop'"), HasSubstr("bounds must be integer scalars")));
  // while: the cond region yields one bool scalar; cond: both branches yield the same types.
  b.open_region({Type{f32, {4}}});
  Region cond = b.close_region({c(i32, {})});
  b.open_region({Type{f32, {4}}});
  Region wbody = b.close_region({c(f32, {4})});
  EXPECT_THAT(error_message([&] { b.emit_while({init}, std::move(cond), std::move(wbody)); }),
              AllOf(HasSubstr("op 'while_loop'"), HasSubstr("cond_fun must return one bool scalar")));
  b.open_region({});
  Region then_r = b.close_region({c(f32, {})});
  b.open_region({});
  Region else_r = b.close_region({c(i32, {})});
  EXPECT_THAT(error_message([&] { b.emit_if(c(bool_, {}), std::move(then_r), std::move(else_r)); }),
              AllOf(HasSubstr("op 'cond'"), HasSubstr("same types")));
  b.open_region({});
  Region t2 = b.close_region({});
  b.open_region({});
  Region e2 = b.close_region({});
  EXPECT_THAT(error_message([&] { b.emit_if(c(bool_, {2}), std::move(t2), std::move(e2)); }),
              AllOf(HasSubstr("op 'cond'"), HasSubstr("predicate must be a bool scalar, got i1[2]")));
  b.finish();
  EXPECT_NO_THROW(verify(k));
}

}  // namespace
}  // namespace palladium::ir
