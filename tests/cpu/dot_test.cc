// dot on the cpu backend: shapes that do not fit the micro-kernel or the cache blocks, transposes,
// every dtype, operands read straight from refs at edge blocks, results stored straight to refs,
// and accumulation in a loop carry. Compared with float64 products (host matmul) and the
// interpreter.
#include "tests/cpu/cpu_test_util.h"

namespace palladium::cpu_test {
namespace {

using pl::Ref;
using pl::Value;
namespace jnp = pl::jnp;

// Every element within the float32 dot's rounding bound: |got - ref| <= (k + 2) u (|a| @ |b|), u =
// 2^-24 (k products summed in some order, plus the result's rounding). A plain relative error can
// exceed any fixed tolerance where the sum cancels (a 1 x 7 x 1 dot near zero).
::testing::AssertionResult within_dot_bound(const pl::Array& got, const pl::Array& ref, const pl::Array& abs_ref, int64_t k) {
  const double u = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < ref.size(); ++i) {
    const double bound = static_cast<double>(k + 2) * u * abs_ref.get(i);
    if (std::abs(got.get(i) - ref.get(i)) > bound)
      return ::testing::AssertionFailure() << "flat " << i << ": got " << got.get(i) << ", expected " << ref.get(i)
                                           << ", bound " << bound;
  }
  return ::testing::AssertionSuccess();
}

TEST(CpuDot, OddShapesAndTransposes) {
  Random rng;
  // 37 x 29 x 53: nothing is a multiple of the micro-kernel; 300 x 600 x 270 crosses MC and KC.
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 29, 53}, {300, 600, 270}, {1, 7, 1}}) {
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n));
    pl::Array a = rng.normal({m, k}), b = rng.normal({k, n});
    pl::Array a_t = pl::transpose(a), b_t = pl::transpose(b);
    auto kernel = [](Ref a_ref, Ref b_ref, Ref at, Ref bt, Ref o0, Ref o1, Ref o2, Ref o3) {
      o0[pl::all] = pl::dot(a_ref[pl::all], b_ref[pl::all]);
      o1[pl::all] = pl::dot(at[pl::all], b_ref[pl::all], true, false);
      o2[pl::all] = pl::dot(a_ref[pl::all], bt[pl::all], false, true) * 1.0f;  // not stored directly
      o3[pl::all] = pl::dot(at[pl::all].T(), bt[pl::all].T()) + 0.0f;
    };
    const pl::ShapeDtype out({m, n}, pl::f32);
    auto f = pl::pallas_call(kernel, {out, out, out, out},
                             {.name = "dot_" + std::to_string(m) + "_" + std::to_string(n), .backend = "cpu"});
    std::vector<pl::Array> got = f(a, b, a_t, b_t);
    const pl::Array ref = pl::matmul(a.astype(pl::f64), b.astype(pl::f64));
    const pl::Array abs_ref = pl::matmul(jnp::abs(a.astype(pl::f64)), jnp::abs(b.astype(pl::f64)));
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(within_dot_bound(got[i], ref, abs_ref, k)) << "variant " << i;
      // Over many elements the whole result cannot cancel: the sharper relative check holds too.
      if (m * n > 1) { EXPECT_TRUE(close(got[i], ref, 1e-6)) << "variant " << i; }
    }
  }
}

TEST(CpuDot, EveryOperandDtype) {
  Random rng;
  for (pl::DType t : {pl::f16, pl::bf16, pl::f64, pl::i8, pl::i16, pl::i32, pl::u8, pl::i64}) {
    SCOPED_TRACE(dtype_name(t));
    pl::Array as = is_float(t) ? rng.normal({19, 40}, t) : rng.uniform({19, 40}, is_unsigned(t) ? 0 : -100, 100, t);
    pl::Array bs = is_float(t) ? rng.normal({40, 23}, t) : rng.uniform({40, 23}, is_unsigned(t) ? 0 : -100, 100, t);
    auto kernel = [](Ref a, Ref b, Ref o, Ref ot) {
      o[pl::all] = pl::dot(a[pl::all], b[pl::all]);
      ot[pl::all] = pl::dot(b[pl::all], a[pl::all], true, true);
    };
    const pl::DType rt = t == pl::f64 ? pl::f64 : is_float(t) ? pl::f32 : t == pl::i64 ? pl::i64 : pl::i32;
    auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({19, 23}, rt), pl::ShapeDtype({23, 19}, rt)},
                                  {.name = std::string("dot_") + dtype_name(t)}, {as, bs});
    for (size_t i = 0; i < 2; ++i) {
      if (is_float(t)) EXPECT_TRUE(close(cpu[i], interp[i], t == pl::f64 ? 1e-14 : 1e-6)) << i;
      else EXPECT_TRUE(same(cpu[i], interp[i])) << i;
    }
  }
}

TEST(CpuDot, EdgeBlocksReadAndWriteArraysDirectly) {
  // 100 x 70 @ 70 x 90 on a grid of 48 x 40 output blocks: the last row and column of blocks
  // overhang the arrays. `direct` packs its operands straight from the refs and writes the
  // product straight into the output; `looped` walks K in masked blocks of 32 and accumulates in
  // the loop carry itself.
  Random rng;
  pl::Array a = rng.normal({100, 70}), b = rng.normal({70, 90});
  constexpr int64_t bm = 48, bn = 40, bk = 32;
  auto direct = [](Ref a_ref, Ref b_ref, Ref o_ref) { o_ref[pl::all] = pl::dot(a_ref[pl::all], b_ref[pl::all]); };
  auto looped = [](Ref a_ref, Ref b_ref, Ref o_ref) {
    Value sum = pl::fori_loop(0, pl::cdiv(int64_t{70}, bk), [&](Value k, Value acc) {
      Value col = k * bk + jnp::iota(pl::i32, {bm, bk}, 1);
      Value row = k * bk + jnp::iota(pl::i32, {bk, bn}, 0);
      Value ak = pl::load(a_ref, pl::idx(pl::slice(), pl::ds(k * bk, bk)), col < 70, 0.0f);
      Value bk_ = pl::load(b_ref, pl::idx(pl::ds(k * bk, bk), pl::slice()), row < 70, 0.0f);
      return acc + pl::dot(ak, bk_);
    }, jnp::zeros({bm, bn}));
    o_ref[pl::all] = sum;
  };
  pl::CallOptions opts{.grid = {pl::cdiv(int64_t{100}, bm), pl::cdiv(int64_t{90}, bn)},
                       .in_specs = {pl::BlockSpec({bm, 70}, [](pl::Index i, pl::Index) { return pl::idx(i, 0); }),
                                    pl::BlockSpec({70, bn}, [](pl::Index, pl::Index j) { return pl::idx(0, j); })},
                       .out_specs = {block2(bm, bn)}};
  const pl::Array ref = pl::matmul(a.astype(pl::f64), b.astype(pl::f64));
  opts.name = "dot_edge_direct";
  auto [cpu, interp] = run_both(direct, {pl::ShapeDtype({100, 90}, pl::f32)}, opts, {a, b});
  EXPECT_TRUE(close(cpu[0], ref, 1e-6));
  EXPECT_TRUE(close(cpu[0], interp[0], 1e-6));
  opts.name = "dot_edge_looped";
  auto [cpu2, interp2] = run_both(looped, {pl::ShapeDtype({100, 90}, pl::f32)}, opts, {a, b});
  EXPECT_TRUE(close(cpu2[0], ref, 1e-6));
  EXPECT_TRUE(close(cpu2[0], interp2[0], 1e-6));
}

TEST(CpuDot, AttentionStyleLoopWithTransposedKeys) {
  // q @ k.T with k loaded per step from an input ref, then s @ v accumulated in the carry.
  Random rng;
  const int64_t seq = 96, d = 32, block = 32;
  pl::Array qs = rng.normal({seq, d}), ks = rng.normal({seq, d}), vs = rng.normal({seq, d});
  auto kernel = [](Ref q_ref, Ref k_ref, Ref v_ref, Ref o_ref) {
    Value qb = q_ref[pl::all];
    Value o = pl::fori_loop(0, seq / block, [&](Value j, Value acc) {
      Value kb = pl::load(k_ref, pl::idx(pl::ds(j * block, block), pl::slice()));
      Value vb = pl::load(v_ref, pl::idx(pl::ds(j * block, block), pl::slice()));
      Value s = jnp::exp(pl::dot(qb, kb.T()) * 0.1f);
      return acc + pl::dot(s, vb);
    }, jnp::zeros({block, d}));
    o_ref[pl::all] = o;
  };
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({seq, d}, pl::f32)},
                                {.grid = {seq / block},
                                 .in_specs = {pl::BlockSpec({block, d}, [](pl::Index i) { return pl::idx(i, 0); }),
                                              pl::BlockSpec({seq, d}, [](pl::Index) { return pl::idx(0, 0); }),
                                              pl::BlockSpec({seq, d}, [](pl::Index) { return pl::idx(0, 0); })},
                                 .out_specs = {pl::BlockSpec({block, d}, [](pl::Index i) { return pl::idx(i, 0); })},
                                 .name = "attention_style"},
                                {qs, ks, vs});
  EXPECT_TRUE(close(cpu[0], interp[0], 1e-6));
}

}  // namespace
}  // namespace palladium::cpu_test
