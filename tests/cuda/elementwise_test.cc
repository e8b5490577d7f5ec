// Elementwise ops, leaves and casts on every dtype: cuda against the interpreter. Each kernel
// computes many ops at once (one output each), so one NVRTC compile covers a family.
#include <cmath>
#include <limits>

#include "tests/cuda/cuda_test_util.h"

namespace palladium::cudatest {
namespace {

const std::vector<DType> kAll{bool_, i8, i16, i32, i64, u8, u32, f16, bf16, f32, f64};
const std::vector<DType> kNumeric{i8, i16, i32, i64, u8, u32, f16, bf16, f32, f64};

// Inputs of dtype t: small integers (nonzero when `nonzero`), normal floats.
Array sample(uint64_t seed, const Shape& shape, DType t, bool nonzero = false) {
  if (is_float(t)) return normal(seed, shape, t);
  if (is_bool(t)) return uniform(seed, shape, i8, 0, 2).astype(bool_);
  const double lo = is_unsigned(t) ? (nonzero ? 1 : 0) : -100, hi = 100;
  Array a = uniform(seed, shape, i32, lo, hi);
  if (nonzero && !is_unsigned(t))
    for (int64_t i = 0; i < a.size(); ++i)
      if (a.get_int(i) == 0) a.set(i, 7);
  return a.astype(t);
}

TEST(CudaElementwise, AddVectors) {
  PL_REQUIRE_NVRTC();
  auto kernel = [](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; };
  check_kernel(kernel, {ShapeDtype({8}, i32)}, {}, {pl::arange(8), pl::arange(8)});
  check_kernel(kernel, {ShapeDtype({1000}, f32)}, {}, {normal(1, {1000}), normal(2, {1000})});
}

TEST(CudaElementwise, BinaryOpsEveryNumericDtype) {
  PL_REQUIRE_NVRTC();
  for (DType t : kNumeric) {
    SCOPED_TRACE(dtype_name(t));
    const Shape shape{37, 19};  // not a multiple of anything: partial slots
    auto kernel = [t](pl::Refs r) {
      pl::Value a = r[0][pl::all], b = r[1][pl::all];
      int o = 2;
      r[o++][pl::all] = a + b;
      r[o++][pl::all] = a - b;
      r[o++][pl::all] = a * b;
      r[o++][pl::all] = a / b;
      r[o++][pl::all] = a % b;
      r[o++][pl::all] = jnp::maximum(a, b);
      r[o++][pl::all] = jnp::minimum(a, b);
      r[o++][pl::all] = a < b;
      r[o++][pl::all] = a == b;
      r[o++][pl::all] = a >= b;
      r[o++][pl::all] = jnp::where(a > b, a, b);
      if (is_float(t)) r[o++][pl::all] = jnp::pow(jnp::abs(a) + 0.5, b);
      else r[o++][pl::all] = (a & b) ^ (a | b);
    };
    std::vector<ShapeDtype> outs(7, ShapeDtype(shape, t));
    for (int i = 0; i < 3; ++i) outs.emplace_back(shape, bool_);
    outs.emplace_back(shape, t);
    outs.emplace_back(shape, t);
    check_kernel(kernel, outs, {.name = "binary"}, {sample(1, shape, t), sample(2, shape, t, true)});
  }
}

TEST(CudaElementwise, UnaryMathFloatDtypes) {
  PL_REQUIRE_NVRTC();
  for (DType t : {f16, bf16, f32, f64}) {
    SCOPED_TRACE(dtype_name(t));
    const Shape shape{4, 300};
    auto kernel = [](pl::Refs r) {
      pl::Value x = r[0][pl::all];
      pl::Value p = jnp::abs(x) + 0.25;  // positive, for logs and roots
      int o = 1;
      for (pl::Value v : {-x, jnp::abs(x), jnp::exp(x), jnp::exp2(x), jnp::log(p), jnp::log2(p), jnp::log1p(p),
                          jnp::sqrt(p), jnp::rsqrt(p), jnp::sin(x), jnp::cos(x), jnp::tanh(x), jnp::logistic(x),
                          jnp::erf(x), jnp::floor(x * 3), jnp::ceil(x * 3), pl::nn::gelu(x), pl::nn::silu(x),
                          jnp::expm1(x), jnp::tan(x), jnp::arcsin(x * 0.3), jnp::arccos(x * 0.3), jnp::arctan(x),
                          jnp::sinh(x), jnp::cosh(x), jnp::round(x * 3), jnp::sign(x), jnp::arctan2(x, p),
                          pl::lax::erf_inv(x * 0.3)})
        r[o++][pl::all] = v;
    };
    std::vector<ShapeDtype> outs(29, ShapeDtype(shape, t));
    check_kernel(kernel, outs, {.name = "unary"}, {normal(3, shape, t)});
  }
}

// bitcast_convert_type through the memory representations, exactly the interpreter's bits.
TEST(CudaElementwise, BitcastConvertType) {
  PL_REQUIRE_NVRTC();
  check_kernel(
      [](pl::Ref a, pl::Ref b, pl::Ref c, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4) {
        o1[pl::all] = pl::lax::bitcast_convert_type(a[pl::all], i32);
        o2[pl::all] = pl::lax::bitcast_convert_type(b[pl::all], i16);
        o3[pl::all] = pl::lax::bitcast_convert_type(c[pl::all], f64);
        o4[pl::all] = pl::lax::bitcast_convert_type(pl::lax::bitcast_convert_type(b[pl::all], i16), f16);
      },
      {ShapeDtype({4, 64}, i32), ShapeDtype({4, 64}, i16), ShapeDtype({4, 64}, f64), ShapeDtype({4, 64}, f16)},
      {.name = "bitcast"}, {normal(7, {4, 64}, f32), normal(8, {4, 64}, bf16), uniform(9, {4, 64}, i64, -1e9, 1e9)}, 0.0);
}

// nextafter: exactly the interpreter's (std::nextafter in the operands' format).
TEST(CudaElementwise, NextAfter) {
  PL_REQUIRE_NVRTC();
  for (DType t : {f32, f64}) {
    SCOPED_TRACE(dtype_name(t));
    check_kernel([](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = pl::lax::nextafter(a[pl::all], b[pl::all]); },
                 {ShapeDtype({4, 64}, t)}, {.name = "nextafter"}, {normal(5, {4, 64}, t), normal(6, {4, 64}, t)}, 0.0);
  }
}

// CompilerParams::fast_math: exp, exp2, log, log2 and logistic on the special-function unit, and
// division (div.full), stay within a few float32 ulps of the interpreter over |x| <= 10 (16-bit
// floats round the same); division too by denominators past 2^126, where div.approx gives 0.
TEST(CudaElementwise, FastMathTranscendentals) {
  PL_REQUIRE_NVRTC();
  for (DType t : {f16, bf16, f32}) {
    SCOPED_TRACE(dtype_name(t));
    const Shape shape{4, 512};
    const bool single = t == f32;
    auto kernel = [single](pl::Refs r) {
      pl::Value x = r[0][pl::all];
      pl::Value p = jnp::abs(x) + 0.01;
      // float32 only: 16-bit floats cannot hold the huge denominators
      pl::Value huge = single ? jnp::abs(x) * 1e37 + 1e37 : p;
      int o = 1;
      for (pl::Value v : {jnp::exp(x), jnp::exp2(x), jnp::log(p), jnp::log2(p), jnp::logistic(x), x / p, x / huge})
        r[o++][pl::all] = v;
    };
    std::vector<ShapeDtype> outs(7, ShapeDtype(shape, t));
    CallOptions options{.name = "fast_unary"};
    options.compiler_params.fast_math = true;
    check_kernel(kernel, outs, options, {uniform(31, shape, f32, -10, 10).astype(t)}, t == f32 ? 2e-6 : -1);
  }
  // Attention's mask value, -0.7 * FLT_MAX, through exp(x - m): a fully masked row gives
  // exp(0) = 1, a masked entry beside real scores exp(-huge) = 0. (A fused 2^(x log2 e - m log2 e)
  // once overflowed to 2^inf here.)
  const float mask = -0.7f * std::numeric_limits<float>::max();
  std::vector<float> x(256), m(256);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = i % 3 == 0 ? mask : static_cast<float>(i % 17) - 8.0f;
    m[i] = i % 2 == 0 ? mask : 8.0f;
  }
  auto diff = [](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = jnp::exp(a[pl::all] - b[pl::all]); };
  CallOptions options{.name = "fast_exp_masked"};
  options.compiler_params.fast_math = true;
  check_kernel(diff, {ShapeDtype({256}, f32)}, options, {pl::from_vector(x), pl::from_vector(m)}, 2e-6);

  // exp and exp2 flush results below 2^-126 to zero (ex2.approx.ftz: no subnormal guard around
  // each MUFU.EX2); results just above stay. The interpreter keeps the subnormals.
  const std::vector<float> small{-100.0f, -87.0f, -80.0f, -1.0f, 0.0f, 5.0f, -140.0f, -120.0f};
  auto exps = [](pl::Ref a, pl::Ref o_exp, pl::Ref o_exp2) {
    o_exp[pl::all] = jnp::exp(a[pl::all]);
    o_exp2[pl::all] = jnp::exp2(a[pl::all]);
  };
  CallOptions small_options{.name = "fast_exp_small"};
  small_options.compiler_params.fast_math = true;
  const std::vector<Array> got = check_kernel(exps, {ShapeDtype({8}, f32), ShapeDtype({8}, f32)}, small_options,
                                              {pl::from_vector(small)}, 2e-6);
  if (!results_are_real()) return;
  const Array e = to_host(got[0]), e2 = to_host(got[1]);
  EXPECT_EQ(e.get(0), 0.0);                                   // e^-100: subnormal, flushed
  EXPECT_NEAR(e.get(1), std::exp(-87.0), 1e-5 * std::exp(-87.0));  // above 2^-126
  EXPECT_EQ(e2.get(6), 0.0);                                  // 2^-140
  EXPECT_NEAR(e2.get(7), std::exp2(-120.0), 1e-5 * std::exp2(-120.0));
}

// The softmax's exp(x * c - max(x * c)) with fast_math (emit_elementwise.cc, emit_scaled_exp) is
// exp2(fma(x, c log2e, -m log2e)): within fast_math's exp error, (|x c| + |m|) 6e-8 relative, of the
// interpreter for ordinary scores (|m| <= 10: 1e-5) and rows near 2000 (5e-4); and rows whose max
// lies beyond -FLT_MAX / log2e (an additive mask of -3e38) get finite values, not 2^inf and NaN.
TEST(CudaElementwise, FoldedSoftmaxExpKeepsFastMathError) {
  PL_REQUIRE_NVRTC();
  constexpr int64_t rows = 16, cols = 128;
  const Array scores = uniform(41, {rows, cols}, f32, -10, 10);
  auto rows_of = [&](auto value) {
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows * cols; ++i) x[static_cast<size_t>(i)] = value(i / cols, static_cast<float>(scores.get(i)));
    return pl::from_vector(x, {rows, cols});
  };
  const Array ordinary = rows_of([](int64_t, float s) { return s; });
  const Array large = rows_of([](int64_t r, float s) { return r % 2 ? 2300.0f + s : s; });
  const Array overflow = rows_of([](int64_t r, float s) { return r % 2 ? -3e38f : s; });
  int index = 0;
  for (float scale : {0.9f, 0.0884f}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    auto softmax_exp = [scale](pl::Ref a, pl::Ref o) {
      pl::Value s = a[pl::all] * scale;
      o[pl::all] = jnp::exp(s - jnp::broadcast_to(jnp::expand_dims(jnp::max(s, 1), 1), {rows, cols}));
    };
    GeneratedSources sources("folded-exp");
    const std::string name = "folded_exp_" + std::to_string(index++);
    CallOptions options{.name = name, .debug = true};
    options.compiler_params.fast_math = true;
    check_kernel(softmax_exp, {ShapeDtype({rows, cols}, f32)}, options, {ordinary}, 1e-5);
    const std::string source = sources.source(name);
    EXPECT_NE(source.find("pl_fast_exp2(fmaf("), std::string::npos) << "not folded: " << sources.dir();
    EXPECT_NE(source.find("pl_scaled_log2e("), std::string::npos);
    check_kernel(softmax_exp, {ShapeDtype({rows, cols}, f32)}, options, {large}, 5e-4);
    options.backend = "cuda";
    const Array got = pallas_call(softmax_exp, {ShapeDtype({rows, cols}, f32)}, options)(overflow);
    if (!results_are_real()) continue;
    const Array host = to_host(got);
    int64_t not_finite = 0;
    for (int64_t i = 0; i < host.size(); ++i) not_finite += !std::isfinite(host.get(i));
    EXPECT_EQ(not_finite, 0) << "of " << host.size();
  }
}

TEST(CudaElementwise, IntegerUnaryAndWrapping) {
  PL_REQUIRE_NVRTC();
  for (DType t : {i8, i16, i32, i64, u8, u32}) {
    SCOPED_TRACE(dtype_name(t));
    const Shape shape{256};
    auto kernel = [](pl::Refs r) {
      pl::Value a = r[0][pl::all], b = r[1][pl::all];
      r[2][pl::all] = -a;
      r[3][pl::all] = jnp::abs(a);
      r[4][pl::all] = ~a;
      r[5][pl::all] = a * b * b * b + a;  // overflows the narrow types: wraps
      r[6][pl::all] = jnp::sign(a);
      r[7][pl::all] = pl::lax::shift_left(a, b);  // b's random amounts are mostly out of range
      r[8][pl::all] = pl::lax::shift_right_logical(a, b & 7);
      r[9][pl::all] = pl::lax::shift_right_arithmetic(a, b);
      r[10][pl::all] = pl::lax::population_count(a);
      r[11][pl::all] = pl::lax::clz(a);
    };
    std::vector<ShapeDtype> outs(10, ShapeDtype(shape, t));
    check_kernel(kernel, outs, {.name = "int_unary"}, {sample(4, shape, t), sample(5, shape, t)});
  }
  // Bool logic.
  auto logic = [](pl::Ref a, pl::Ref b, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4) {
    pl::Value x = a[pl::all], y = b[pl::all];
    o1[pl::all] = x & y;
    o2[pl::all] = x | y;
    o3[pl::all] = x ^ y;
    o4[pl::all] = !x;
  };
  std::vector<ShapeDtype> bools(4, ShapeDtype({100}, bool_));
  check_kernel(logic, bools, {}, {sample(6, {100}, bool_), sample(7, {100}, bool_)});
}

TEST(CudaElementwise, CastsBetweenEveryPair) {
  PL_REQUIRE_NVRTC();
  for (DType from : kAll) {
    SCOPED_TRACE(dtype_name(from));
    const Shape shape{130};
    auto kernel = [](pl::Refs r) {
      pl::Value x = r[0][pl::all];
      for (size_t i = 1; i < r.size(); ++i) r[i][pl::all] = x.astype(r[i].dtype());
    };
    std::vector<ShapeDtype> outs;
    for (DType to : kAll) outs.emplace_back(shape, to);
    // Values that fit every target: small magnitudes, fractional parts for floats.
    Array in = is_float(from) ? multiply(normal(8, shape, f32), full({}, 20.0)).astype(from) : sample(8, shape, from);
    if (is_float(from)) {  // keep float -> unsigned casts of negatives out (implementation-defined)
      Array a = in.astype(f64);
      for (int64_t i = 0; i < a.size(); ++i) a.set(i, std::fabs(a.get(i)));
      in = a.astype(from);
    }
    check_kernel(kernel, outs, {.name = "casts"}, {in});
  }
}

TEST(CudaElementwise, LeavesIotaConstantsProgramIds) {
  PL_REQUIRE_NVRTC();
  auto kernel = [](pl::Ref o_i, pl::Ref o_f, pl::Ref o_b, pl::Ref o_pid) {
    pl::when((pl::program_id(0) == 0) & (pl::program_id(1) == 0), [&] {
      o_i[pl::all] = jnp::iota(pl::i32, {4, 64}, 1) * 3 + jnp::iota(pl::i32, {4, 64}, 0);
      o_f[pl::all] = jnp::iota(pl::bf16, {4, 64}, 1) * 0.5f + jnp::full({4, 64}, 1.25, pl::bf16);
      o_b[pl::all] = jnp::iota(pl::i32, {4, 64}, 1) < 17;
    });
    o_pid[pl::all] = jnp::full({1, 3}, 0, pl::i32) + pl::program_id(0) * 100 + pl::program_id(1) * 10 +
                     pl::num_programs(1);
  };
  check_kernel(kernel,
               {ShapeDtype({4, 64}, i32), ShapeDtype({4, 64}, bf16), ShapeDtype({4, 64}, bool_),
                ShapeDtype({5, 3}, i32)},
               {.grid = {5, 1},
                .out_specs = {pl::BlockSpec({4, 64}, [](pl::Index, pl::Index) { return pl::idx(0, 0); }),
                              pl::BlockSpec({4, 64}, [](pl::Index, pl::Index) { return pl::idx(0, 0); }),
                              pl::BlockSpec({4, 64}, [](pl::Index, pl::Index) { return pl::idx(0, 0); }),
                              pl::BlockSpec({1, 3}, [](pl::Index i, pl::Index) { return pl::idx(i, 0); })}},
               {});
}

TEST(CudaElementwise, MaxMinPropagateNaN) {
  PL_REQUIRE_NVRTC();
  Array a = normal(9, {64}), b = normal(10, {64});
  for (int64_t i = 0; i < 64; i += 5) a.set(i, NAN);
  for (int64_t i = 0; i < 64; i += 7) b.set(i, NAN);
  auto kernel = [](pl::Ref x, pl::Ref y, pl::Ref o1, pl::Ref o2) {
    o1[pl::all] = jnp::maximum(x[pl::all], y[pl::all]);
    o2[pl::all] = jnp::minimum(x[pl::all], y[pl::all]);
  };
  check_kernel(kernel, {ShapeDtype({64}, f32), ShapeDtype({64}, f32)}, {}, {a, b});
}

// Loads and stores of whole 4-element groups are single 16-byte (8-byte for 16-bit types)
// accesses where the group is inside the array and aligned. Each case here puts some groups
// elsewhere: across the array's last edge, at row ends that are not multiples of 4, or at an
// address 4 bytes past an aligned one (a view into a device array), where the elements go one by one.
TEST(CudaElementwise, VectorAccessesAtEdgesAndMisalignedAddresses) {
  PL_REQUIRE_NVRTC();
  for (DType t : {f32, bf16, i32}) {
    SCOPED_TRACE(dtype_name(t));
    // 1-D: 8190 elements in blocks of 1024, the last block's last group half outside.
    auto spec1 = BlockSpec({1024}, [](Index i) { return idx(i); });
    auto add1 = [](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] * y[pl::all] + x[pl::all]; };
    check_kernel(add1, {ShapeDtype({8190}, t)}, {.grid = {8}, .in_specs = {spec1, spec1}, .out_specs = {spec1}},
                 {sample(3, {8190}, t), sample(4, {8190}, t)});
    // 2-D: rows of 66 in blocks of 64 columns, so the second column block's groups straddle the
    // row's end, and every row after the first starts 2 elements off a 4-element boundary.
    auto spec2 = BlockSpec({8, 64}, [](Index i, Index j) { return idx(i, j); });
    check_kernel(add1, {ShapeDtype({20, 66}, t)},
                 {.grid = {3, 2}, .in_specs = {spec2, spec2}, .out_specs = {spec2}},
                 {sample(5, {20, 66}, t), sample(6, {20, 66}, t)});
  }
  if (!results_are_real()) return;
  // A view one element into a device array: every group's address is 4 bytes past 16-byte aligned.
  const Array host = normal(7, {4097});
  const Array view = lax::slice(to_device(host, Device{Device::cuda, 0}), {1}, {4097});
  auto spec = BlockSpec({1024}, [](Index i) { return idx(i); });
  auto twice = pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.0; }, ShapeDtype({4096}, f32),
                           {.grid = {4}, .in_specs = {spec}, .out_specs = {spec}, .backend = "cuda"});
  const Array got = to_host(twice(view));
  for (int64_t i = 0; i < 4096; ++i) ASSERT_EQ(got.get(i), 2.0 * host.get(i + 1)) << "at " << i;
}

}  // namespace
}  // namespace palladium::cudatest
