// Elementwise ops on the cpu backend against the interpreter: float32 arithmetic rounds exactly
// like it (no contraction, per-op rounding), transcendental functions stay within 2 ulps, 16-bit
// floats round after every op, integers wrap, casts saturate, and fused loops keep the values
// that are used after them.
#include "tests/cpu/cpu_test_util.h"

namespace palladium::cpu_test {
namespace {

using pl::Ref;
using pl::Value;
namespace jnp = pl::jnp;

// Normal values with special ones mixed in: NaN, +-inf, +-0, huge and tiny magnitudes.
pl::Array with_specials(pl::Array a) {
  const double specials[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 3e38, -3e38, 1e-40, 7.0, -2.5};
  for (int64_t i = 0; i < a.size(); i += 7) a.set(i, specials[(i / 7) % 10]);
  return a;
}

TEST(CpuElementwise, Float32ArithmeticMatchesTheInterpreterExactly) {
  Random rng;
  pl::Array xs = with_specials(rng.normal({37, 45})), ys = with_specials(rng.normal({37, 45}));
  auto kernel = [](pl::Refs r) {
    Value x = r[0][pl::all], y = r[1][pl::all];
    pl::Refs o = r.subspan(2);
    o[0][pl::all] = x * y + x / (y - 0.5f);
    o[1][pl::all] = jnp::maximum(x, y) - jnp::minimum(x, -y);
    o[2][pl::all] = pl::lax::rem(x, y) + jnp::abs(-x);
    o[3][pl::all] = jnp::sqrt(jnp::abs(x)) + jnp::floor(x) * jnp::ceil(y);
    o[4][pl::all] = jnp::where((x > y) | (x == 0.0f), x, y * 2.0f);
  };
  std::vector<pl::ShapeDtype> outs(5, pl::ShapeDtype({37, 45}, pl::f32));
  auto [cpu, interp] = run_both(kernel, outs, {.name = "f32_arith"}, {xs, ys});
  for (size_t k = 0; k < outs.size(); ++k) EXPECT_TRUE(same(cpu[k], interp[k])) << "output " << k;
}

TEST(CpuElementwise, TranscendentalsWithinTwoUlps) {
  Random rng;
  const pl::Shape shape{64, 1024};
  // Each function sees its interesting range plus special values.
  pl::Array wide = with_specials(rng.uniform(shape, -100, 100));
  pl::Array positive = with_specials(rng.uniform(shape, 0, 50).astype(pl::f64).astype(pl::f32));
  pl::Array tiny = rng.uniform(shape, -3, 3);
  pl::Array big_positive = rng.uniform(shape, 1e-30, 1e30);
  auto kernel = [](pl::Refs r) {
    Value w = r[0][pl::all], p = r[1][pl::all], t = r[2][pl::all], b = r[3][pl::all];
    pl::Refs o = r.subspan(4);
    o[0][pl::all] = jnp::exp(w);
    o[1][pl::all] = jnp::exp2(w);
    o[2][pl::all] = jnp::log(b);
    o[3][pl::all] = jnp::log2(p);
    o[4][pl::all] = jnp::log1p(t * t - 0.99f);
    o[5][pl::all] = jnp::sin(w);
    o[6][pl::all] = jnp::cos(w * 1000.0f);
    o[7][pl::all] = jnp::tanh(t);
    o[8][pl::all] = jnp::logistic(w);
    o[9][pl::all] = jnp::erf(t);
    o[10][pl::all] = jnp::rsqrt(b);
    o[11][pl::all] = jnp::pow(p, t);
    o[12][pl::all] = jnp::tanh(w);
  };
  std::vector<pl::ShapeDtype> outs(13, pl::ShapeDtype(shape, pl::f32));
  auto [cpu, interp] = run_both(kernel, outs, {.name = "transcendental"}, {wide, positive, tiny, big_positive});
  const char* names[] = {"exp", "exp2", "log", "log2", "log1p", "sin", "cos", "tanh", "logistic", "erf", "rsqrt", "pow", "tanh wide"};
  for (size_t k = 0; k < outs.size(); ++k) EXPECT_TRUE(within_ulps(cpu[k], interp[k], 2)) << names[k];
}

TEST(CpuElementwise, Float64UsesTheCLibrary) {
  Random rng;
  pl::Array input = rng.uniform({300}, -20, 20, pl::f64);
  auto kernel = [](Ref x_ref, Ref o) {
    Value x = x_ref[pl::all];
    o[pl::all] = jnp::exp(x) + jnp::sin(x) * jnp::tanh(x) - jnp::log1p(jnp::abs(x)) + jnp::erf(x);
  };
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({300}, pl::f64)}, {.name = "f64_math"}, {input});
  EXPECT_TRUE(close(cpu[0], interp[0], 1e-15));
}

TEST(CpuElementwise, HalfAndBfloat16RoundAfterEveryOp) {
  Random rng;
  for (pl::DType t : {pl::f16, pl::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    pl::Array as = rng.normal({16, 64}, t), bs = rng.normal({16, 64}, t), cs = rng.uniform({16, 64}, 0.5, 3.0, t);
    auto kernel = [](Ref a_ref, Ref b_ref, Ref c_ref, Ref arith, Ref math) {
      Value a = a_ref[pl::all], b = b_ref[pl::all], c = c_ref[pl::all];
      arith[pl::all] = (a * b + c) / c - jnp::maximum(a, b) * 3.0f;
      math[pl::all] = jnp::exp(a) + jnp::log(c) * jnp::tanh(b);
    };
    auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({16, 64}, t), pl::ShapeDtype({16, 64}, t)},
                                  {.name = std::string("half_") + dtype_name(t)}, {as, bs, cs});
    EXPECT_TRUE(same(cpu[0], interp[0]));
    // Approximations within 2 float ulps can round to a neighbouring 16-bit value.
    EXPECT_TRUE(close(cpu[1], interp[1], t == pl::f16 ? 2e-3 : 1e-2));
  }
}

TEST(CpuElementwise, IntegersWrapAndDivideLikeLax) {
  Random rng;
  for (pl::DType t : {pl::i8, pl::i16, pl::i32, pl::i64, pl::u8, pl::u32}) {
    SCOPED_TRACE(dtype_name(t));
    const double hi = t == pl::i8 ? 127 : t == pl::u8 ? 255 : t == pl::i16 ? 32767 : 2e9;
    const double lo = is_unsigned(t) ? 1 : -hi;
    pl::Array as = rng.uniform({8, 40}, lo, hi, t), bs = rng.uniform({8, 40}, lo, hi, t);
    // Divisors never 0 (the interpreter raises an Error there); -1 is kept (INT_MIN / -1 wraps).
    for (int64_t i = 0; i < bs.size(); ++i)
      if (bs.get_int(i) == 0) bs.set(i, is_unsigned(t) ? 3 : -1);
    auto kernel = [](pl::Refs r) {
      Value a = r[0][pl::all], b = r[1][pl::all];
      pl::Refs o = r.subspan(2);
      o[0][pl::all] = a * b + a - b * 3;
      o[1][pl::all] = a / b + a % b;
      o[2][pl::all] = (a & b) ^ (a | 5) ^ ~b;
      o[3][pl::all] = jnp::maximum(a, b) - jnp::minimum(a, b) + jnp::abs(a) - (-b);
      o[4][pl::all] = jnp::floor_divide(a, b);
    };
    std::vector<pl::ShapeDtype> outs(5, pl::ShapeDtype({8, 40}, t));
    auto [cpu, interp] = run_both(kernel, outs, {.name = std::string("int_") + dtype_name(t)}, {as, bs});
    for (size_t k = 0; k < outs.size(); ++k) EXPECT_TRUE(same(cpu[k], interp[k])) << "output " << k;
  }
}

TEST(CpuElementwise, IntegerDivisionByZeroGivesZero) {
  // The interpreter raises an Error; compiled code does not check but must not trap.
  pl::Array a = pl::array({7, -7, 5, -2147483647 - 1}, pl::i32), b = pl::array({0, 0, -1, -1}, pl::i32);
  auto f = pl::pallas_call([](Ref a_ref, Ref b_ref, Ref q, Ref r) {
    q[pl::all] = a_ref[pl::all] / b_ref[pl::all];
    r[pl::all] = a_ref[pl::all] % b_ref[pl::all];
  }, {pl::ShapeDtype({4}, pl::i32), pl::ShapeDtype({4}, pl::i32)}, {.name = "div_zero", .backend = "cpu"});
  std::vector<pl::Array> out = f(a, b);
  EXPECT_EQ(out[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 0, -5, -2147483647 - 1}));
  EXPECT_EQ(out[1].to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0}));
}

TEST(CpuElementwise, CastsBetweenEveryPairOfDtypes) {
  const std::vector<pl::DType> dtypes = {pl::bool_, pl::i8, pl::i16, pl::i32, pl::i64, pl::u8,
                                         pl::u32,   pl::f16, pl::bf16, pl::f32, pl::f64};
  // Values that exercise rounding to nearest even, saturation, NaN and negative-to-unsigned.
  pl::Array src = pl::from_vector<double>({0.0, -0.0, 1.5, 2.5, -1.5, 127.5, 128.0, -129.0, 255.5, 300.0, 65504.0,
                                           65520.0, 1e10, -1e10, 3.1e9, 1.0 / 3.0, 1e-8, 6e-8, NAN, INFINITY,
                                           -INFINITY, 16777217.0, 9.3e18, -2.0});
  for (pl::DType from : dtypes) {
    SCOPED_TRACE(std::string("from ") + dtype_name(from));
    pl::Array x = src.astype(from);
    auto kernel = [&dtypes](pl::Refs r) {
      for (size_t k = 0; k < dtypes.size(); ++k) r[k + 1][pl::all] = r[0][pl::all].astype(dtypes[k]);
    };
    std::vector<pl::ShapeDtype> outs;
    for (pl::DType to : dtypes) outs.emplace_back(src.shape(), to);
    auto [cpu, interp] = run_both(kernel, outs, {.name = std::string("cast_from_") + dtype_name(from)}, {x});
    for (size_t k = 0; k < dtypes.size(); ++k) EXPECT_TRUE(same(cpu[k], interp[k])) << "to " << dtype_name(dtypes[k]);
  }
}

TEST(CpuElementwise, FusedLoopsKeepValuesUsedLater) {
  // t is used by the next elementwise op (fused), by a reduction and by a second store.
  Random rng;
  pl::Array input = rng.normal({32, 48});
  auto kernel = [](Ref x_ref, Ref a, Ref b, Ref c) {
    Value x = x_ref[pl::all];
    Value t = x * 2.0f + 1.0f;
    Value u = jnp::exp(t) - t;
    a[pl::all] = u;
    b[pl::all] = t.sum(1);
    c[pl::all] = t + jnp::broadcast_to(t.max(0), {32, 48}) + jnp::iota(pl::f32, {32, 48}, 0);
  };
  auto [cpu, interp] = run_both(
      kernel, {pl::ShapeDtype({32, 48}, pl::f32), pl::ShapeDtype({32}, pl::f32), pl::ShapeDtype({32, 48}, pl::f32)},
      {.name = "fusion_uses"}, {input});
  EXPECT_TRUE(within_ulps(cpu[0], interp[0], 2));
  EXPECT_TRUE(close(cpu[1], interp[1], 1e-6));
  EXPECT_TRUE(same(cpu[2], interp[2]));
}

TEST(CpuElementwise, InputBlocksReadInPlaceOrCopied) {
  // Input blocks that only elementwise loops read are read inside the array when the whole block
  // is there: 16 x 64 blocks of a 100 x 64 array are contiguous (the last one overhangs and is
  // copied, its missing rows padded), 16 x 32 blocks are not contiguous (copied). int32 and
  // float64 inputs too; a broadcast reads one input by index; a second user outside any loop (a
  // reduction) keeps the copy.
  Random rng;
  pl::Array x = rng.normal({100, 64}), d = rng.normal({100, 64}, pl::f64);
  pl::Array n = rng.uniform({100, 64}, -50, 50, pl::i32);
  pl::Array row = rng.normal({1, 64});
  for (int64_t cols : {int64_t{64}, int64_t{32}}) {
    SCOPED_TRACE("block columns " + std::to_string(cols));
    auto kernel = [](Ref x_ref, Ref d_ref, Ref n_ref, Ref row_ref, Ref o, Ref od, Ref on, Ref sums) {
      Value xv = x_ref[pl::all];
      o[pl::all] = xv * 2.0f + jnp::broadcast_to(row_ref[pl::all], xv.shape());
      od[pl::all] = jnp::exp(d_ref[pl::all]) - 1.0;
      on[pl::all] = n_ref[pl::all] * 3 + 1;
      sums[pl::all] = (x_ref[pl::all].sum(1) + xv.max(1)).expand_dims(1);
    };
    pl::CallOptions opts{.grid = {pl::cdiv(int64_t{100}, int64_t{16}), 64 / cols},
                         .in_specs = {block2(16, cols), block2(16, cols), block2(16, cols),
                                      pl::BlockSpec({1, cols}, [](pl::Index, pl::Index j) { return pl::idx(0, j); })},
                         .out_specs = {block2(16, cols), block2(16, cols), block2(16, cols),
                                       pl::BlockSpec({16, 1}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); })},
                         .name = "in_place_reads_" + std::to_string(cols)};
    const pl::ShapeDtype f({100, 64}, pl::f32);
    auto [cpu, interp] = run_both(kernel, {f, pl::ShapeDtype({100, 64}, pl::f64), pl::ShapeDtype({100, 64}, pl::i32),
                                           pl::ShapeDtype({100, 64 / cols}, pl::f32)},
                                  opts, {x, d, n, row});
    EXPECT_TRUE(same(cpu[0], interp[0]));
    EXPECT_TRUE(close(cpu[1], interp[1], 1e-15));
    EXPECT_TRUE(same(cpu[2], interp[2]));
    EXPECT_TRUE(close(cpu[3], interp[3], 1e-6));
  }
}

}  // namespace
}  // namespace palladium::cpu_test
