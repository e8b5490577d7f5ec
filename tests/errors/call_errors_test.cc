// Bad input around a kernel: BlockSpecs and index maps, the number of inputs and Refs, grids,
// aliases, vmap, backend names, kernel ops outside a kernel, and .npy files.
#include <cstdio>
#include <fstream>

#include "backends/backend.h"
#include "errors_test_util.h"
#include "palladium/device.h"

namespace palladium::etest {
namespace {

const Array kX88 = pl::random::uniform(pl::random::key(88), {8, 8}, f32, -1, 1);
const Array kX8 = pl::random::uniform(pl::random::key(8), {8}, f32, -1, 1);

void copy_kernel(Ref x, Ref o) { o[pl::all] = x[pl::all]; }

// ---------------------------------------------------------------------------------------------
// BlockSpecs and index maps.

TEST(CallErrors, IndexMapOfTheWrongArity) {
  EXPECT_THAT(error_message([] {
                run_kernel(copy_kernel, ShapeDtype({8, 8}, f32),
                           {.grid = {2, 2},
                            .in_specs = {BlockSpec({4, 4}, [](Index i) { return pl::idx(i, 0); })},
                            .out_specs = {BlockSpec({4, 4}, [](Index i, Index j) { return pl::idx(i, j); })},
                            .name = "map_arity"},
                           kX88);
              }),
              AllOf(HasSubstr("pallas_call 'map_arity'"), HasSubstr("op 'BlockSpec'"), HasSubstr("in_specs[0]"),
                    HasSubstr("index_map takes 1 grid indices but the grid (2, 2) has rank 2")));
}

TEST(CallErrors, IndexMapReturningTheWrongRank) {
  EXPECT_THAT(error_message([] {
                run_kernel(copy_kernel, ShapeDtype({8, 8}, f32),
                           {.grid = {2},
                            .in_specs = {BlockSpec({4, 8}, [](Index i) { return pl::idx(i, 0); })},
                            .out_specs = {BlockSpec({4, 8}, [](Index i) { return i; })},
                            .name = "map_rank"},
                           kX88);
              }),
              AllOf(HasSubstr("pallas_call 'map_rank'"), HasSubstr("op 'BlockSpec'"), HasSubstr("out_specs[0]"),
                    HasSubstr("index_map returned 1 block indices for an array of rank 2")));
}

TEST(CallErrors, IndexMapReturningASliceOrAFloat) {
  EXPECT_THAT(error_message([] {
                run_kernel(copy_kernel, ShapeDtype({8}, f32),
                           {.grid = {2}, .in_specs = {BlockSpec({4}, [](Index) { return pl::idx(pl::slice()); })},
                            .out_specs = {BlockSpec({4}, [](Index i) { return i; })}, .name = "map_slice"},
                           kX8);
              }),
              AllOf(HasSubstr("pallas_call 'map_slice'"), HasSubstr("in_specs[0]"), HasSubstr("index_map entry 0"),
                    HasSubstr("not a slice")));
  EXPECT_THAT(error_message([] {
                run_kernel(copy_kernel, ShapeDtype({8}, f32),
                           {.grid = {2}, .in_specs = {BlockSpec({4}, [](Index i) { return i.astype(f32); })},
                            .out_specs = {BlockSpec({4}, [](Index i) { return i; })}, .name = "map_float"},
                           kX8);
              }),
              AllOf(HasSubstr("pallas_call 'map_float'"), HasSubstr("in_specs[0]"), HasSubstr("index_map entry 0"),
                    HasSubstr("integer scalar")));
}

TEST(CallErrors, BlockOfTheWrongRank) {
  EXPECT_THAT(error_message([] {
                run_kernel(copy_kernel, ShapeDtype({8, 8}, f32),
                           {.grid = {2}, .in_specs = {BlockSpec({4}, [](Index i) { return i; })}, .name = "block_rank"}, kX88);
              }),
              AllOf(HasSubstr("pallas_call 'block_rank'"), HasSubstr("op 'BlockSpec'"), HasSubstr("in_specs[0]"),
                    HasSubstr("block shape has rank 1 but the array (8, 8) has rank 2")));
}

TEST(CallErrors, BlockLargerThanItsArrayOrNotPositive) {
  EXPECT_THAT(error_message([] {
                run_kernel(copy_kernel, ShapeDtype({8, 8}, f32),
                           {.grid = {1}, .out_specs = {BlockSpec({16, 8}, [](Index i) { return pl::idx(i, 0); })}, .name = "block_big"},
                           kX88);
              }),
              AllOf(HasSubstr("pallas_call 'block_big'"), HasSubstr("op 'BlockSpec'"), HasSubstr("out_specs[0]"),
                    HasSubstr("block shape 16 in dimension 0 is larger than the array (8, 8)")));
  EXPECT_THAT(error_message([] {
                run_kernel(copy_kernel, ShapeDtype({8}, f32),
                           {.grid = {1}, .in_specs = {BlockSpec({0}, [](Index i) { return i; })}, .name = "block_zero"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'block_zero'"), HasSubstr("in_specs[0]"), HasSubstr("block shape 0 in dimension 0 is not positive")));
}

// ---------------------------------------------------------------------------------------------
// Inputs, outputs, Refs.

TEST(CallErrors, NumberOfInputsDiffersFromInSpecs) {
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref y, Ref z, Ref o) { o[pl::all] = x[pl::all] + y[pl::all] + z[pl::all]; },
                           ShapeDtype({8}, f32), {.in_specs = {BlockSpec(), BlockSpec()}, .name = "in_specs_count"}, kX8, kX8, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'in_specs_count'"), HasSubstr("in_specs has 2 entries but the call got 3 inputs")));
  EXPECT_THAT(error_message([] {
                run_kernel(copy_kernel, ShapeDtype({8}, f32), {.out_specs = {BlockSpec(), BlockSpec()}, .name = "out_specs_count"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'out_specs_count'"), HasSubstr("out_specs has 2 entries but there are 1 outputs")));
}

TEST(CallErrors, KernelArityDiffersFromTheCall) {
  EXPECT_THAT(error_message([] { run_kernel(copy_kernel, ShapeDtype({8}, f32), {.name = "arity"}, kX8, kX8); }),
              AllOf(HasSubstr("pallas_call 'arity'"), HasSubstr("op 'call'"),
                    HasSubstr("the kernel takes 2 Refs but the call passes 3 (2 inputs + 1 outputs)")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref y, Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; }, ShapeDtype({8}, f32),
                           {.name = "arity_few"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'arity_few'"), HasSubstr("the kernel takes 3 Refs but the call passes 2")));
}

// Regression: with 32 or more Refs the arity check used to shift a 32-bit mask out of range, and a
// one-Ref kernel called with 33 Refs was silently never invoked.
TEST(CallErrors, KernelArityWithManyRefs) {
  std::vector<Array> inputs(32, kX8);
  auto f = pallas_call([](Ref o) { o[pl::all] = jnp::zeros({8}); }, ShapeDtype({8}, f32), {.name = "arity_many", .backend = "interpret"});
  EXPECT_THAT(error_message([&] { f.call(inputs); }),
              AllOf(HasSubstr("pallas_call 'arity_many'"), HasSubstr("the kernel takes 1 Refs but the call passes 33")));
}

TEST(CallErrors, GridWithANonPositiveDimension) {
  EXPECT_THAT(error_message([] { run_kernel(copy_kernel, ShapeDtype({8}, f32), {.grid = {2, 0}, .name = "grid0"}, kX8); }),
              AllOf(HasSubstr("pallas_call 'grid0'"), HasSubstr("grid (2, 0) has a dimension that is not positive")));
}

TEST(CallErrors, BadInputOutputAliases) {
  EXPECT_THAT(error_message([] {
                run_kernel(copy_kernel, ShapeDtype({8}, f32), {.input_output_aliases = {{1, 0}}, .name = "alias_range"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'alias_range'"), HasSubstr("input_output_aliases entry (1, 0) is out of range")));
  EXPECT_THAT(error_message([] {
                run_kernel([](Ref x, Ref o) { o[pl::all] = x(pl::slice(0, 4)); }, ShapeDtype({4}, f32),
                           {.input_output_aliases = {{0, 0}}, .name = "alias_shape"}, kX8);
              }),
              AllOf(HasSubstr("pallas_call 'alias_shape'"), HasSubstr("input 0 is aliased to output 0 but their shapes or dtypes differ")));
}

TEST(CallErrors, NoOutputs) {
  EXPECT_THAT(error_message([] {
                auto f = pallas_call([](Ref x) { (void)x; }, std::vector<ShapeDtype>{}, {.name = "no_outputs", .backend = "interpret"});
                f(kX8);
              }),
              AllOf(HasSubstr("pallas_call 'no_outputs'"), HasSubstr("at least one output")));
}

// ---------------------------------------------------------------------------------------------
// vmap.

auto vmap_add() {
  return pallas_call([](Ref x, Ref y, Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; }, ShapeDtype({8}, f32),
                     {.name = "vadd", .backend = "interpret"});
}

TEST(CallErrors, VmapMismatchedBatchSizes) {
  Array a = pl::random::normal(pl::random::key(1), {4, 8}), b = pl::random::normal(pl::random::key(2), {3, 8});
  EXPECT_THAT(error_message([&] { pl::vmap(vmap_add())(a, b); }),
              AllOf(HasSubstr("vmap of pallas_call 'vadd'"), HasSubstr("input 1 has batch size 3 but an earlier input has 4")));
}

TEST(CallErrors, VmapBadInAxes) {
  Array a = pl::random::normal(pl::random::key(1), {4, 8});
  EXPECT_THAT(error_message([&] { pl::vmap(vmap_add(), {0})(a, a); }),
              AllOf(HasSubstr("vmap of pallas_call 'vadd'"), HasSubstr("in_axes has 1 entries but the call got 2 inputs")));
  EXPECT_THAT(error_message([&] { pl::vmap(vmap_add(), {2, 0})(a, a); }),
              AllOf(HasSubstr("vmap of pallas_call 'vadd'"), HasSubstr("in_axes[0] = 2 is out of range for input 0 of shape (4, 8)")));
  EXPECT_THAT(error_message([&] { pl::vmap(vmap_add(), {pl::None, pl::None})(kX8, kX8); }),
              AllOf(HasSubstr("vmap of pallas_call 'vadd'"), HasSubstr("no input is batched")));
  // After removing the batch axis the inner call's own checks apply (and name the kernel).
  EXPECT_THAT(error_message([&] { pl::vmap(vmap_add(), {1, pl::None})(a, kX8); }),
              AllOf(HasSubstr("pallas_call 'vadd'"), HasSubstr("(4,)"), HasSubstr("(8,)")));
}

// program_id's axis is the user's axis of the inner grid: under vmap, an axis outside the inner
// grid must still be an error (and not silently read the batch axis that vmap adds in front).
// Regression: program_id under vmap is checked against the kernel's own grid before vmap's axis
// offset is added (program_id(-1) used to return the batch index).
TEST(CallErrors, VmapProgramIdAxisIsChecked) {
  Array a = pl::random::normal(pl::random::key(1), {3, 8});
  auto f = pallas_call([](Ref x, Ref o) { o[pl::all] = x[pl::all] + pl::program_id(-1).astype(f32); }, ShapeDtype({8}, f32),
                       {.name = "vpid", .backend = "interpret"});
  EXPECT_THAT(error_message([&] { pl::vmap(f)(a); }), AllOf(HasSubstr("pallas_call 'vpid'"), HasSubstr("op 'program_id'"), HasSubstr("axis -1")));
  auto g = pallas_call([](Ref x, Ref o) { o[pl::all] = x[pl::all] + pl::program_id(0).astype(f32); }, ShapeDtype({8}, f32),
                       {.name = "vpid0", .backend = "interpret"});
  EXPECT_THAT(error_message([&] { pl::vmap(g)(a); }),
              AllOf(HasSubstr("pallas_call 'vpid0'"), HasSubstr("op 'program_id'"), HasSubstr("axis 0 is outside the grid of rank 0")));
}

// vmap of a call whose output aliases an unbatched input: the output is batched, the input is not,
// so the alias cannot hold; this must be an Error, not an internal failure.
// Regression: an aliased input must be batched along axis 0 under vmap; this used to end in an
// InternalError inside the interpreter.
TEST(CallErrors, VmapOfAnAliasWithAnUnbatchedInput) {
  Array a = pl::random::normal(pl::random::key(1), {3, 8});
  auto f = pallas_call([](Ref x, Ref acc, Ref o) { (void)acc; o[pl::all] = o[pl::all] + x[pl::all]; }, ShapeDtype({8}, f32),
                       {.input_output_aliases = {{1, 0}}, .name = "valias", .backend = "interpret"});
  EXPECT_EQ(error_message([&] { pl::vmap(f, {0, pl::None})(a, kX8); }),
            "vmap of pallas_call 'valias': input 1 is aliased to output 0, so it must be batched along axis 0 "
            "(outputs are), but its in_axes entry is None");
  // The same when the aliased input is batched along another axis than the output (axis 0): JAX
  // would move the batch axis; here it is an Error saying why not.
  auto g = pallas_call([](Ref acc, Ref o) { (void)acc; o[pl::all] = o[pl::all] * 2.0f; }, ShapeDtype({8}, f32),
                       {.input_output_aliases = {{0, 0}}, .name = "valias1", .backend = "interpret"});
  const Array b = pl::random::normal(pl::random::key(2), {8, 3});
  EXPECT_EQ(error_message([&] { pl::vmap(g, {1})(b); }),
            "vmap of pallas_call 'valias1': input 0 is aliased to output 0, so it must be batched along axis 0 "
            "(outputs are), but its in_axes entry is 1");
}

// ---------------------------------------------------------------------------------------------
// Backends.

// Regression: the unknown-backend Error names the kernel and comes before tracing.
TEST(CallErrors, UnknownBackend) {
  auto f = pallas_call(copy_kernel, ShapeDtype({8}, f32), {.name = "unknown_be", .backend = "tpu"});
  const std::string err = error_message([&] { f(kX8); });
  EXPECT_THAT(err, AllOf(HasSubstr("unknown backend 'tpu'"), HasSubstr("interpret"), HasSubstr("cpu"), HasSubstr("cuda")));
  EXPECT_THAT(err, HasSubstr("pallas_call 'unknown_be'"));
  EXPECT_THAT(error_message([] { backend::get("nope"); }), HasSubstr("unknown backend 'nope' (known: interpret, cpu, cuda)"));
}

TEST(CallErrors, UnavailableBackend) {
  for (const std::string& name : backend::names()) {
    const std::string why = backend::get(name).unavailable_reason();
    if (why.empty()) continue;
    SCOPED_TRACE(name);
    auto f = pallas_call(copy_kernel, ShapeDtype({8}, f32), {.name = "unavailable", .backend = name});
    EXPECT_THAT(error_message([&] { f(kX8); }),
                AllOf(HasSubstr("pallas_call 'unavailable'"), HasSubstr("backend '" + name + "' is unavailable"), HasSubstr(why)));
    return;
  }
  GTEST_SKIP() << "every backend is available on this machine";
}

// A backend that runs on the host never reads a device array through its pointer: pallas_call
// copies device inputs (and the inputs of aliased outputs) to the host first, with to_host. On a
// machine without CUDA that copy is the Error, which shows the routing.
TEST(CallErrors, HostBackendsTakeDeviceInputsThroughToHost) {
  if (pl::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is here: tests/cuda runs real device arrays";
  // An Array that says it lives on cuda:0; its bytes are host memory owned by the test.
  std::vector<float> bytes(8, 1.0f);
  auto storage = std::make_shared<Storage>();
  storage->ptr = bytes.data();
  storage->nbytes = bytes.size() * sizeof(float);
  storage->device = Device{Device::cuda, 0};
  const Array on_device({8}, f32, storage);
  for (const std::string& name : pl::available_backends()) {
    if (!backend::get(name).runs_on_host()) continue;
    SCOPED_TRACE(name);
    auto f = pallas_call(copy_kernel, ShapeDtype({8}, f32), {.name = "device_input", .backend = name});
    EXPECT_THAT(error_message([&] { f(on_device); }), HasSubstr("to_host(cuda:0)"));
    auto g = pallas_call([](Ref x, Ref o) { o[pl::all] = o[pl::all] + x[pl::all]; }, ShapeDtype({8}, f32),
                         {.input_output_aliases = {{0, 0}}, .name = "device_alias", .backend = name});
    EXPECT_THAT(error_message([&] { g(on_device); }), HasSubstr("to_host(cuda:0)"));
    EXPECT_TRUE(pl::array_equal(f(kX8), kX8));  // host arrays still go straight through
  }
  EXPECT_TRUE(backend::get("interpret").runs_on_host());
  EXPECT_FALSE(backend::get("cuda").runs_on_host());
}

// ---------------------------------------------------------------------------------------------
// Kernel operations outside a kernel.

TEST(CallErrors, KernelOpsOutsideAKernel) {
  EXPECT_THAT(error_message([] { pl::program_id(0); }), AllOf(HasSubstr("program_id"), HasSubstr("outside a kernel")));
  EXPECT_THAT(error_message([] { pl::num_programs(0); }), AllOf(HasSubstr("num_programs"), HasSubstr("outside a kernel")));
  EXPECT_THAT(error_message([] { Value(1) + Value(2); }), AllOf(HasSubstr("add"), HasSubstr("outside a kernel")));
  EXPECT_THAT(error_message([] { jnp::zeros({4}); }), HasSubstr("outside a kernel"));
  EXPECT_THAT(error_message([] { Ref().shape(); }), HasSubstr("outside a kernel"));
  EXPECT_THAT(error_message([] { pl::fori_loop(0, 4, [](Value) {}); }), AllOf(HasSubstr("fori_loop"), HasSubstr("outside a kernel")));
  EXPECT_THAT(error_message([] { pl::debug_print("x"); }), HasSubstr("outside a kernel"));
  EXPECT_THAT(error_message([] { Value v = kX8; (void)v; }),
              AllOf(HasSubstr("array of shape (8,)"), HasSubstr("cannot become a kernel Value outside a kernel")));
}

// Regression: kernel ops called outside a kernel name the op the user called, not an internal step.
TEST(CallErrors, KernelOpsOutsideAKernelNameTheOp) {
  EXPECT_THAT(error_message([] { jnp::exp(Value(1.0)); }), AllOf(HasSubstr("exp"), HasSubstr("outside a kernel")));
  EXPECT_THAT(error_message([] { pl::load(Ref(), pl::idx(pl::all)); }), AllOf(HasSubstr("load"), HasSubstr("outside a kernel")));
  EXPECT_THAT(error_message([] { pl::store(Ref(), Value(1.0f)); }), AllOf(HasSubstr("store"), HasSubstr("outside a kernel")));
}

// ---------------------------------------------------------------------------------------------
// .npy files.

TEST(CallErrors, NpyLoadOfAMissingOrBrokenFile) {
  const std::string missing = std::string(PL_BINARY_DIR) + "/no_such_dir/missing.npy";
  EXPECT_THAT(error_message([&] { load_npy(missing); }), AllOf(HasSubstr("load_npy"), HasSubstr("cannot open"), HasSubstr(missing)));
  const std::string broken = std::string(PL_BINARY_DIR) + "/errors_test_broken.npy";
  {
    std::ofstream out(broken, std::ios::binary);
    out << "this is not a .npy file";
  }
  EXPECT_THAT(error_message([&] { load_npy(broken); }), AllOf(HasSubstr("load_npy"), HasSubstr(broken)));
  std::remove(broken.c_str());
}

}  // namespace
}  // namespace palladium::etest
