// Errors of the cpu backend: no host compiler, a compile failure, debug output, kernels it
// refuses, and the shared source-context helpers.
#include <filesystem>
#include <fstream>

#include "backends/common/source_context.h"
#include "tests/cpu/cpu_test_util.h"

namespace palladium::cpu_test {
namespace {

using pl::Ref;

using test_support::error_message;
using test_support::ScopedEnv;

auto add_one() {
  return pl::pallas_call([](Ref x, Ref o) { o[pl::all] = x[pl::all] + 1.0f; }, pl::ShapeDtype({8}, pl::f32),
                         {.name = "add_one", .backend = "cpu"});
}

TEST(CpuErrors, NoHostCompilerSaysWhatWasLookedForAndHowToUseTheInterpreter) {
  ScopedEnv cxx("CXX", "/nonexistent/bin/c++");
  const std::string why = pl::cpu::backend().unavailable_reason();
  EXPECT_NE(why.find("CXX='/nonexistent/bin/c++'"), std::string::npos) << why;
  EXPECT_NE(why.find("PALLADIUM_BACKEND=interpret"), std::string::npos) << why;
  const std::string err = error_message([] { add_one()(pl::zeros({8})); });
  EXPECT_NE(err.find("backend 'cpu' is unavailable"), std::string::npos) << err;
  EXPECT_NE(err.find("interpret"), std::string::npos) << err;
  if (pl::backend::get("cuda").unavailable_reason().empty()) GTEST_SKIP() << "cuda is the default here";
  ScopedEnv no_choice("PALLADIUM_BACKEND", "");
  EXPECT_EQ(pl::backend::default_name(), "interpret");
}

TEST(CpuErrors, CompileFailureNamesTheKernelAndShowsTheSource) {
  pl::cpu::set_source_transform_for_testing([](const std::string& s) {
    std::string out = s;
    const std::string marker = "(void)program;";
    out.insert(out.find(marker) + marker.size(), "\n  this_is_not_cpp = 42;");
    return out;
  });
  const std::string err = error_message([] {
    pl::pallas_call([](Ref x, Ref o) { o[pl::all] = x[pl::all] * 3.0f; }, pl::ShapeDtype({8}, pl::f32),
                    {.name = "broken_kernel", .backend = "cpu"})(pl::zeros({8}));
  });
  pl::cpu::set_source_transform_for_testing({});
  EXPECT_NE(err.find("pallas_call 'broken_kernel'"), std::string::npos) << err;
  EXPECT_NE(err.find("rejected the cpu backend's generated C++"), std::string::npos) << err;
  EXPECT_NE(err.find("generated source around line"), std::string::npos) << err;
  EXPECT_NE(err.find(">> "), std::string::npos) << err;
  const std::string marked = err.substr(err.find(">> "));
  EXPECT_NE(marked.substr(0, marked.find('\n')).find("this_is_not_cpp"), std::string::npos) << err;
  // The failed build keeps its files for the user; the test removes them.
  const size_t open = err.find("generated C++ ("), close = err.find("kernel.cc)", open);
  if (open != std::string::npos && close != std::string::npos) {
    const std::filesystem::path source = err.substr(open + 15, close + 9 - (open + 15));
    EXPECT_TRUE(std::filesystem::exists(source)) << source;
    std::error_code ec;
    std::filesystem::remove_all(source.parent_path(), ec);
  }
}

TEST(CpuErrors, DebugWritesTheGeneratedSourceAndSaysWhere) {
  ::testing::internal::CaptureStdout();
  pl::pallas_call([](Ref x, Ref o) { o[pl::all] = x[pl::all] - 1.0f; }, pl::ShapeDtype({8}, pl::f32),
                  {.name = "shown_kernel", .debug = true, .backend = "cpu"})(pl::zeros({8}));
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string tag = "written to ";
  ASSERT_NE(out.find(tag), std::string::npos) << out;
  const size_t start = out.find(tag) + tag.size();
  const std::string path = out.substr(start, out.find(' ', start) - start);
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_NE(text.str().find("palladium_cpu_run"), std::string::npos);
  EXPECT_NE(text.str().find("shown_kernel"), std::string::npos);
}

// A whole-array kernel over 2^26 float32: two 256 MB tiles per program, more than a worker's
// default 256 MB stack; the program runs on a thread whose stack is made for it.
TEST(CpuLargeTiles, TilesLargerThanAWorkerStackRun) {
  const int64_t n = int64_t{1} << 26;
  pl::Array x = Random().normal({n});
  pl::Array y = pl::pallas_call([](Ref x_ref, Ref o) { o[pl::all] = x_ref[pl::all] * 2.0f + 1.0f; }, pl::ShapeDtype({n}, pl::f32),
                            {.name = "huge_tile", .backend = "cpu"})(x);
  // x * 2 is exact, so the one rounding of + 1 in float32 is the whole reference.
  auto want = [&](int64_t i) { return static_cast<double>(static_cast<float>(x.get(i)) * 2.0f + 1.0f); };
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i += 4099) bad += y.get(i) != want(i) ? 1 : 0;
  EXPECT_EQ(y.get(n - 1), want(n - 1));
  EXPECT_EQ(bad, 0);
}

TEST(SourceContext, ExcerptMarksTheLine) {
  const std::string src = "one\ntwo\nthree\nfour\nfive\n";
  EXPECT_EQ(pl::backend::source_excerpt(src, 3, 1), "   2 | two\n>> 3 | three\n   4 | four\n");
  EXPECT_EQ(pl::backend::source_excerpt(src, 1, 1), ">> 1 | one\n   2 | two\n");
  EXPECT_EQ(pl::backend::source_excerpt(src, 0), "");
}

TEST(SourceContext, FirstErrorLineReadsCompilerLogs) {
  EXPECT_EQ(pl::backend::first_error_line("/tmp/x/kernel.cc:12:5: error: expected ';'"), 12);
  EXPECT_EQ(pl::backend::first_error_line("kernel.cu(7): error: identifier undefined"), 7);
  EXPECT_EQ(pl::backend::first_error_line("warning: nothing located"), 0);
  EXPECT_EQ(pl::backend::first_error_line("ld: cannot find -lfoo\nmain.cc:3:1: error"), 3);
}

}  // namespace
}  // namespace palladium::cpu_test
