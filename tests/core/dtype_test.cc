// Element types: names, rounding to every dtype, 16-bit float encodings, integer wrapping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "palladium/dtype.h"
#include "tests/support/test_support.h"

namespace palladium {
namespace {

using ::testing::HasSubstr;
using test_support::error_message;

TEST(DType, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(bf16), "bfloat16");
  EXPECT_STREQ(dtype_name(bool_), "bool");
  EXPECT_STREQ(dtype_short_name(bool_), "i1");
  EXPECT_STREQ(dtype_short_name(f32), "f32");
  EXPECT_EQ(itemsize(bool_), 1);
  EXPECT_EQ(itemsize(u32), 4);
  EXPECT_EQ(itemsize(bf16), 2);
  EXPECT_EQ(itemsize(i64), 8);
  EXPECT_TRUE(is_float(bf16));
  EXPECT_FALSE(is_float(i32));
  EXPECT_TRUE(is_integer(u8));
  EXPECT_FALSE(is_integer(bool_));
  EXPECT_TRUE(is_unsigned(u32));
  EXPECT_FALSE(is_unsigned(i8));
  EXPECT_EQ(dtype_of<float16>(), f16);
}

TEST(DType, ShapeHelpers) {
  EXPECT_EQ(shape_str({8, 4}), "(8, 4)");
  EXPECT_EQ(shape_str({}), "()");
  EXPECT_EQ(shape_str({8}), "(8,)");
  EXPECT_EQ(numel({}), 1);
  EXPECT_EQ(numel({3, 0, 2}), 0);
  EXPECT_EQ(numel({2, 3, 4}), 24);
  EXPECT_THAT(error_message([] { numel({2, -1}); }), HasSubstr("negative dimension in shape (2, -1)"));
  EXPECT_EQ(row_major_strides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(row_major_strides({5}), (std::vector<int64_t>{1}));
  EXPECT_EQ(row_major_strides({}), (std::vector<int64_t>{}));
  EXPECT_EQ(row_major_strides({3, 0, 2}), (std::vector<int64_t>{0, 2, 1}));
}

TEST(Float16, KnownBitPatterns) {
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);              // largest finite
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);              // halfway to 2^16 rounds to inf
  EXPECT_EQ(float_to_half_bits(65519.0f), 0x7bff);              // just below halfway stays finite
  EXPECT_EQ(float_to_half_bits(0x1p-24f), 0x0001);              // smallest subnormal
  EXPECT_EQ(float_to_half_bits(0x1p-25f), 0x0000);              // halfway to it: ties to even (0)
  EXPECT_EQ(float_to_half_bits(0x1.8p-24f), 0x0002);            // 1.5 ulp: ties to even (2)
  EXPECT_EQ(float_to_half_bits(0x1.000002p-25f), 0x0001);       // just above halfway
  EXPECT_EQ(float_to_half_bits(0x1p-14f), 0x0400);              // smallest normal
  EXPECT_EQ(float_to_half_bits(0x1.ff8p-15f), 0x03ff);          // largest subnormal
  EXPECT_EQ(float_to_half_bits(0x1.ffcp-15f), 0x0400);          // tie: up into the normals (even)
  EXPECT_EQ(float_to_half_bits(1.0f + 0x1p-11f), 0x3c00);       // tie, even stays
  EXPECT_EQ(float_to_half_bits(1.0f + 0x1.8p-10f), 0x3c02);     // tie, odd rounds up
  EXPECT_EQ(float_to_half_bits(0.1f), 0x2e66);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half_bits(-1e10f), 0xfc00);
  const uint16_t nan = float_to_half_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_EQ(half_bits_to_float(0x3555), 0x1.554p-2f);
  EXPECT_EQ(half_bits_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(half_bits_to_float(0xfbff), -65504.0f);
  EXPECT_TRUE(std::isnan(half_bits_to_float(0x7e00)));
}

TEST(Float16, ExhaustiveRoundTrip) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f = half_bits_to_float(h);
    ASSERT_EQ(float_to_half_bits(f), h) << "half bits 0x" << std::hex << bits;
    ASSERT_EQ(std::bit_cast<uint32_t>(static_cast<float>(float16::from_bits(h))), std::bit_cast<uint32_t>(f));
    ASSERT_EQ(float16(f).bits, h) << std::hex << bits;
    if (!std::isnan(f)) {
      // Exact values of a half are unchanged by rounding to float16 from double too.
      ASSERT_EQ(round_to(f16, static_cast<double>(f)), static_cast<double>(f)) << std::hex << bits;
    }
  }
}

TEST(Float16, RoundsNearestEvenAgainstNeighbours) {
  // Every double between two adjacent finite halves goes to the nearer one, ties to the even one.
  for (uint32_t bits = 0; bits < 0x7bff; ++bits) {
    const double lo = half_bits_to_float(static_cast<uint16_t>(bits));
    const double hi = half_bits_to_float(static_cast<uint16_t>(bits + 1));
    const double mid = (lo + hi) / 2;  // exact
    const double even = (bits & 1) ? hi : lo;
    ASSERT_EQ(round_to(f16, mid), even) << std::hex << bits;
    ASSERT_EQ(round_to(f16, std::nextafter(mid, lo)), lo) << std::hex << bits;
    ASSERT_EQ(round_to(f16, std::nextafter(mid, hi)), hi) << std::hex << bits;
  }
}

TEST(Float16, DirectFromDoubleAvoidsDoubleRounding) {
  // 1 + 2^-11 + 2^-40 is just above a half tie; through float it would become the tie itself and
  // round down to 1.0. Direct rounding must go up.
  const double x = 1.0 + 0x1p-11 + 0x1p-40;
  EXPECT_EQ(round_to(f16, x), 1.0 + 0x1p-10);
  EXPECT_EQ(round_to(bf16, 1.0 + 0x1p-8 + 0x1p-40), 1.0 + 0x1p-7);
}

TEST(BFloat16, KnownBitPatterns) {
  EXPECT_EQ(float_to_bfloat16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bfloat16_bits(0.1f), 0x3dcd);
  EXPECT_EQ(float_to_bfloat16_bits(3.14159265f), 0x4049);
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + 0x1p-8f), 0x3f80);           // tie, even stays
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + 0x1.8p-7f), 0x3f82);         // tie, odd rounds up
  EXPECT_EQ(float_to_bfloat16_bits(std::numeric_limits<float>::max()), 0x7f80);  // overflow to inf
  EXPECT_EQ(float_to_bfloat16_bits(0x1p-133f), 0x0001);                // subnormal
  EXPECT_EQ(float_to_bfloat16_bits(-std::numeric_limits<float>::infinity()), 0xff80);
  const uint16_t nan = float_to_bfloat16_bits(std::bit_cast<float>(0x7f800001u));  // payload only low
  EXPECT_TRUE(std::isnan(bfloat16_bits_to_float(nan)));
  EXPECT_EQ(bfloat16_bits_to_float(0x4049), 3.140625f);
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    ASSERT_EQ(float_to_bfloat16_bits(bfloat16_bits_to_float(h)), h) << std::hex << bits;
  }
}

TEST(RoundTo, FloatTypes) {
  EXPECT_EQ(round_to(f32, 0.1), static_cast<double>(0.1f));
  EXPECT_EQ(round_to(f64, 0.1), 0.1);
  EXPECT_EQ(round_to(f16, 0.1), 0.0999755859375);
  EXPECT_EQ(round_to(bf16, 0.1), 0.10009765625);
  EXPECT_EQ(round_to(f16, 1e6), std::numeric_limits<double>::infinity());
  EXPECT_EQ(round_to(f16, -1e-9), 0.0);
  EXPECT_TRUE(std::signbit(round_to(f16, -1e-9)));
  EXPECT_TRUE(std::isnan(round_to(f16, std::nan(""))));
  EXPECT_TRUE(std::isnan(round_to(bf16, std::nan(""))));
  EXPECT_EQ(round_to(f32, 1e300), std::numeric_limits<double>::infinity());
}

TEST(RoundTo, IntegersTruncateAndWrap) {
  EXPECT_EQ(round_to(i32, 2.9), 2);
  EXPECT_EQ(round_to(i32, -2.9), -2);
  EXPECT_EQ(round_to(i8, 200.0), -56);
  EXPECT_EQ(round_to(i8, -129.5), 127);
  EXPECT_EQ(round_to(u8, -1.0), 255);
  EXPECT_EQ(round_to(u8, 256.7), 0);
  EXPECT_EQ(round_to(u32, -1.0), 4294967295.0);
  EXPECT_EQ(round_to(i32, 2147483648.0), -2147483648.0);
  EXPECT_EQ(round_to(i16, 40000.0), -25536);
  EXPECT_EQ(round_to(i32, std::nan("")), 0);
  EXPECT_EQ(round_to(i64, 1e19), static_cast<double>(static_cast<int64_t>(10000000000000000000ull)));
  EXPECT_EQ(round_to(bool_, 0.0), 0);
  EXPECT_EQ(round_to(bool_, -0.5), 1);
  EXPECT_EQ(round_to(bool_, std::nan("")), 1);  // NaN is truthy, as in NumPy
}

TEST(WrapInt, EveryWidth) {
  EXPECT_EQ(wrap_int(i8, 128), -128);
  EXPECT_EQ(wrap_int(i8, -129), 127);
  EXPECT_EQ(wrap_int(i16, 65535), -1);
  EXPECT_EQ(wrap_int(i32, int64_t{1} << 32), 0);
  EXPECT_EQ(wrap_int(i32, (int64_t{1} << 31)), -(int64_t{1} << 31));
  EXPECT_EQ(wrap_int(u8, -1), 255);
  EXPECT_EQ(wrap_int(u32, -1), 4294967295);
  EXPECT_EQ(wrap_int(i64, std::numeric_limits<int64_t>::min()), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(wrap_int(bool_, 7), 1);
  EXPECT_EQ(wrap_int(bool_, 0), 0);
}

TEST(LoadStore, ConvertThroughDoubleAndInt64) {
  unsigned char buf[8];
  store_from_double(f16, buf, 1.5);
  EXPECT_EQ(load_as_double(f16, buf), 1.5);
  store_from_double(bf16, buf, -3.0);
  EXPECT_EQ(load_as_double(bf16, buf), -3.0);
  store_from_double(i8, buf, 300.0);
  EXPECT_EQ(load_as_int64(i8, buf), 44);
  store_from_int64(i64, buf, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(load_as_int64(i64, buf), std::numeric_limits<int64_t>::max());
  store_from_int64(u32, buf, -1);
  EXPECT_EQ(load_as_int64(u32, buf), 4294967295);
  EXPECT_EQ(load_as_double(u32, buf), 4294967295.0);
  store_from_int64(f32, buf, 16777217);  // rounds to even in one step
  EXPECT_EQ(load_as_double(f32, buf), 16777216.0);
  store_from_double(f32, buf, -7.9);
  EXPECT_EQ(load_as_int64(f32, buf), -7);
  store_from_double(bool_, buf, 0.25);
  EXPECT_EQ(buf[0], 1);
  EXPECT_EQ(load_as_double(bool_, buf), 1.0);
}

}  // namespace
}  // namespace palladium
