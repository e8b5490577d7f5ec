// The kernel library (ops/) on every available backend: the seed attention forward, backward and
// custom VJP against float64 references, and IndRNN against the plain loop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "backends/backend.h"
#include "ops/attention.h"
#include "ops/call_cache.h"
#include "ops/indrnn.h"
#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace pl = palladium;

namespace {

struct Case {
  bool causal, segmented;
  pl::DType dtype;
  int64_t seq, block;
};

class Attention : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(Attention, ForwardBackwardMatchFloat64Reference) {
  const auto& [backend, c] = GetParam();
  const int64_t batch = 2, heads = 3, dim = 16;
  auto keys = pl::random::split(pl::random::key(100 + c.seq + c.causal * 7 + c.segmented * 13), 4);
  pl::Shape s{batch, c.seq, heads, dim};
  pl::Array q = pl::random::normal(keys[0], s, c.dtype), k = pl::random::normal(keys[1], s, c.dtype);
  pl::Array v = pl::random::normal(keys[2], s, c.dtype), dout = pl::random::normal(keys[3], s, c.dtype);
  pl::Array seg;
  if (c.segmented) {
    std::vector<int32_t> ids(static_cast<size_t>(batch * c.seq));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i % c.seq) * 3 / c.seq + i / c.seq);
    seg = pl::from_vector(ids, {batch, c.seq});
  }
  pl::ops::MhaOptions opt{.sm_scale = 0.25f, .causal = c.causal, .block_q = c.block, .block_k = c.block,
                          .backend = backend};
  opt.backward_block = c.block;
  auto vjp = pl::ops::mha_vjp(q, k, v, seg, opt);
  auto [dq, dk, dv] = vjp.backward(dout);
  auto ref = pl::ops::mha_reference(q, k, v, seg, opt.sm_scale, c.causal);
  auto [rdq, rdk, rdv] = pl::ops::mha_reference_backward(q, k, v, seg, dout, opt.sm_scale, c.causal);
  // About twice the errors measured at these sizes: float32 arithmetic near 3e-7; 16-bit inputs and
  // 16-bit probabilities in the dots near 2.6e-3 (bfloat16) and 3.4e-4 (float16). lse is float32
  // from exact float32 products of the inputs whatever their dtype: near 4e-8.
  const double tol = c.dtype == pl::f32 ? 2e-6 : c.dtype == pl::f16 ? 1e-3 : 5e-3;
  EXPECT_LT(pl::rel_error(vjp.out, ref.out), tol);
  EXPECT_LT(pl::rel_error(pl::ops::mha(q, k, v, seg, opt), ref.out), tol);
  auto [out, lse] = pl::ops::mha_forward(q, k, v, seg, opt);
  EXPECT_LT(pl::rel_error(lse, ref.lse), 1e-6);
  EXPECT_LT(pl::rel_error(dq, rdq), tol);
  EXPECT_LT(pl::rel_error(dk, rdk), tol);
  EXPECT_LT(pl::rel_error(dv, rdv), tol);
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<std::string, Case>>& param_info) {
  const Case& c = std::get<1>(param_info.param);
  return std::get<0>(param_info.param) + "_" + (c.causal ? "causal" : "full") + (c.segmented ? "_segments" : "") + "_" +
         pl::dtype_name(c.dtype) + "_s" + std::to_string(c.seq) + "_b" + std::to_string(c.block);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, Attention,
    ::testing::Combine(::testing::ValuesIn(pl::backend::available_names()),
                       ::testing::Values(Case{false, false, pl::f32, 64, 16}, Case{true, false, pl::f32, 64, 16},
                                         Case{false, true, pl::f32, 96, 32}, Case{true, true, pl::f32, 64, 32},
                                         Case{true, true, pl::bf16, 64, 16}, Case{false, false, pl::f16, 32, 32})),
    case_name);

// MhaBackwardDq::Atomic: dq accumulated with atomic adds during the dk/dv scan (five dots per
// block pair) equals the float64 reference on every backend, as the seed's separate dq scan does:
// causal with segments in bfloat16, full in float32, causal with a query block half the key block
// (backward_block_q), and under jit(grad).
class AttentionAtomicDq : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionAtomicDq, GradientsMatchFloat64Reference) {
  const std::string backend = GetParam();
  struct Setup {
    bool causal, segmented;
    pl::DType dtype;
    int64_t seq, block, block_q;  // block_q 0: block
    double tol;  // as the Attention cases above
  };
  for (const Setup& c : {Setup{true, true, pl::bf16, 64, 16, 0, 5e-3}, Setup{false, false, pl::f32, 96, 32, 0, 2e-6},
                         Setup{true, false, pl::f32, 96, 32, 16, 2e-6}}) {
    SCOPED_TRACE("block " + std::to_string(c.block) + ", block_q " + std::to_string(c.block_q));
    auto keys = pl::random::split(pl::random::key(300 + c.seq + c.causal), 4);
    const pl::Shape s{2, c.seq, 3, 16};
    pl::Array q = pl::random::normal(keys[0], s, c.dtype), k = pl::random::normal(keys[1], s, c.dtype);
    pl::Array v = pl::random::normal(keys[2], s, c.dtype), dout = pl::random::normal(keys[3], s, c.dtype);
    pl::Array seg;
    if (c.segmented) {
      std::vector<int32_t> ids(static_cast<size_t>(2 * c.seq));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i % c.seq) * 3 / c.seq + i / c.seq);
      seg = pl::from_vector(ids, {2, c.seq});
    }
    pl::ops::MhaOptions opt{.sm_scale = 0.25f, .causal = c.causal, .block_q = c.block, .block_k = c.block,
                            .backend = backend};
    opt.backward_block = c.block;
    opt.backward_block_q = c.block_q;
    opt.backward_dq = pl::ops::MhaBackwardDq::Atomic;
    auto [dq, dk, dv] = pl::ops::mha_vjp(q, k, v, seg, opt).backward(dout);
    EXPECT_EQ(dq.dtype(), c.dtype);
    auto [rdq, rdk, rdv] = pl::ops::mha_reference_backward(q, k, v, seg, dout, opt.sm_scale, c.causal);
    EXPECT_LT(pl::rel_error(dq, rdq), c.tol) << pl::dtype_name(c.dtype);
    EXPECT_LT(pl::rel_error(dk, rdk), c.tol) << pl::dtype_name(c.dtype);
    EXPECT_LT(pl::rel_error(dv, rdv), c.tol) << pl::dtype_name(c.dtype);
    auto loss = [opt, seg](const pl::Array& q_, const pl::Array& k_, const pl::Array& v_, const pl::Array& d_) {
      return pl::jnp::sum(pl::ops::mha(q_, k_, v_, seg, opt) * d_);
    };
    auto [jq, jk, jv] = pl::jit(pl::grad<0, 1, 2>(loss))(q, k, v, dout);
    EXPECT_LT(pl::rel_error(jq, rdq), c.tol) << "jit(grad) " << pl::dtype_name(c.dtype);
    EXPECT_LT(pl::rel_error(jk, rdk), c.tol) << "jit(grad) " << pl::dtype_name(c.dtype);
    EXPECT_LT(pl::rel_error(jv, rdv), c.tol) << "jit(grad) " << pl::dtype_name(c.dtype);
    if (backend == "cuda") {  // device arrays in and out: the float32 dq is cast on the GPU
      auto dev = [](const pl::Array& a) { return a.defined() ? pl::to_device(a, pl::cuda_device()) : a; };
      auto [gq, gk, gv] = pl::ops::mha_vjp(dev(q), dev(k), dev(v), dev(seg), opt).backward(dev(dout));
      EXPECT_LT(pl::rel_error(pl::to_host(gq), rdq), c.tol) << "device arrays " << pl::dtype_name(c.dtype);
      EXPECT_LT(pl::rel_error(pl::to_host(gk), rdk), c.tol) << "device arrays " << pl::dtype_name(c.dtype);
      EXPECT_LT(pl::rel_error(pl::to_host(gv), rdv), c.tol) << "device arrays " << pl::dtype_name(c.dtype);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionAtomicDq, ::testing::ValuesIn(pl::backend::available_names()),
                         [](const auto& param_info) { return param_info.param; });

// Regression: ops keep one pallas_call per configuration, and that call's result dtypes were
// once fixed by the first inputs it saw, so float32 inputs after bfloat16 ones at the same
// configuration came back as bfloat16 (a 2e-3 error, silently).
TEST(Attention, SameConfigurationInBfloat16ThenFloat32) {
  const pl::Shape s{1, 64, 2, 16};
  auto keys = pl::random::split(pl::random::key(77), 4);
  pl::Array q = pl::random::normal(keys[0], s), k = pl::random::normal(keys[1], s);
  pl::Array v = pl::random::normal(keys[2], s), dout = pl::random::normal(keys[3], s);
  pl::ops::MhaOptions opt{.sm_scale = 0.3f, .causal = true, .block_q = 32, .block_k = 32, .backend = "interpret"};
  auto low = pl::ops::mha_vjp(q.astype(pl::bf16), k.astype(pl::bf16), v.astype(pl::bf16), pl::Array(), opt);
  auto [lq, lk, lv] = low.backward(dout.astype(pl::bf16));
  EXPECT_EQ(low.out.dtype(), pl::bf16);
  EXPECT_EQ(lq.dtype(), pl::bf16);
  auto high = pl::ops::mha_vjp(q, k, v, pl::Array(), opt);
  auto [dq, dk, dv] = high.backward(dout);
  for (const pl::Array* a : {&high.out, &dq, &dk, &dv}) EXPECT_EQ(a->dtype(), pl::f32);
  auto ref = pl::ops::mha_reference(q, k, v, pl::Array(), opt.sm_scale, opt.causal);
  auto [rdq, rdk, rdv] = pl::ops::mha_reference_backward(q, k, v, pl::Array(), dout, opt.sm_scale, opt.causal);
  EXPECT_LT(pl::rel_error(high.out, ref.out), 1e-5);
  EXPECT_LT(pl::rel_error(pl::ops::mha(q, k, v, pl::Array(), opt), ref.out), 1e-5);
  EXPECT_LT(pl::rel_error(dq, rdq), 1e-5);
  EXPECT_LT(pl::rel_error(dk, rdk), 1e-5);
  EXPECT_LT(pl::rel_error(dv, rdv), 1e-5);
}

TEST(AttentionErrors, BackwardNeedsEqualBlocks) {
  pl::Array q = pl::random::normal(pl::random::key(1), {1, 64, 1, 16});
  pl::ops::MhaOptions opt{.block_q = 32, .block_k = 16};
  opt.backward_block = 0;  // the seed's way: the forward's blocks
  const auto forward = pl::ops::mha_forward(q, q, q, pl::Array(), opt);
  const pl::Array& out = std::get<0>(forward);
  const pl::Array& lse = std::get<1>(forward);
  EXPECT_THAT(pl::test_support::error_message([&] { pl::ops::mha_backward(q, q, q, pl::Array(), out, lse, out, opt); }),
              ::testing::HasSubstr("mha_backward: block_q (32) must equal block_k (16)"));
}

// The backward runs in its own blocks (backward_block, 64 by default) whatever the forward's are:
// unequal forward blocks are fine, and the gradients match the float64 reference.
TEST(Attention, BackwardBlocksIndependentOfTheForward) {
  auto keys = pl::random::split(pl::random::key(5), 4);
  const pl::Shape s{1, 128, 2, 16};
  pl::Array q = pl::random::normal(keys[0], s), k = pl::random::normal(keys[1], s);
  pl::Array v = pl::random::normal(keys[2], s), dout = pl::random::normal(keys[3], s);
  pl::ops::MhaOptions opt{.sm_scale = 0.25f, .causal = true, .block_q = 64, .block_k = 32, .backend = "interpret"};
  opt.backward_block = 32;
  auto vjp = pl::ops::mha_vjp(q, k, v, pl::Array(), opt);
  auto [dq, dk, dv] = vjp.backward(dout);
  auto [rdq, rdk, rdv] = pl::ops::mha_reference_backward(q, k, v, pl::Array(), dout, opt.sm_scale, opt.causal);
  EXPECT_LT(pl::rel_error(dq, rdq), 1e-5);
  EXPECT_LT(pl::rel_error(dk, rdk), 1e-5);
  EXPECT_LT(pl::rel_error(dv, rdv), 1e-5);
  opt.backward_block = -8;
  EXPECT_THAT(pl::test_support::error_message([&] { (void)pl::ops::mha_vjp(q, k, v, pl::Array(), opt).backward(dout); }),
              ::testing::HasSubstr("mha_backward: backward_block must be positive, or 0 for the forward's blocks, got -8"));
  opt.backward_block = 32;
  opt.backward_block_q = 16;  // unequal blocks need the atomic dq
  EXPECT_THAT(pl::test_support::error_message([&] { (void)pl::ops::mha_vjp(q, k, v, pl::Array(), opt).backward(dout); }),
              ::testing::HasSubstr("mha_backward: backward_block_q (16) needs backward_dq = Atomic and a positive "
                                   "backward_block"));
  opt.backward_dq = pl::ops::MhaBackwardDq::Atomic;
  opt.backward_block_q = -16;
  EXPECT_THAT(pl::test_support::error_message([&] { (void)pl::ops::mha_vjp(q, k, v, pl::Array(), opt).backward(dout); }),
              ::testing::HasSubstr("mha_backward: backward_block_q must be positive, or 0 for backward_block, got -16"));
}

// MhaOptions::autotune times the block shapes that divide the sequence (here 128 x 128, 128 x 64,
// 64 x 128 and 64 x 64) at the first call and runs the fastest: forward, residuals and gradients
// through the custom VJP equal the float64 reference, inside jit(grad) too.
TEST(Attention, AutotunedBlocksMatchFloat64Reference) {
  std::string backend = "interpret";
  for (const std::string& b : pl::available_backends())
    if (b == "cpu") backend = b;
  const std::string dir = (std::filesystem::temp_directory_path() / ("pl-mha-autotune-" + std::to_string(::getpid()))).string();
  pl::test_support::ScopedEnv cache("PALLADIUM_CACHE_DIR", dir);
  auto keys = pl::random::split(pl::random::key(9), 4);
  const pl::Shape s{1, 256, 2, 16};
  pl::Array q = pl::random::normal(keys[0], s), k = pl::random::normal(keys[1], s);
  pl::Array v = pl::random::normal(keys[2], s), dout = pl::random::normal(keys[3], s);
  pl::ops::MhaOptions opt{.sm_scale = 0.25f, .causal = true, .block_q = 7, .block_k = 7, .backend = backend};
  opt.autotune = true;  // block_q and block_k of 7 would be an error: the forward ignores them
  auto ref = pl::ops::mha_reference(q, k, v, pl::Array(), opt.sm_scale, opt.causal);
  EXPECT_LT(pl::rel_error(pl::ops::mha(q, k, v, pl::Array(), opt), ref.out), 1e-5);
  opt.backward_block = 64;
  auto loss = [opt](const pl::Array& q_, const pl::Array& k_, const pl::Array& v_, const pl::Array& d_) {
    return pl::jnp::sum(pl::ops::mha(q_, k_, v_, pl::Array(), opt) * d_);
  };
  auto [dq, dk, dv] = pl::jit(pl::grad<0, 1, 2>(loss))(q, k, v, dout);
  auto [rdq, rdk, rdv] = pl::ops::mha_reference_backward(q, k, v, pl::Array(), dout, opt.sm_scale, opt.causal);
  EXPECT_LT(pl::rel_error(dq, rdq), 1e-5);
  EXPECT_LT(pl::rel_error(dk, rdk), 1e-5);
  EXPECT_LT(pl::rel_error(dv, rdv), 1e-5);
  std::filesystem::remove_all(dir);
}

TEST(AttentionErrors, ShapesDtypesBlocksAndSegmentIds) {
  using pl::test_support::error_message;
  using ::testing::HasSubstr;
  pl::Array q = pl::random::normal(pl::random::key(2), {1, 32, 2, 8});
  pl::Array k = pl::random::normal(pl::random::key(3), {1, 32, 2, 16});
  EXPECT_THAT(error_message([&] { pl::ops::mha(q, k, k, pl::Array()); }), HasSubstr("mha: q, k, v shapes differ"));
  EXPECT_THAT(error_message([&] { pl::ops::mha(q.reshape({32, 2, 8}), q, q, pl::Array()); }),
              HasSubstr("mha: q must be (batch, seq_len, num_heads, head_dim), got (32, 2, 8)"));
  EXPECT_THAT(error_message([&] { pl::ops::mha(q, q.astype(pl::bf16), q, pl::Array()); }),
              HasSubstr("mha: q, k, v dtypes differ"));
  EXPECT_THAT(error_message([&] { pl::ops::mha(q, q, q, pl::Array(), {.block_q = 0}); }),
              HasSubstr("mha: block sizes must be positive, got block_q 0 and block_k 128"));
  // A partial last block would read past the end of k and v (silently wrong on compiled backends).
  pl::Array q40 = pl::random::normal(pl::random::key(4), {1, 40, 1, 8});
  EXPECT_THAT(error_message([&] { pl::ops::mha(q40, q40, q40, pl::Array(), {.block_q = 32, .block_k = 32}); }),
              HasSubstr("mha: seq_len (40) must be a multiple of block_q (32) and block_k (32)"));
  EXPECT_THAT(error_message([&] { pl::ops::mha_preprocess_backward(q40, q40, {.block_q = 16}); }),
              HasSubstr("mha_preprocess_backward: seq_len (40) must be a positive multiple of block_q (16)"));
  EXPECT_THAT(error_message([&] { pl::ops::mha(q, q, q, pl::zeros({1, 31}, pl::i32)); }),
              HasSubstr("mha: segment_ids must be int32 (batch, seq_len) = (1, 32), got int32(1, 31)"));
}

// Library ops keep one pallas_call per configuration; scales that print alike at six digits must
// still be two configurations.
TEST(CallCache, KeysWriteFloatsExactly) {
  EXPECT_NE(pl::ops::exact(0.1020621f), pl::ops::exact(0.1020620f));
  pl::CallOptions c{.name = "k"};
  EXPECT_NE(pl::ops::call_key("s=" + pl::ops::exact(0.1020621f), c, {}),
            pl::ops::call_key("s=" + pl::ops::exact(0.1020620f), c, {}));
  const std::vector<pl::ShapeDtype> bf{{{4}, pl::bf16}}, f{{{4}, pl::f32}};
  EXPECT_NE(pl::ops::call_key("", c, bf), pl::ops::call_key("", c, f));
  pl::CallOptions fast = c;
  fast.compiler_params.fast_math = true;
  EXPECT_NE(pl::ops::call_key("", c, f), pl::ops::call_key("", fast, f));
}

class IndRNN : public ::testing::TestWithParam<std::tuple<std::string, int64_t>> {};

TEST_P(IndRNN, MatchesPlainLoop) {
  const auto& [backend, block] = GetParam();
  auto keys = pl::random::split(pl::random::key(9 + block), 3);
  pl::Array x = pl::random::normal(keys[0], {200, 100}), u = pl::random::uniform(keys[1], {100});
  pl::Array h0 = pl::random::normal(keys[2], {100});
  EXPECT_LT(pl::rel_error(pl::ops::indrnn(x, u, h0, block, backend), pl::ops::indrnn_reference(x, u, h0)), 1e-6);
}

TEST(IndRNNErrors, Shapes) {
  pl::Array x = pl::random::normal(pl::random::key(1), {10, 8}), u = pl::random::normal(pl::random::key(2), {7});
  EXPECT_THAT(pl::test_support::error_message([&] { pl::ops::indrnn(x, u, u); }),
              ::testing::HasSubstr("indrnn: expects x (T, F), u (F,), h0 (F,), got (10, 8), (7,), (7,)"));
}

INSTANTIATE_TEST_SUITE_P(Backends, IndRNN,
                         ::testing::Combine(::testing::ValuesIn(pl::backend::available_names()),
                                            ::testing::Values(1, 16, 64, 128)),
                         [](const auto& param_info) {
                           return std::get<0>(param_info.param) + "_block" + std::to_string(std::get<1>(param_info.param));
                         });

}  // namespace
