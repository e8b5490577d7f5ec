// Devices and transfers, device-resident calls, the compile cache, errors and debug output.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>

#include "backends/cuda/codegen.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_support.h"

namespace palladium::cudatest {
namespace {

TEST(CudaDevice, BackendAvailabilityIsConsistent) {
  // Without a GPU the backend says why; with one, cuda is the default backend.
  const std::string why = backend::get("cuda").unavailable_reason();
  if (gpu_required()) {
    EXPECT_EQ(mode(), Mode::Gpu) << "PALLADIUM_REQUIRE_GPU=1: " << why;
    const auto names = backend::available_names();
    EXPECT_NE(std::find(names.begin(), names.end(), "cuda"), names.end()) << "cuda missing from the kernel suite's backends";
  }
  if (mode() == Mode::Gpu) {
    EXPECT_EQ(why, "");
    EXPECT_GE(cuda_device_count(), 1);
    if (const char* env = std::getenv("PALLADIUM_BACKEND"); !env || !*env) {
      EXPECT_EQ(backend::default_name(), "cuda");
    }
  } else if (mode() == Mode::Skip) {
    EXPECT_NE(why, "");
  }
}

TEST(CudaDevice, TransfersRoundTripEveryDtype) {
  PL_REQUIRE_GPU();
  for (DType t : {bool_, i8, i16, i32, i64, u8, u32, f16, bf16, f32, f64}) {
    Array a = normal(1, {3, 129}).astype(t);
    Array d = to_device(a, cuda_device(0));
    EXPECT_EQ(d.device(), cuda_device(0));
    EXPECT_TRUE(agree(to_host(d), a, 0)) << dtype_name(t);
    EXPECT_TRUE(agree(to_host(to_device(d, cuda_device(0))), a, 0)) << dtype_name(t);
  }
  const int n = cuda_device_count();
  EXPECT_THAT(test_support::error_message([&] { (void)cuda_device(n); }),
              ::testing::HasSubstr("cuda:" + std::to_string(n) + " does not exist"));
}

// Transfers of the undefined (none) Array say so, with or without a GPU.
TEST(CudaDevice, TransfersOfAnUndefinedArray) {
  EXPECT_THAT(test_support::error_message([] { (void)to_host(Array()); }),
              ::testing::HasSubstr("to_host: the array is undefined (none)"));
  EXPECT_THAT(test_support::error_message([] { (void)to_device(Array(), Device{Device::cuda, 0}); }),
              ::testing::HasSubstr("to_device: the array is undefined (none)"));
}

TEST(CudaDevice, DeviceResidentCallsKeepOutputsOnTheDevice) {
  PL_REQUIRE_GPU();
  auto add = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; },
                             pl::ShapeDtype({1000}, f32), {.backend = "cuda"});
  Array x = normal(2, {1000}), y = normal(3, {1000});
  Array on_device = add(to_device(x, cuda_device(0)), to_device(y, cuda_device(0)));
  EXPECT_EQ(on_device.device().kind, Device::cuda);
  Array chained = add(on_device, on_device);  // no host round trip in between
  Array host = add(x, y);
  EXPECT_EQ(host.device().kind, Device::cpu);
  EXPECT_TRUE(agree(to_host(on_device), host, 0));
  EXPECT_TRUE(agree(to_host(chained), add(host, host), 0));
}

// grad of a loss over device Arrays, with a device Array captured by the loss: the gradient
// program's host constants follow the device (they once met the device Arrays on the host side).
TEST(CudaDevice, GradOfALossOverDeviceArrays) {
  PL_REQUIRE_GPU();
  const pl::Device gpu{pl::Device::cuda, 0};
  Array x = normal(41, {8, 32}), w = normal(42, {8, 32});
  Array dx = pl::to_device(x, gpu), dw = pl::to_device(w, gpu);
  // pl::ones made inside the traced loss is a host constant of the gradient program.
  auto loss = [dw](const Array& a) { return pl::jnp::sum(pl::jnp::tanh(a + pl::ones({8, 32})) * dw); };
  Array g = pl::to_host(pl::grad(loss)(dx));
  Array g_jit = pl::to_host(pl::jit(pl::grad(loss))(dx));
  Array want(x.shape(), pl::f64);
  for (int64_t i = 0; i < x.size(); ++i) want.set(i, (1.0 - std::pow(std::tanh(x.get(i) + 1.0), 2)) * w.get(i));
  EXPECT_LT(pl::rel_error(g, want), 1e-5);
  EXPECT_LT(pl::rel_error(g_jit, want), 1e-5);
}

TEST(CudaCompiler, NvrtcFailureNamesKernelAndShowsSource) {
  PL_REQUIRE_NVRTC_COMPILER();
  cuda::GeneratedKernel g;
  g.entry = "broken";
  g.source = "#include \"cuda/palladium.h\"\nextern \"C\" __global__ void broken() {\n  int x = ;\n}\n";
  try {
    cuda::compile_to_cubin(g, "my_kernel", cuda::target_for(9, 0), false, false);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("my_kernel"), std::string::npos) << msg;
    EXPECT_NE(msg.find(">> "), std::string::npos) << msg;      // the marked failing line
    EXPECT_NE(msg.find("int x = ;"), std::string::npos) << msg;
  }
}

TEST(CudaCompiler, DiskCacheHitsAndRejectsCorruptEntries) {
  PL_REQUIRE_NVRTC_COMPILER();
  const std::string dir = (std::filesystem::temp_directory_path() / ("pl-cuda-cache-test-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  test_support::ScopedEnv cache_dir{"PALLADIUM_CACHE_DIR", dir};
  cuda::GeneratedKernel g;
  g.entry = "k";
  g.source = "#include \"cuda/palladium.h\"\nextern \"C\" __global__ void k(float* p) { p[0] = 1.0f; }\n";
  const cuda::Target target = cuda::target_for(9, 0);
  cuda::CompileResult first = cuda::compile_to_cubin(g, "k", target, true, false);
  cuda::CompileResult second = cuda::compile_to_cubin(g, "k", target, true, false);
  EXPECT_FALSE(first.from_cache);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(first.cubin, second.cubin);
  // Corrupt every entry: the next compile must not load it.
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir))
    if (f.is_regular_file()) std::ofstream(f.path(), std::ios::binary | std::ios::trunc) << "garbage";
  cuda::CompileResult third = cuda::compile_to_cubin(g, "k", target, true, false);
  EXPECT_FALSE(third.from_cache);
  EXPECT_EQ(third.cubin, first.cubin);
  // A different architecture is a different key.
  EXPECT_FALSE(cuda::compile_to_cubin(g, "k", cuda::target_for(8, 0), true, false).from_cache);
  std::filesystem::remove_all(dir);
}

TEST(CudaCompiler, DebugWritesSourceAndPtx) {
  PL_REQUIRE_NVRTC();
  const std::string dir = (std::filesystem::temp_directory_path() / ("pl-cuda-debug-" + std::to_string(::getpid()))).string();
  std::string printed;
  {
    test_support::ScopedEnv debug_dir{"PALLADIUM_DEBUG_DIR", dir};
    testing::internal::CaptureStdout();
    auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.0f; }, pl::ShapeDtype({64}, f32),
                             {.name = "debugged", .debug = true, .backend = "cuda"});
    Array out = k(normal(4, {64}));
    printed = testing::internal::GetCapturedStdout();
  }
  EXPECT_NE(printed.find(dir + "/pl_debugged.cu"), std::string::npos) << printed;
  EXPECT_TRUE(std::filesystem::exists(dir + "/pl_debugged.cu"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/pl_debugged.ptx"));
  std::ifstream ptx(dir + "/pl_debugged.ptx");
  std::string text((std::istreambuf_iterator<char>(ptx)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(".entry pl_debugged"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(CudaCompiler, CodegenTargetsTheDeviceArchitecture) {
  EXPECT_EQ(cuda::target_for(9, 0).arch_flag(), "sm_90a");
  EXPECT_EQ(cuda::target_for(8, 0).arch_flag(), "sm_80");
  EXPECT_EQ(cuda::target_for(8, 9).arch_flag(), "sm_89");
}

}  // namespace
}  // namespace palladium::cudatest
