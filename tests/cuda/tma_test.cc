// Operand tiles brought in by the tensor memory accelerator (emit_tma.cc): present in the generated
// source where they apply (and absent with PALLADIUM_CUDA_TMA=0), with edge blocks whose boxes
// leave the array, a 4-D attention layout, an input at an address the TMA cannot take, and
// CUDA-graph replays that re-encode the maps for new inputs.
#include "backends/common/chain_loops.h"
#include "backends/cuda/codegen.h"
#include "core/grid_mapping.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/program_support.h"
#include "tests/support/test_support.h"

namespace palladium::cudatest {
namespace {

const Device kGpu{Device::cuda, 0};
constexpr int64_t kBlockK = 64;

// JAX's Pallas matmul, a 3-D grid whose last axis walks K accumulating the output block (compiled
// as a K loop). Where m or n is not a multiple of the blocks the last blocks leave the array (their
// padding reaches only the output's padding, which is dropped). bf16 in, float32 out.
Callable<Array> grid_k_matmul(int64_t m, int64_t n, int64_t k, const std::string& be, const std::string& name) {
  constexpr int64_t bm = 128, bn = 128;
  CallOptions o{.grid = {cdiv(m, bm), cdiv(n, bn), cdiv(k, kBlockK)},
                .dimension_semantics = {parallel, parallel, arbitrary},
                .in_specs = {BlockSpec({bm, kBlockK}, [](Index i, Index, Index kk) { return idx(i, kk); }),
                             BlockSpec({kBlockK, bn}, [](Index, Index j, Index kk) { return idx(kk, j); })},
                .out_specs = {BlockSpec({bm, bn}, [](Index i, Index j, Index) { return idx(i, j); })},
                .name = name,
                .debug = be == "cuda",
                .backend = be,
                .compiler_params = {.num_warps = 8, .num_stages = 3}};
  return pallas_call(
      [](Ref x_ref, Ref y_ref, Ref o_ref) {
        when(program_id(2) == 0, [&] { o_ref[all] = jnp::zeros({bm, bn}); });
        o_ref[all] = o_ref[all] + dot(x_ref[all], y_ref[all]);
      },
      ShapeDtype({m, n}, f32), o);
}

// The matmul as a K loop inside each program (the quickstart's form): 128 x 256 blocks of float32
// output, x's row block and y's column block whole along K, 8 warps.
Callable<Array> k_loop_matmul(int64_t m, int64_t n, int64_t k, const std::string& be, const std::string& name) {
  constexpr int64_t bm = 128, bn = 256;
  auto kernel = [k](Ref x_ref, Ref y_ref, Ref o_ref) {
    Value acc = jnp::zeros({bm, bn}, f32);
    acc = lax::fori_loop(0, k / kBlockK, [&](Value i, Value a) {
      return a + dot(x_ref(slice(), ds(i * kBlockK, kBlockK)), y_ref(ds(i * kBlockK, kBlockK), slice()));
    }, acc);
    o_ref[all] = acc;
  };
  return pallas_call(kernel, ShapeDtype({m, n}, f32),
                     {.grid = {cdiv(m, bm), cdiv(n, bn)},
                      .in_specs = {BlockSpec({bm, k}, [](Index i, Index) { return idx(i, 0); }),
                                   BlockSpec({k, bn}, [](Index, Index j) { return idx(0, j); })},
                      .out_specs = {BlockSpec({bm, bn}, [](Index i, Index j) { return idx(i, j); })},
                      .name = name, .debug = be == "cuda", .backend = be,
                      .compiler_params = {.num_warps = 8}});
}

TEST(CudaTma, MatmulTilesArriveThroughTheTensorMemoryAccelerator) {
  PL_REQUIRE_NVRTC();
  test_support::ScopedEnv wgmma{"PALLADIUM_CUDA_WGMMA", "1"};
  GeneratedSources sources("tma-matmul-test");
  const int64_t m = 200, n = 200, k = 320;  // partial last blocks along M and N
  const Array x = normal(41, {m, k}, bf16), y = normal(42, {k, n}, bf16);
  for (bool tma : {true, false}) {
    SCOPED_TRACE(tma ? "tma" : "PALLADIUM_CUDA_TMA=0");
    test_support::ScopedEnv env{"PALLADIUM_CUDA_TMA", tma ? "1" : "0"};
    sources.clear();
    const std::string name = tma ? "tma_matmul" : "cp_async_matmul";
    expect_cuda_matches([&](const std::string& be) { return grid_k_matmul(m, n, k, be, name); }, {x, y}, 1e-5);
    const std::string source = sources.source(name);
    ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
    EXPECT_EQ(source.find("pl_tma_load_2d(") != std::string::npos, tma);
    EXPECT_EQ(source.find("__grid_constant__ pl_tensor_map pl_tmap1") != std::string::npos, tma);
    EXPECT_EQ(source.find("pl_cp_async16(") == std::string::npos, tma);
  }
}

// The attention forward's K and V tiles come from [batch, seq, heads, head_dim] arrays: 4-D maps
// whose boxes are 1 along batch and heads (the forward and the backward against float64); the
// tiles a program loads once come through the TMA too, awaited before the loop that reads them.
TEST(CudaTma, AttentionTilesOfFourDimensionalArrays) {
  PL_REQUIRE_NVRTC();
  test_support::ScopedEnv wgmma{"PALLADIUM_CUDA_WGMMA", "1"};
  GeneratedSources sources("tma-attention-test");
  const Shape shape{2, 256, 3, 64};
  Array q = normal(43, shape, bf16), k = normal(44, shape, bf16), v = normal(45, shape, bf16), dout = normal(48, shape, bf16);
  pl::ops::MhaOptions o{.sm_scale = 0.125f, .causal = true, .block_q = 128, .block_k = 64, .backend = "cuda", .debug = true};
  expect_attention_matches_reference(q, k, v, Array(), dout, o);
  const std::string source = sources.source("mha_forward");
  ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
  EXPECT_NE(source.find("pl_tma_load_4d("), std::string::npos);
  EXPECT_NE(source.find("pl_mbar_wait("), std::string::npos);
  // Q, loaded once, is awaited after the K/V loop's first rounds and before the loop, not in it
  // (at head_dim 64, block_k 64 two programs share an SM: no pipelined loop, no producer).
  const size_t loop = source.find("for (pl_i32 pl_i"), q_wait = source.find("pl_mbar_wait(pl_home_bar0, pl_home_phase);");
  ASSERT_NE(q_wait, std::string::npos);
  EXPECT_EQ(source.find("pl_regs_increase<"), std::string::npos);
  EXPECT_LT(source.find("pl_pre = "), q_wait);
  EXPECT_LT(q_wait, loop);
  EXPECT_EQ(source.find("pl_home_bar0", loop), std::string::npos);
  EXPECT_EQ(source.find("pl_cp_async_wait<0>"), std::string::npos);
  // The backward's loop-invariant tiles of both loops come the same way.
  EXPECT_NE(sources.source("mha_backward").find("pl_mbar_wait(pl_home_bar3, pl_home_phase);"), std::string::npos);
}

// The tensor maps the generator asks for (no GPU needed): a K loop over a [batch, seq, heads, d]
// array whose BlockSpec squeezes batch and heads, and a loop-invariant [64, 128] operand. The
// loop's tile is a 64 x 64 box along seq and d (dimensions innermost first, strides in bytes);
// the invariant one two 64-column boxes of one map. Without the TMA (the switch, or a driver
// without tensor maps) the kernel takes none.
TEST(CudaTma, TensorMapsOfAStridedFourDimensionalRef) {
  test_support::ScopedEnv wgmma{"PALLADIUM_CUDA_WGMMA", "1"};
  auto kernel = [](Ref x_ref, Ref w_ref, Ref o_ref) {
    Value acc = jnp::zeros({64, 128}, f32);
    acc = lax::fori_loop(0, 4, [&](Value i, Value a) { return a + dot(x_ref(ds(i * 64, 64), slice()), w_ref[all]); }, acc);
    o_ref[all] = acc;
  };
  const CallOptions o{.grid = {2, 3},
                      .in_specs = {BlockSpec({None, 256, None, 64}, [](Index b, Index h) { return idx(b, 0, h, 0); }),
                                   BlockSpec({64, 128}, [](Index, Index) { return idx(0, 0); })},
                      .out_specs = {BlockSpec({None, None, 64, 128}, [](Index b, Index h) { return idx(b, h, 0, 0); })},
                      .name = "tma_spec"};
  auto call = pallas_call(kernel, ShapeDtype({2, 3, 64, 128}, f32), o);
  const detail::InputTypes in{ShapeDtype({2, 256, 3, 64}, bf16), ShapeDtype({64, 128}, bf16)};
  const ir::Kernel k = backend::kernel_for_codegen(detail::trace_kernel(*call.impl(), detail::describe(*call.impl(), in)), false);
  auto maps = [&](bool tma) {
    cuda::Target t = cuda::target_for(9, 0);
    t.tma = tma;
    return cuda::generate_cuda(k, {}, t).tensor_maps;
  };
  const std::vector<cuda::TensorMapSpec> got = maps(true);
  ASSERT_EQ(got.size(), 2u);
  const cuda::TensorMapSpec& x = got[0].ref == 0 ? got[0] : got[1];
  const cuda::TensorMapSpec& w = got[0].ref == 0 ? got[1] : got[0];
  EXPECT_EQ(x.ref, 0);
  EXPECT_EQ(x.dtype, bf16);
  EXPECT_EQ(x.dims, (std::vector<int64_t>{64, 3, 256, 2}));
  EXPECT_EQ(x.byte_strides, (std::vector<int64_t>{64 * 2, 3 * 64 * 2, 256 * 3 * 64 * 2}));
  EXPECT_EQ(x.box, (std::vector<int64_t>{64, 1, 64, 1}));
  EXPECT_EQ(w.ref, 1);
  EXPECT_EQ(w.dims, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(w.byte_strides, (std::vector<int64_t>{128 * 2}));
  EXPECT_EQ(w.box, (std::vector<int64_t>{64, 64}));
  EXPECT_TRUE(maps(false).empty());
  test_support::ScopedEnv off{"PALLADIUM_CUDA_TMA", "0"};
  EXPECT_TRUE(maps(true).empty());
}

// Warp specialisation (emit_producer.cc): a pipelined K loop of 128 x 256 tiles (one program per
// multiprocessor) gets a producer warpgroup after its 8 consumer warps, whose first lane issues
// every round and refills a slot only after the consumer warps gave it back on its empty barrier;
// the consumers' loop has no block-wide barrier left. The producer gives its registers to the
// consumers (168 a thread at launch, 24 and 240 after setmaxnreg). Nine iterations over four slots
// reuse slots in both phases of their empty barriers; M and N leave partial blocks. The kernel is
// persistent: capped at 3 blocks, each runs two or three of the 8 programs (in groups along M),
// the ring's slots and phases carried from one program to the next. Checked against float64;
// without persistence, with a single producer warp (PALLADIUM_CUDA_REG_SHARE=0: 288 threads), and
// with PALLADIUM_CUDA_WARP_SPECIALIZE=0 (256 threads, a barrier per iteration), alike.
TEST(CudaTma, PipelinedMatmulGetsAPersistentProducerWarp) {
  PL_REQUIRE_NVRTC();
  test_support::ScopedEnv wgmma{"PALLADIUM_CUDA_WGMMA", "1"};
  test_support::ScopedEnv blocks{"PALLADIUM_CUDA_PERSISTENT_BLOCKS", "3"};
  GeneratedSources sources("tma-producer-test");
  const int64_t m = 200, n = 1000, k = 9 * kBlockK;
  auto make = [&](const std::string& be, const std::string& name) { return k_loop_matmul(m, n, k, be, name); };
  const Array x = normal(49, {m, k}, bf16), y = normal(50, {k, n}, bf16);
  const Array want = jnp::matmul(x.astype(f64), y.astype(f64));
  struct Variant {
    const char* name;
    bool specialise, persistent, rebalance;
  };
  for (const Variant& v : {Variant{"persistent_matmul", true, true, true}, Variant{"producer_matmul", true, false, true},
                           Variant{"producer_warp_matmul", true, true, false},
                           Variant{"single_role_matmul", false, false, false}}) {
    SCOPED_TRACE(v.name);
    test_support::ScopedEnv env{"PALLADIUM_CUDA_WARP_SPECIALIZE", v.specialise ? "1" : "0"};
    test_support::ScopedEnv persist{"PALLADIUM_CUDA_PERSISTENT", v.persistent ? "1" : "0"};
    test_support::ScopedEnv share{"PALLADIUM_CUDA_REG_SHARE", v.rebalance ? "1" : "0"};
    const Array got = expect_cuda_matches([&](const std::string& be) { return make(be, v.name); }, {x, y}, 1e-5)[0];
    EXPECT_LT(rel_error(got, want), 1e-5);
    const std::string source = sources.source(v.name);
    ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
    EXPECT_EQ(source.find("__launch_bounds__(384, 1)") != std::string::npos, v.rebalance);
    EXPECT_EQ(source.find("__launch_bounds__(288, 1)") != std::string::npos, v.specialise && !v.rebalance);
    EXPECT_EQ(source.find("pl_regs_decrease<24>();") != std::string::npos, v.rebalance);
    EXPECT_EQ(source.find("pl_regs_increase<240>();") != std::string::npos, v.rebalance);
    EXPECT_EQ(source.find("if (pl_warp() == 8 && pl_lane() == 0) {") != std::string::npos, v.rebalance);
    EXPECT_EQ(source.find("if (pl_warp() >= 8) {") != std::string::npos, v.specialise);
    EXPECT_EQ(source.find("pl_mbar_arrive(&pl_empty0[") != std::string::npos, v.specialise);
    EXPECT_EQ(source.find("pl_block += (long long)gridDim.x * gridDim.y") != std::string::npos, v.persistent);
    EXPECT_EQ(source.find("const long long pl_first = ") != std::string::npos, v.specialise);  // grouped order
    const size_t loop = source.find("for (pl_i32 pl_i");
    ASSERT_NE(loop, std::string::npos);
    // The consumers' K loop waits on the full barrier only; without the producer it still meets
    // at a block-wide barrier every iteration.
    EXPECT_EQ(source.find("__syncthreads();", loop) == std::string::npos, v.specialise);
  }
}

// Clusters (emit_cluster.cc, opt-in: PALLADIUM_CUDA_CLUSTER=1): programs 2m and 2m + 1 run as one
// cluster of two blocks, and the tile both read (the one whose block index does not depend on the
// axis the pair differs along) is multicast, half of its 64-column boxes from each block; each
// slot goes back to both blocks' producers. In groups along M (the default walk) the pair shares its column block of y (four
// boxes); in the row-major walk (PALLADIUM_CUDA_RASTER_GROUP=0) it shares its row block of x (one
// box, sent by the two blocks in turn). Persistent at two blocks, one cluster walks all programs,
// its rings in step across them. An odd number of row blocks, or the default (no clusters), keeps
// single blocks. Each checked against float64.
TEST(CudaTma, MatmulPairsShareATileThroughAClusterMulticast) {
  PL_REQUIRE_NVRTC();
  test_support::ScopedEnv wgmma{"PALLADIUM_CUDA_WGMMA", "1"};
  test_support::ScopedEnv blocks{"PALLADIUM_CUDA_PERSISTENT_BLOCKS", "2"};
  GeneratedSources sources("tma-cluster-test");
  struct Variant {
    const char* name;
    int64_t m;
    const char* raster_group;
    const char* cluster;
    int shared_ref;           // the multicast tile's ref (-1: none)
    size_t multicast, plain;  // the copies (one per 64-column box) in the source, each way
  };
  const int64_t n = 512, k = 9 * kBlockK;
  for (const Variant& v : {Variant{"cluster_matmul", 512, "8", "1", 1, 4, 1}, Variant{"row_major_cluster_matmul", 512, "0", "1", 0, 1, 4},
                           Variant{"odd_rows_matmul", 384, "8", "1", -1, 0, 5},
                           Variant{"default_matmul", 512, "8", "", -1, 0, 5}}) {
    SCOPED_TRACE(v.name);
    test_support::ScopedEnv group{"PALLADIUM_CUDA_RASTER_GROUP", v.raster_group};
    test_support::ScopedEnv cluster{"PALLADIUM_CUDA_CLUSTER", v.cluster};
    const int64_t m = v.m;
    auto make = [&](const std::string& be) { return k_loop_matmul(m, n, k, be, v.name); };
    const Array x = normal(51, {m, k}, bf16), y = normal(52, {k, n}, bf16);
    const Array got = expect_cuda_matches(make, {x, y}, 1e-5)[0];
    EXPECT_LT(rel_error(got, jnp::matmul(x.astype(f64), y.astype(f64))), 1e-5);
    const std::string source = sources.source(v.name);
    ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
    const bool clustered = v.shared_ref >= 0;
    EXPECT_EQ(source.find("__cluster_dims__(2, 1, 1)") != std::string::npos, clustered);
    EXPECT_EQ(test_support::count_of(source, "pl_tma_load_multicast_2d("), v.multicast);
    EXPECT_EQ(test_support::count_of(source, "pl_tma_load_2d("), v.plain);
    for (int r : {0, 1}) {  // the shared tile's copies are the multicast ones; the other is this block's own
      const size_t at = source.find("// a tile of pl_ref" + std::to_string(r) + " through");
      ASSERT_NE(at, std::string::npos);
      EXPECT_EQ(source.substr(at, source.find('\n', at) - at).find("half of its boxes from each block") != std::string::npos,
                r == v.shared_ref);
    }
    // The slots go back to both blocks, whose consumers' arrivals both count.
    EXPECT_EQ(source.find("pl_mbar_arrive_cluster(&pl_empty0[") != std::string::npos, clustered);
    EXPECT_EQ(source.find("pl_mbar_init(&pl_empty0[s], 16);") != std::string::npos, clustered);
    EXPECT_EQ(source.find("pl_mbar_init(&pl_empty0[s], 8);") != std::string::npos, !clustered);
    EXPECT_EQ(test_support::count_of(source, "pl_cluster_sync();"), clustered ? 2u : 0u);
    EXPECT_NE(source.find("pl_block += (long long)gridDim.x * gridDim.y"), std::string::npos);  // persistent
  }
}

// A view two bytes into a device buffer (as a DLPack import with a byte offset may be): the TMA
// needs 16-byte aligned arrays, so the launch reads an aligned copy; the result is still the
// interpreter's.
TEST(CudaTma, MisalignedInputIsCopiedForTheTensorMap) {
  PL_REQUIRE_GPU();
  const int64_t m = 128, n = 128, k = 320;
  const Array flat = to_device(normal(46, {k * n + 8}, bf16), kGpu);
  auto* view = new Storage;
  view->ptr = static_cast<char*>(const_cast<void*>(static_cast<const void*>(flat.data()))) + 2;
  view->nbytes = static_cast<size_t>(k * n) * 2;
  view->device = kGpu;  // no free_fn: `flat` owns the memory, kept alive by the deleter below
  const Array y({k, n}, bf16, std::shared_ptr<Storage>(view, [flat](Storage* s) { delete s; }));
  ASSERT_NE(reinterpret_cast<uintptr_t>(y.data()) & 15, 0u);
  const Array x = to_device(normal(47, {m, k}, bf16), kGpu);
  const Array got = to_host(grid_k_matmul(m, n, k, "cuda", "tma_misaligned")(x, y));
  const Array want = grid_k_matmul(m, n, k, "interpret", "tma_misaligned")(to_host(x), to_host(y));
  EXPECT_TRUE(agree(got, want, 1e-2));
}

// jit(matmul) replayed as a CUDA graph: each replay's inputs get freshly encoded tensor maps, so
// every call's result is its own inputs' product (float64 reference).
TEST(CudaTma, GraphReplaysEncodeTheMapsForTheirInputs) {
  PL_REQUIRE_GPU();
  auto f = [](const Array& a, const Array& b) { return jnp::matmul(a, b); };
  auto j = jit(f);
  for (uint64_t i = 0; i < 5; ++i) {
    const Array a = to_device(normal(300 + i, {256, 512}, bf16), kGpu), b = to_device(normal(400 + i, {512, 384}, bf16), kGpu);
    const Array got = to_host(j(a, b));
    const Array want = jnp::matmul(to_host(a).astype(f64), to_host(b).astype(f64));
    EXPECT_LT(rel_error(got, want), 1e-2) << "call " << i;
  }
  // The calls after the first replayed the recorded graph (else the re-encoding went untested).
  const Array a = to_device(normal(305, {256, 512}, bf16), kGpu), b = to_device(normal(405, {512, 384}, bf16), kGpu);
  const std::string lowered = j.lower(a, b);
  EXPECT_NE(lowered.find("replayed as a CUDA graph of"), std::string::npos) << lowered;
}

}  // namespace
}  // namespace palladium::cudatest
