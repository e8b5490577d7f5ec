// Differential tests against real JAX Pallas: the same inputs (.npy) run through Pallas with
// interpret=True (tests/differential/pallas_reference.py, in the virtual environment that
// tools/setup_jax_venv.sh makes) and through Palladium; the results must match to float tolerance.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "ops/attention.h"
#include "palladium/palladium.h"

namespace pl = palladium;
namespace fs = std::filesystem;

namespace {

std::string python() {
  if (const char* p = std::getenv("PALLADIUM_JAX_PYTHON"); p && *p) return p;
  for (const std::string& dir : {std::string(PL_BINARY_DIR) + "/jax-venv", std::string(PL_SOURCE_DIR) + "/.venv"})
    if (fs::exists(dir + "/bin/python")) return dir + "/bin/python";
  return "";
}

// Runs one case of pallas_reference.py on `inputs`; returns its outputs by name.
std::map<std::string, pl::Array> run_pallas(const std::string& name, const std::map<std::string, pl::Array>& inputs,
                                            const std::string& params_json) {
  const std::string py = python();
  if (py.empty()) {
    if (std::getenv("PALLADIUM_REQUIRE_JAX")) ADD_FAILURE() << "no JAX venv (run tools/setup_jax_venv.sh)";
    return {};
  }
  fs::path dir = fs::temp_directory_path() / ("pl_diff_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [n, a] : inputs) pl::save_npy((dir / ("in_" + n + ".npy")).string(), a);
  std::ofstream(dir / "params.json") << params_json;
  const std::string script = std::string(PL_SOURCE_DIR) + "/tests/differential/pallas_reference.py";
  const std::string cmd = py + " " + script + " " + name + " " + dir.string() + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::map<std::string, pl::Array> out;
  EXPECT_EQ(rc, 0) << cmd;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string f = entry.path().filename().string();
    if (f.rfind("out_", 0) == 0) out[f.substr(4, f.size() - 8)] = pl::load_npy(entry.path().string());
  }
  fs::remove_all(dir);
  return out;
}

#define REQUIRE_JAX()                                               \
  if (python().empty() && !std::getenv("PALLADIUM_REQUIRE_JAX"))    \
  GTEST_SKIP() << "JAX venv not found; tools/setup_jax_venv.sh makes one"

pl::Callable<pl::Array> matmul_2x2(int64_t m, int64_t k, int64_t n, bool relu) {
  auto kernel = [relu](pl::Ref x, pl::Ref y, pl::Ref z) {
    pl::Value r = pl::dot(x[pl::all], y[pl::all]);
    z[pl::all] = relu ? pl::nn::relu(r) : r;
  };
  return pl::pallas_call(
      kernel, pl::ShapeDtype({m, n}, pl::f32),
      {.grid = {2, 2},
       .in_specs = {pl::BlockSpec({m / 2, k}, [](pl::Index i, pl::Index) { return pl::idx(i, 0); }),
                    pl::BlockSpec({k, n / 2}, [](pl::Index, pl::Index j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({m / 2, n / 2}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); })}});
}

}  // namespace

TEST(DifferentialPallas, AddVectors) {
  REQUIRE_JAX();
  auto keys = pl::random::split(pl::random::key(11));
  pl::Array x = pl::random::normal(keys[0], {1000}), y = pl::random::normal(keys[1], {1000});
  auto add = pl::pallas_call([](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = a[pl::all] + b[pl::all]; },
                             pl::ShapeDtype({1000}, pl::f32));
  auto ref = run_pallas("add_vectors", {{"x", x}, {"y", y}}, "{}");
  ASSERT_TRUE(ref.count("o"));
  EXPECT_TRUE(pl::array_equal(add(x, y), ref["o"]));
}

TEST(DifferentialPallas, Iota) {
  REQUIRE_JAX();
  auto iota = pl::pallas_call([](pl::Ref o) { pl::Value i = pl::program_id(0); o[i] = i; }, pl::ShapeDtype({37}, pl::i32),
                              {.grid = {37}});
  auto ref = run_pallas("iota", {}, R"({"size": 37})");
  ASSERT_TRUE(ref.count("o"));
  EXPECT_TRUE(pl::array_equal(iota(), ref["o"]));
}

TEST(DifferentialPallas, MatmulAndFusedRelu) {
  REQUIRE_JAX();
  auto keys = pl::random::split(pl::random::key(12));
  pl::Array x = pl::random::normal(keys[0], {256, 192}), y = pl::random::normal(keys[1], {192, 128});
  for (bool relu : {false, true}) {
    auto ref = run_pallas(relu ? "matmul_relu" : "matmul", {{"x", x}, {"y", y}}, "{}");
    ASSERT_TRUE(ref.count("o"));
    EXPECT_LT(pl::rel_error(matmul_2x2(256, 192, 128, relu)(x, y), ref["o"]), 1e-6) << "relu=" << relu;
  }
}

TEST(DifferentialPallas, VmapMatmulRelu) {
  REQUIRE_JAX();
  auto keys = pl::random::split(pl::random::key(13));
  pl::Array x = pl::random::normal(keys[0], {4, 128, 64}), y = pl::random::normal(keys[1], {4, 64, 128});
  auto ref = run_pallas("vmap_matmul_relu", {{"x", x}, {"y", y}}, "{}");
  ASSERT_TRUE(ref.count("o"));
  EXPECT_LT(pl::rel_error(pl::vmap(matmul_2x2(128, 64, 128, true))(x, y), ref["o"]), 1e-6);
}

class DifferentialAttention : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(DifferentialAttention, ForwardAndBackward) {
  REQUIRE_JAX();
  auto [causal, segmented] = GetParam();
  const int64_t batch = 2, seq = 128, heads = 2, dim = 32;
  auto keys = pl::random::split(pl::random::key(14 + 2 * causal + segmented), 4);
  pl::Shape s{batch, seq, heads, dim};
  pl::Array q = pl::random::normal(keys[0], s), k = pl::random::normal(keys[1], s);
  pl::Array v = pl::random::normal(keys[2], s), dout = pl::random::normal(keys[3], s);
  std::vector<int32_t> ids(static_cast<size_t>(batch * seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i % seq) / 48);
  pl::Array seg = segmented ? pl::from_vector(ids, {batch, seq}) : pl::Array();
  pl::ops::MhaOptions opt{.sm_scale = 0.2f, .causal = causal, .block_q = 32, .block_k = 32};
  opt.backward_block = 0;  // the seed's blocking, as JAX runs it
  std::map<std::string, pl::Array> in{{"q", q}, {"k", k}, {"v", v}};
  if (segmented) in["segment_ids"] = seg;
  const std::string params = std::string("{\"causal\": ") + (causal ? "true" : "false") +
                             ", \"sm_scale\": 0.2, \"block_q\": 32, \"block_k\": 32}";

  auto fwd = run_pallas("mha_forward", in, params);
  ASSERT_TRUE(fwd.count("o") && fwd.count("lse"));
  auto [out, lse] = pl::ops::mha_forward(q, k, v, seg, opt);
  EXPECT_LT(pl::rel_error(out, fwd["o"]), 1e-5);
  EXPECT_LT(pl::rel_error(lse, fwd["lse"]), 1e-5);

  in["do"] = dout;
  auto bwd = run_pallas("mha_backward", in, params);
  ASSERT_TRUE(bwd.count("dq") && bwd.count("dk") && bwd.count("dv"));
  auto [dq, dk, dv] = pl::ops::mha_vjp(q, k, v, seg, opt).backward(dout);
  EXPECT_LT(pl::rel_error(dq, bwd["dq"]), 1e-5);
  EXPECT_LT(pl::rel_error(dk, bwd["dk"]), 1e-5);
  EXPECT_LT(pl::rel_error(dv, bwd["dv"]), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Masks, DifferentialAttention, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& param_info) {
                           return std::string(std::get<0>(param_info.param) ? "Causal" : "Full") +
                                  (std::get<1>(param_info.param) ? "Segmented" : "");
                         });
