// Threefry-2x32 random numbers: the published known answers, fixed first values (so that results
// never silently change between versions or machines), and statistics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "palladium/random.h"
#include "tests/support/test_support.h"

namespace palladium {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using test_support::error_message;
namespace rnd = palladium::random;

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

TEST(Threefry, KnownAnswerVectors) {
  // Random123's kat_vectors for threefry2x32_20 (also used by JAX's tests).
  EXPECT_THAT(rnd::threefry2x32({0, 0}, 0, 0), ElementsAre(0x6b200159u, 0x99ba4efeu));
  EXPECT_THAT(rnd::threefry2x32({0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu),
              ElementsAre(0x1cb996fcu, 0xbb002be7u));
  EXPECT_THAT(rnd::threefry2x32({0x13198a2eu, 0x03707344u}, 0x243f6a88u, 0x85a308d3u),
              ElementsAre(0xc4923a9cu, 0x483df7a0u));
}

TEST(Random, KeyIsHighAndLowWordsOfTheSeed) {
  EXPECT_EQ(rnd::key(42), (rnd::Key{0, 42}));
  EXPECT_EQ(rnd::key(0x100000002ull), (rnd::Key{1, 2}));
}

TEST(Random, FixedFirstValues) {
  const rnd::Key k = rnd::key(42);
  const std::vector<rnd::Key> keys = rnd::split(k);
  EXPECT_EQ(keys[0], (rnd::Key{0x6d3e048fu, 0x1022172du}));
  EXPECT_EQ(keys[1], (rnd::Key{0x03d7b32du, 0xadd083f4u}));
  EXPECT_EQ(rnd::fold_in(k, 7), (rnd::Key{0x97d0552fu, 0x51bf719fu}));
  EXPECT_THAT(rnd::bits(k, 4), ElementsAre(0x7d1c13a2u, 0xae0730d9u, 0x9dc3f9f9u, 0x8f9ec1d7u));
  EXPECT_THAT(rnd::uniform(k, {4}).to_doubles(),
              ElementsAre(0.48870956897735596, 0.67979717254638672, 0.6162714958190918, 0.56101608276367188));
  EXPECT_THAT(rnd::uniform(k, {4}, f64).to_doubles(),
              ElementsAre(0.42672756664990907, 0.015010069515314584, 0.57414441789953519, 0.72981889690463086));
  EXPECT_THAT(rnd::uniform(k, {4}, f16).to_doubles(), ElementsAre(0.076171875, 0.1904296875, 0.9755859375, 0.7568359375));
  EXPECT_THAT(rnd::uniform(k, {4}, bf16).to_doubles(), ElementsAre(0.0703125, 0.1875, 0.96875, 0.75));
  EXPECT_THAT(rnd::uniform(k, {4}, i32, -5, 5).to_vector<int32_t>(), ElementsAre(-4, 3, 0, 0));
  EXPECT_THAT(rnd::normal(k, {4}).to_doubles(), ElementsAre(-0.036289151757955551, -0.96229684352874756,
                                                             2.3053078651428223, -0.45952475070953369));
  EXPECT_THAT(rnd::normal(k, {4}, f64).to_doubles(), ElementsAre(-0.036289152497982397, -0.96229681706510839,
                                                                  2.305307837828511, -0.45952475244594959));
}

// Large draws are split over the CPU thread pool: two sizes split differently, and the shorter one
// is a prefix of the longer one (normal, uniform float and integer); a large draw begins with the
// fixed first values above.
TEST(Random, LargeDrawsDoNotDependOnTheirSplit) {
  const rnd::Key k = rnd::key(19);
  const int64_t n = 300000;
  auto same_prefix = [](const Array& shorter, const Array& longer) {
    const std::vector<double> s = shorter.to_doubles(), l = longer.to_doubles();
    return s.size() < l.size() && std::equal(s.begin(), s.end(), l.begin());
  };
  EXPECT_TRUE(same_prefix(rnd::normal(k, {n}), rnd::normal(k, {n + 7})));
  EXPECT_TRUE(same_prefix(rnd::uniform(k, {n}), rnd::uniform(k, {n + 7})));
  EXPECT_TRUE(same_prefix(rnd::uniform(k, {n}, i32, -9, 9), rnd::uniform(k, {n + 7}, i32, -9, 9)));
  const std::vector<double> first = rnd::normal(rnd::key(42), {n}).to_doubles();
  EXPECT_THAT(std::vector<double>(first.begin(), first.begin() + 4),
              ElementsAre(-0.036289151757955551, -0.96229684352874756, 2.3053078651428223, -0.45952475070953369));
}

TEST(Random, SameKeySameNumbersAndPrefixStable) {
  const rnd::Key k = rnd::key(7);
  EXPECT_TRUE(rnd::uniform(k, {100}).to_doubles() == rnd::uniform(k, {100}).to_doubles());
  const std::vector<uint32_t> few = rnd::bits(k, 5), many = rnd::bits(k, 50);
  EXPECT_TRUE(std::equal(few.begin(), few.end(), many.begin()));
  // The shape does not matter, only the element count and order.
  EXPECT_TRUE(rnd::normal(k, {6, 7}).to_doubles() == rnd::normal(k, {42}).to_doubles());
  const std::vector<rnd::Key> two = rnd::split(k, 2), three = rnd::split(k, 3);
  EXPECT_EQ(two[0], three[0]);
  EXPECT_EQ(two[1], three[1]);
}

TEST(Random, UniformStaysInRange) {
  const rnd::Key k = rnd::key(3);
  for (DType t : {f16, bf16, f32, f64}) {
    const std::vector<double> v = rnd::uniform(k, {100000}, t, -2.0, 3.0).to_doubles();
    EXPECT_GE(*std::min_element(v.begin(), v.end()), -2.0) << dtype_name(t);
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 3.0) << dtype_name(t);
    EXPECT_NEAR(mean(v), 0.5, 0.03) << dtype_name(t);
  }
  // A range whose rounding would reach hi in float16 is still kept below it.
  const std::vector<double> tight = rnd::uniform(k, {100000}, f16, 1000.0, 1001.0).to_doubles();
  EXPECT_LT(*std::max_element(tight.begin(), tight.end()), 1001.0);
}

TEST(Random, UniformIntegersCoverTheRange) {
  const std::vector<int64_t> v = rnd::uniform(rnd::key(5), {100000}, i64, -5, 5).to_vector<int64_t>();
  std::vector<int> counts(10, 0);
  for (int64_t x : v) {
    ASSERT_GE(x, -5);
    ASSERT_LT(x, 5);
    ++counts[static_cast<size_t>(x + 5)];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
  const std::vector<uint8_t> bytes = rnd::uniform(rnd::key(5), {1000}, u8, 0, 256).to_vector<uint8_t>();
  EXPECT_GT(std::set<uint8_t>(bytes.begin(), bytes.end()).size(), 200u);
}

TEST(Random, NormalStatistics) {
  for (uint64_t seed : {0ull, 1ull, 2ull}) {
    for (DType t : {f32, f64}) {
      const std::vector<double> v = rnd::normal(rnd::key(seed), {100000}, t).to_doubles();
      // Standard errors: 0.0032 for the mean, 0.0022 for the standard deviation.
      EXPECT_NEAR(mean(v), 0.0, 0.015) << seed << " " << dtype_name(t);
      EXPECT_NEAR(stddev(v), 1.0, 0.01) << seed << " " << dtype_name(t);
      int beyond_two_sigma = 0;
      for (double x : v) beyond_two_sigma += std::fabs(x) > 2.0;
      EXPECT_NEAR(beyond_two_sigma / 1e5, 0.0455, 0.004);
    }
  }
}

TEST(Random, SplitStreamsAreIndependent) {
  const std::vector<rnd::Key> keys = rnd::split(rnd::key(11), 4);
  const std::set<std::pair<uint32_t, uint32_t>> distinct = {
      {keys[0].k0, keys[0].k1}, {keys[1].k0, keys[1].k1}, {keys[2].k0, keys[2].k1}, {keys[3].k0, keys[3].k1}};
  EXPECT_EQ(distinct.size(), 4u);
  const std::vector<double> a = rnd::normal(keys[0], {100000}).to_doubles();
  const std::vector<double> b = rnd::normal(keys[1], {100000}).to_doubles();
  const std::vector<double> parent = rnd::normal(rnd::key(11), {100000}).to_doubles();
  auto correlation = [](const std::vector<double>& x, const std::vector<double>& y) {
    const double mx = mean(x), my = mean(y);
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      sxy += (x[i] - mx) * (y[i] - my);
      sxx += (x[i] - mx) * (x[i] - mx);
      syy += (y[i] - my) * (y[i] - my);
    }
    return sxy / std::sqrt(sxx * syy);
  };
  EXPECT_LT(std::fabs(correlation(a, b)), 0.015);
  EXPECT_LT(std::fabs(correlation(a, parent)), 0.015);
  EXPECT_NE(rnd::fold_in(rnd::key(11), 0), rnd::fold_in(rnd::key(11), 1));
}

TEST(Random, Errors) {
  const rnd::Key k = rnd::key(0);
  EXPECT_THAT(error_message([&] { rnd::uniform(k, {2}, f32, 1.0, 1.0); }), HasSubstr("random.uniform: need finite lo < hi"));
  EXPECT_THAT(error_message([&] { rnd::uniform(k, {2}, i8, 0, 300); }), HasSubstr("does not fit in int8"));
  EXPECT_THAT(error_message([&] { rnd::uniform(k, {2}, i32, 0.5, 3); }), HasSubstr("integral bounds"));
  EXPECT_THAT(error_message([&] { rnd::normal(k, {2}, i32); }), HasSubstr("random.normal: needs a float dtype"));
  EXPECT_THAT(error_message([&] { rnd::normal(k, {-2}); }), HasSubstr("negative dimension"));
}

}  // namespace
}  // namespace palladium
