// Reference host ops: broadcasting, integer exactness, matmul shapes, layout ops and comparisons.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "palladium/host_ops.h"
#include "palladium/random.h"
#include "tests/support/test_support.h"

namespace palladium {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using test_support::error_message;

// Operands of one shape go element by element over the CPU thread pool; the same values as the
// broadcasting walk (a leading unit axis makes the shapes differ), for float and integer results,
// and astype over threads as element by element.
TEST(HostOps, LargeSameShapeOperandsMatchTheBroadcastingWalk) {
  const int64_t n = (int64_t{1} << 19) + 7;
  const std::vector<random::Key> keys = random::split(random::key(41), 3);
  const Array x = random::normal(keys[0], {n}), y = random::normal(keys[1], {n});
  EXPECT_TRUE(array_equal(add(x, y), add(x.reshape({1, n}), y).reshape({n})));
  EXPECT_TRUE(array_equal(multiply(x, y), multiply(x.reshape({1, n}), y).reshape({n})));
  const Array i = random::uniform(keys[2], {n}, i32, -1000, 1000);
  EXPECT_TRUE(array_equal(subtract(i, i.astype(i64)), subtract(i.reshape({1, n}), i.astype(i64)).reshape({n})));
  const Array wide = x.astype(f64);
  for (int64_t k : {int64_t{0}, n / 2 + 3, n - 1}) EXPECT_EQ(wide.get(k), static_cast<double>(x.to_vector<float>()[k]));
  EXPECT_TRUE(array_equal(wide.astype(f32), x));
}

TEST(HostOps, ElementwiseWithBroadcasting) {
  Array a = arange(6, f32).reshape({2, 3});
  Array row = array({10.0, 20.0, 30.0});
  Array col = array({1.0, 2.0}).reshape({2, 1});
  EXPECT_THAT(add(a, row).to_vector<float>(), ElementsAre(10, 21, 32, 13, 24, 35));
  EXPECT_THAT(subtract(a, col).to_vector<float>(), ElementsAre(-1, 0, 1, 1, 2, 3));
  EXPECT_THAT(multiply(col, row).to_vector<float>(), ElementsAre(10, 20, 30, 20, 40, 60));
  EXPECT_EQ(multiply(col, row).shape(), (Shape{2, 3}));
  EXPECT_THAT(maximum(a, full({}, 2.5)).to_vector<float>(), ElementsAre(2.5, 2.5, 2.5, 3, 4, 5));
  EXPECT_EQ(add(zeros({4, 1, 3}), zeros({5, 1})).shape(), (Shape{4, 5, 3}));
  EXPECT_THAT(error_message([&] { add(a, array({1.0, 2.0})); }),
              AllOf(HasSubstr("add"), HasSubstr("(2, 3)"), HasSubstr("(2,)"), HasSubstr("broadcast")));
}

TEST(HostOps, ResultTypeIsTheFirstOperands) {
  Array r = add(array({1, 2}, i8), array({0.75, 127.0}, f32));
  EXPECT_EQ(r.dtype(), i8);
  EXPECT_THAT(r.to_vector<int8_t>(), ElementsAre(1, -127));  // 129 wraps
  Array h = multiply(array({0.1}, f16), array({3.0}, f64));
  EXPECT_EQ(h.dtype(), f16);
  EXPECT_EQ(h.get(0), round_to(f16, round_to(f16, 0.1) * 3.0));
}

TEST(HostOps, IntegerArithmeticIsExact) {
  const int64_t big = (int64_t{1} << 60) + 1;  // not representable in float64
  Array a = from_vector<int64_t>({big});
  EXPECT_EQ(add(a, from_vector<int64_t>({2})).get_int(0), big + 2);
  EXPECT_EQ(multiply(a, from_vector<int64_t>({16})).get_int(0), static_cast<int64_t>(static_cast<uint64_t>(big) * 16));
  EXPECT_EQ(subtract(array({0}, u32), array({1}, u32)).get_int(0), 4294967295);
}

TEST(HostOps, ReluAndNaN) {
  EXPECT_THAT(relu(array({-1.5, 0.0, 2.0})).to_vector<float>(), ElementsAre(0, 0, 2));
  EXPECT_THAT(relu(array({-3, 4})).to_vector<int32_t>(), ElementsAre(0, 4));
  EXPECT_TRUE(std::isnan(relu(array({NAN})).get(0)));
  EXPECT_TRUE(std::isnan(maximum(array({1.0}), array({NAN})).get(0)));
}

TEST(HostOps, Matmul) {
  Array a = arange(6, f32).reshape({2, 3});
  Array b = arange(12, f32).reshape({3, 4});
  Array c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 4}));
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(20, 23, 26, 29, 56, 68, 80, 92));
  // Batched with broadcasting: (2, 1, 2, 3) x (4, 3, 4) -> (2, 4, 2, 4).
  Array batched = matmul(stack({a, add(a, ones({}))}).reshape({2, 1, 2, 3}), stack({b, b, b, b}));
  EXPECT_EQ(batched.shape(), (Shape{2, 4, 2, 4}));
  EXPECT_EQ(batched.at({1, 3, 0, 0}), 1 * 0 + 2 * 4 + 3 * 8);
  // Vectors as NumPy: (3,) x (3, 4) -> (4,), (2, 3) x (3,) -> (2,), (3,) x (3,) -> ().
  EXPECT_EQ(matmul(array({1.0, 1.0, 1.0}), b).shape(), (Shape{4}));
  EXPECT_THAT(matmul(a, array({1.0, 0.0, 0.0})).to_vector<float>(), ElementsAre(0, 3));
  EXPECT_EQ(matmul(array({1.0, 2.0}), array({3.0, 4.0})).shape(), Shape{});
  EXPECT_EQ(matmul(array({1.0, 2.0}), array({3.0, 4.0})).get(0), 11.0);
  EXPECT_THAT(error_message([&] { matmul(a, a); }), AllOf(HasSubstr("matmul"), HasSubstr("(2, 3)")));
}

TEST(HostOps, MatmulLargeUsesThreadsCorrectly) {
  Array a = full({96, 200}, 0.5);
  Array b = full({200, 300}, 2.0);
  Array c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{96, 300}));
  EXPECT_EQ(max_abs_diff(c, full({96, 300}, 200.0)), 0.0);
}

TEST(HostOps, Transpose) {
  Array a = arange(24).reshape({2, 3, 4});
  Array t = transpose(a);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.at({3, 2, 1}), a.at({1, 2, 3}));
  Array p = transpose(a, {1, 0, 2});
  EXPECT_EQ(p.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(p.at({2, 1, 3}), a.at({1, 2, 3}));
  EXPECT_EQ(transpose(a, {-1, 0, 1}).shape(), (Shape{4, 2, 3}));
  EXPECT_THAT(error_message([&] { transpose(a, {0, 0, 1}); }), HasSubstr("repeats"));
  EXPECT_THAT(error_message([&] { transpose(a, {0, 1}); }), HasSubstr("(2, 3, 4)"));
}

TEST(HostOps, StackAndTake) {
  Array a = arange(6).reshape({2, 3});
  Array b = add(a, full({}, 10, i32));
  Array s0 = stack({a, b});
  EXPECT_EQ(s0.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(s0.at({1, 0, 2}), 12);
  Array s2 = stack({a, b}, -1);
  EXPECT_EQ(s2.shape(), (Shape{2, 3, 2}));
  EXPECT_THAT(s2.to_vector<int32_t>(), ElementsAre(0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15));
  EXPECT_TRUE(array_equal(take(s0, 1), b));
  EXPECT_THAT(take(a, 2, 1).to_vector<int32_t>(), ElementsAre(2, 5));
  EXPECT_THAT(take(a, -1, 0).to_vector<int32_t>(), ElementsAre(3, 4, 5));
  EXPECT_THAT(error_message([&] { stack({a, arange(3)}); }), AllOf(HasSubstr("stack"), HasSubstr("(3,)")));
  EXPECT_THAT(error_message([&] { take(a, 3, 1); }), AllOf(HasSubstr("index 3"), HasSubstr("(2, 3)")));
  EXPECT_THAT(error_message([&] { take(a, 0, 2); }), HasSubstr("axis 2 is out of range"));
}

TEST(HostOps, Comparisons) {
  Array ref = array({3.0, 4.0});
  EXPECT_DOUBLE_EQ(rel_error(array({3.0, 4.0}), ref), 0.0);
  EXPECT_DOUBLE_EQ(rel_error(array({3.0, 5.0}), ref), 0.2);
  EXPECT_EQ(rel_error(zeros({2}), zeros({2})), 0.0);
  EXPECT_EQ(rel_error(ones({2}), zeros({2})), std::numeric_limits<double>::infinity());
  EXPECT_EQ(max_abs_diff(array({1.0, -2.0}), array({1.5, 1.0})), 3.0);
  EXPECT_EQ(max_abs_diff(array({INFINITY}), array({INFINITY})), 0.0);
  EXPECT_TRUE(std::isnan(max_abs_diff(array({NAN}), array({1.0}))));
  EXPECT_TRUE(array_equal(arange(3), arange(3, f32)));
  EXPECT_FALSE(array_equal(arange(3), arange(4)));
  EXPECT_FALSE(array_equal(array({NAN}), array({NAN})));
  EXPECT_THAT(error_message([] { rel_error(zeros({2}), zeros({3})); }),
              AllOf(HasSubstr("rel_error"), HasSubstr("(2,)"), HasSubstr("(3,)")));
}

}  // namespace
}  // namespace palladium
