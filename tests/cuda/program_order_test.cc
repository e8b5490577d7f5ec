// The order in which blocks walk the programs (program_order.cc): the parallel axis along which
// the inputs' blocks stay the same is walked fastest, so that the programs running at once share
// them in L2; the results are the interpreter's whatever the order.
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_support.h"

namespace palladium::cudatest {
namespace {

// out[i, j] block = x[:, j block] * 2 + w[i block]: x's block depends on axis 1 only, and is
// 8 times w's, so axis 0 is walked fastest; with PALLADIUM_CUDA_PROGRAM_ORDER=0 the last is.
TEST(CudaProgramOrder, SharedInputBlocksGoFastest) {
  PL_REQUIRE_NVRTC();
  GeneratedSources sources("program-order-test");
  const int64_t rows = 8, cols = 64;
  const Array x = normal(61, {rows * 8, cols * 3}), w = normal(62, {rows * 4, cols});
  for (bool ordered : {true, false}) {
    SCOPED_TRACE(ordered ? "ordered" : "PALLADIUM_CUDA_PROGRAM_ORDER=0");
    test_support::ScopedEnv env{"PALLADIUM_CUDA_PROGRAM_ORDER", ordered ? "1" : "0"};
    const std::string name = ordered ? "ordered_programs" : "row_major_programs";
    expect_cuda_matches(
        [&](const std::string& be) {
          return pallas_call(
              [](Ref x_ref, Ref w_ref, Ref o_ref) { o_ref[all] = x_ref(ds(0, rows), slice()) * 2.0f + w_ref[all]; },
              ShapeDtype({rows * 4, cols * 3}, f32),
              {.grid = {4, 3},
               .in_specs = {BlockSpec({rows * 8, cols}, [](Index, Index j) { return idx(0, j); }),
                            BlockSpec({rows, cols}, [](Index i, Index) { return idx(i, 0); })},
               .out_specs = {BlockSpec({rows, cols}, [](Index i, Index j) { return idx(i, j); })},
               .name = name, .debug = be == "cuda", .backend = be});
        },
        {x, w}, 1e-6);
    const std::string source = sources.source(name);
    ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
    const size_t first = source.find("const int pl_pid");
    ASSERT_NE(first, std::string::npos);
    EXPECT_EQ(source.compare(first, 20, ordered ? "const int pl_pid0 = " : "const int pl_pid1 = "), 0)
        << source.substr(first, 40);
  }
}

}  // namespace
}  // namespace palladium::cudatest
