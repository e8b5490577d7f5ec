// NumPy and Palladium exchange arrays through DLPack in one Python process (numpy_dlpack.py loads
// the probe library with ctypes); runs with the differential tests' virtual environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

std::string python() {
  if (const char* p = std::getenv("PALLADIUM_JAX_PYTHON"); p && *p) return p;
  const std::string venv = std::string(PL_BINARY_DIR) + "/jax-venv/bin/python";
  return std::filesystem::exists(venv) ? venv : "";
}

TEST(DLPackNumPy, ExchangesBothWaysInOneProcess) {
  const std::string py = python();
  if (py.empty()) {
    if (std::getenv("PALLADIUM_REQUIRE_JAX")) FAIL() << "no Python venv with NumPy (tools/setup_jax_venv.sh)";
    GTEST_SKIP() << "no Python venv with NumPy";
  }
  const std::string cmd =
      py + " " + std::string(PL_SOURCE_DIR) + "/tests/interop/numpy_dlpack.py " + PL_DLPACK_PROBE + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
