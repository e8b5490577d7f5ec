// Streams, events and StreamScope; the stream-ordered caching allocator; device-to-device copies;
// and the errors of the stream API. GPU tests compare against host computations; the cpu-stream
// and error tests that need no GPU run everywhere.
#include <gmock/gmock.h>

#include <memory>

#include "backends/cuda/stream.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_support.h"

namespace palladium::cudatest {
namespace {

using test_support::error_message;
using ::testing::HasSubstr;

constexpr Device kCpu{Device::cpu, 0};
constexpr Device kCuda0{Device::cuda, 0};
constexpr Device kCuda1{Device::cuda, 1};

// A stream or an event of a CUDA device that never reaches the driver: enough for checks that must
// fire before any driver call, so that they can be tested without a GPU (or a second one).
Stream unbacked_cuda_stream(Device d) { return Stream(std::make_shared<detail::StreamState>(d, nullptr, false, 0)); }
Event unbacked_cuda_event(Device d) { return Event(std::make_shared<detail::EventState>(d, nullptr, d.str() + " stream 99")); }

// An Array that claims to live on `d` without memory behind it (for checks made before any access).
Array unbacked_device_array(Shape shape, Device d) {
  auto s = std::make_shared<Storage>();
  s->ptr = reinterpret_cast<void*>(uintptr_t{0x1000});
  s->nbytes = static_cast<size_t>(numel(shape)) * 4;
  s->device = d;
  return Array(std::move(shape), f32, s);
}

constexpr int64_t kCols = 1024;
pl::BlockSpec row_spec() { return pl::BlockSpec({pl::None, kCols}, [](pl::Index i) { return pl::idx(i, 0); }); }

// o = x * c, where c runs `n[0]` steps of c <- c / 2 + 1 from 0: exactly 2 in float32 after 25 steps,
// and a dependent chain of n[0] multiply-adds, so the kernel runs as long as asked. x is read only
// after the loop, so memory given to another stream too early would show in the result.
pl::Callable<Array> slow_double(int64_t rows, const std::string& backend) {
  auto kernel = [](pl::Ref n_ref, pl::Ref x_ref, pl::Ref o_ref) {
    pl::Value c = pl::lax::fori_loop(0, n_ref[pl::idx(0)], [](pl::Value, pl::Value a) { return a * 0.5f + 1.0f; },
                                     jnp::zeros({}, f32));
    o_ref[pl::all] = x_ref[pl::all] * c;
  };
  return pl::pallas_call(kernel, pl::ShapeDtype({rows, kCols}, f32),
                         {.grid = {rows}, .in_specs = {pl::BlockSpec(), row_spec()}, .out_specs = {row_spec()},
                          .name = "slow_double", .backend = backend});
}

// o[i, :] = v + i for every row i.
pl::Callable<Array> fill_rows(int64_t rows, const std::string& backend) {
  auto kernel = [](pl::Ref v_ref, pl::Ref o_ref) { o_ref[pl::all] = v_ref[pl::all] + pl::program_id(0).astype(f32); };
  return pl::pallas_call(kernel, pl::ShapeDtype({rows, kCols}, f32),
                         {.grid = {rows}, .in_specs = {pl::BlockSpec()}, .out_specs = {row_spec()}, .name = "fill_rows",
                          .backend = backend});
}

// o = x / 2 + y / 4 + 1, elementwise over rows.
pl::Callable<Array> mix(int64_t rows, const std::string& backend) {
  auto kernel = [](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] * 0.5f + y[pl::all] * 0.25f + 1.0f; };
  return pl::pallas_call(kernel, pl::ShapeDtype({rows, kCols}, f32),
                         {.grid = {rows}, .in_specs = {row_spec(), row_spec()}, .out_specs = {row_spec()}, .name = "mix",
                          .backend = backend});
}

Array steps(int32_t n) { return pl::from_vector(std::vector<int32_t>{n}); }

constexpr int32_t kLongLoop = 1 << 22;  // some milliseconds on an H100

// ---- no GPU needed ----

TEST(StreamErrors, CudaStreamsWithoutCudaSayWhy) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "CUDA is available here";
  const std::string why = cuda_unavailable_reason();
  EXPECT_EQ(error_message([] { (void)new_stream(kCuda0); }), "new_stream(cuda:0): CUDA is unavailable: " + why);
  EXPECT_EQ(error_message([] { (void)default_stream(kCuda0); }), "default_stream(cuda:0): CUDA is unavailable: " + why);
  EXPECT_EQ(error_message([] { (void)current_stream(kCuda0); }), "current_stream(cuda:0): CUDA is unavailable: " + why);
  EXPECT_EQ(error_message([] { (void)to_device(pl::arange(4), kCuda0); }),
            "to_device(cpu -> cuda:0): CUDA is unavailable: " + why);
  EXPECT_EQ(error_message([] { (void)empty({4}, f32, kCuda0); }), "empty(cuda:0): CUDA is unavailable: " + why);
}

TEST(StreamErrors, EventsDoNotCrossCpuAndCudaStreams) {
  const Stream cpu = new_stream(kCpu);
  const Stream gpu = unbacked_cuda_stream(kCuda0);
  EXPECT_EQ(error_message([&] { gpu.wait(record(cpu)); }),
            "Stream::wait: cuda:0 default stream cannot wait on an event recorded on " + cpu.str() +
                ": cpu and CUDA streams do not order each other's work (work on a cpu stream is done when record "
                "returns)");
  EXPECT_EQ(error_message([&] { cpu.wait(unbacked_cuda_event(kCuda0)); }),
            "Stream::wait: " + cpu.str() +
                " cannot wait on an event recorded on cuda:0 stream 99: cpu and CUDA streams do not order each "
                "other's work (event.synchronize() blocks the host until the event is done)");
}

TEST(StreamErrors, ExternalStreamsAreCudaStreams) {
  int dummy = 0;
  EXPECT_EQ(error_message([&] { (void)external_stream(kCpu, &dummy); }),
            "external_stream(cpu): only CUDA devices have streams of other libraries");
  if (!cuda_unavailable_reason().empty()) {
    EXPECT_EQ(error_message([&] { (void)external_stream(kCuda0, &dummy); }),
              "external_stream(cuda:0): CUDA is unavailable: " + cuda_unavailable_reason());
  }
}

// copy_into writes into a buffer someone else allocated; host to host needs no GPU.
TEST(CopyInto, HostBuffersAndErrors) {
  const Array src = normal(61, {5, 7});
  Array dst(Shape{5, 7}, f32);
  copy_into(src, dst);
  EXPECT_TRUE(agree(dst, src, 0));
  EXPECT_EQ(error_message([&] { copy_into(src, Array(Shape{7, 5}, f32)); }),
            "copy_into: the source is float32 of shape (5, 7) but the destination is float32 of shape (7, 5)");
  EXPECT_EQ(error_message([&] { copy_into(src, Array(Shape{5, 7}, pl::f64)); }),
            "copy_into: the source is float32 of shape (5, 7) but the destination is float64 of shape (5, 7)");
  EXPECT_EQ(error_message([&] { copy_into(Array(), dst); }), "copy_into: the source is undefined (none)");
  EXPECT_EQ(error_message([&] { copy_into(src, Array()); }), "copy_into: the destination is undefined (none)");
  EXPECT_EQ(error_message([&] {
              (void)pl::jit([&](const Array& a) {
                copy_into(a, dst);
                return a;
              })(src);
            }),
            "copy_into: a traced Array has no buffer to copy (call copy_into outside jit, grad and vmap)");
}

TEST(CpuStreams, AreSynchronousAndCallsRunUnderThem) {
  const Stream s = new_stream(kCpu);
  EXPECT_EQ(s.device(), kCpu);
  EXPECT_FALSE(s.is_default());
  EXPECT_TRUE(default_stream(kCpu).is_default());
  EXPECT_TRUE(default_stream(kCpu) == default_stream(kCpu));
  EXPECT_FALSE(s == new_stream(kCpu));
  EXPECT_EQ(default_stream(kCpu).str(), "cpu default stream");
  StreamScope scope(s);
  EXPECT_TRUE(current_stream(kCpu) == s);
  const Array x = normal(11, {4, kCols}), y = normal(12, {4, kCols});
  std::vector<std::string> backends = {"interpret"};
  for (const std::string& b : available_backends())
    if (b == "cpu") backends.push_back(b);
  for (const std::string& b : backends) {
    SCOPED_TRACE(b);
    const Array out = mix(4, b)(x, y);
    for (int64_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out.get(i), x.get(i) * 0.5 + y.get(i) * 0.25 + 1.0, 1e-5);
  }
  const Event e = record(s);
  EXPECT_TRUE(e.done());
  EXPECT_EQ(e.device(), kCpu);
  s.wait(e);
  e.synchronize();
  s.synchronize();
  EXPECT_TRUE(s.done());
}

TEST(CpuStreams, ScopesNestAndRestore) {
  const Stream outer = new_stream(kCpu), inner = new_stream(kCpu);
  EXPECT_TRUE(current_stream(kCpu) == default_stream(kCpu));
  {
    StreamScope a(outer);
    EXPECT_TRUE(current_stream(kCpu) == outer);
    {
      StreamScope b(inner);
      EXPECT_TRUE(current_stream(kCpu) == inner);
    }
    EXPECT_TRUE(current_stream(kCpu) == outer);
  }
  EXPECT_TRUE(current_stream(kCpu) == default_stream(kCpu));
}

// ---- on a GPU ----

TEST(CudaStreams, HandlesCompareAndReportState) {
  PL_REQUIRE_GPU();
  const Stream s = new_stream(kCuda0), t = new_stream(kCuda0);
  const Stream copy = s;
  EXPECT_TRUE(copy == s);
  EXPECT_FALSE(s == t);
  EXPECT_FALSE(s.is_default());
  EXPECT_EQ(s.device(), kCuda0);
  EXPECT_THAT(s.str(), HasSubstr("cuda:0 stream "));
  EXPECT_TRUE(default_stream(kCuda0) == default_stream(kCuda0));
  EXPECT_TRUE(default_stream(kCuda0).is_default());
  EXPECT_TRUE(current_stream(kCuda0) == default_stream(kCuda0));
  const Event e = record(s);
  s.synchronize();
  EXPECT_TRUE(s.done());
  EXPECT_TRUE(e.done());
  e.synchronize();
  EXPECT_EQ(error_message([] { (void)new_stream(Device{Device::cuda, cuda_device_count()}); }),
            "new_stream(cuda:" + std::to_string(cuda_device_count()) + "): cuda:" + std::to_string(cuda_device_count()) +
                " does not exist (" + std::to_string(cuda_device_count()) + " CUDA device" +
                (cuda_device_count() == 1 ? "" : "s") + " visible)");
}

TEST(CudaStreams, ScopesNestAndRestore) {
  PL_REQUIRE_GPU();
  const Stream s1 = new_stream(kCuda0), s2 = new_stream(kCuda0), host = new_stream(kCpu);
  EXPECT_TRUE(current_stream(kCuda0) == default_stream(kCuda0));
  {
    StreamScope a(s1);
    EXPECT_TRUE(current_stream(kCuda0) == s1);
    {
      StreamScope b(s2);
      EXPECT_TRUE(current_stream(kCuda0) == s2);
      {
        StreamScope c(host);  // another device's scope leaves cuda:0's stream alone
        EXPECT_TRUE(current_stream(kCuda0) == s2);
        EXPECT_TRUE(current_stream(kCpu) == host);
      }
    }
    EXPECT_TRUE(current_stream(kCuda0) == s1);
  }
  EXPECT_TRUE(current_stream(kCuda0) == default_stream(kCuda0));
}

// A kernel with no inputs makes host results outside any scope; under a StreamScope on a GPU it
// leaves them on that GPU, queued on the scope's stream (a compiled program's constant-making
// kernels run so, instead of making the host wait for the GPU).
TEST(CudaStreams, KernelsWithoutInputsFollowTheScopesDevice) {
  PL_REQUIRE_GPU();
  auto iota_rows = pl::pallas_call(
      [](pl::Ref o_ref) { o_ref[pl::all] = jnp::zeros({kCols}, f32) + pl::program_id(0).astype(f32); },
      pl::ShapeDtype({8, kCols}, f32), {.grid = {8}, .out_specs = {row_spec()}, .name = "iota_rows", .backend = "cuda"});
  const Array on_host = iota_rows();
  EXPECT_EQ(on_host.device().kind, Device::cpu);
  const Stream s = new_stream(kCuda0);
  Array on_gpu;
  {
    StreamScope scope(s);
    on_gpu = iota_rows();
  }
  EXPECT_EQ(on_gpu.device(), kCuda0);
  s.synchronize();
  EXPECT_TRUE(pl::array_equal(pl::to_host(on_gpu), on_host));
  EXPECT_EQ(on_host.to_doubles().at(3 * kCols + 5), 3.0);
}

TEST(CudaStreams, TwoStreamsRunIndependentChains) {
  PL_REQUIRE_GPU();
  const int64_t rows = 64;
  auto step = mix(rows, "cuda");
  const Stream streams[2] = {new_stream(kCuda0), new_stream(kCuda0)};
  Array host_x[2], host_y[2], results[2];
  for (int k = 0; k < 2; ++k) {
    host_x[k] = normal(20 + static_cast<uint64_t>(k), {rows, kCols});
    host_y[k] = normal(30 + static_cast<uint64_t>(k), {rows, kCols});
  }
  // Interleave the two chains' launches so that they are queued on both streams at once.
  Array acc[2], x[2];
  for (int k = 0; k < 2; ++k) {
    StreamScope scope(streams[k]);
    x[k] = to_device(host_x[k], kCuda0);
    acc[k] = to_device(host_y[k], kCuda0);
  }
  for (int i = 0; i < 20; ++i)
    for (int k = 0; k < 2; ++k) {
      StreamScope scope(streams[k]);
      acc[k] = step(x[k], acc[k]);
    }
  for (int k = 0; k < 2; ++k) {
    StreamScope scope(streams[k]);
    results[k] = to_host(acc[k]);
  }
  auto reference = mix(rows, "interpret");
  for (int k = 0; k < 2; ++k) {
    Array ref = host_y[k];
    for (int i = 0; i < 20; ++i) ref = reference(host_x[k], ref);
    EXPECT_TRUE(agree(results[k], ref)) << "stream " << k;
  }
}

TEST(CudaStreams, EventOrdersProducerBeforeConsumer) {
  PL_REQUIRE_GPU();
  const int64_t rows = 8;
  auto produce = slow_double(rows, "cuda");
  auto consume = mix(rows, "cuda");
  const Stream s1 = new_stream(kCuda0), s2 = new_stream(kCuda0);
  const Array hx = normal(40, {rows, kCols}), hy = normal(41, {rows, kCols});
  (void)to_host(consume(to_device(hx, kCuda0), to_device(hy, kCuda0)));  // compiled before timing matters
  Array y, z;
  {
    StreamScope scope(s1);
    y = produce(to_device(steps(kLongLoop), kCuda0), to_device(hx, kCuda0));  // y = 2 x, slowly
  }
  const Event produced = record(s1);
  {
    StreamScope scope(s2);
    const Array other = to_device(hy, kCuda0);
    s2.wait(produced);
    z = consume(y, other);  // z = y / 2 + hy / 4 + 1 = x + hy / 4 + 1
  }
  s2.synchronize();
  Array expected(hx.shape(), f64);
  for (int64_t i = 0; i < hx.size(); ++i) expected.set(i, hx.get(i) + hy.get(i) * 0.25 + 1.0);
  EXPECT_TRUE(agree(to_host(z).astype(f64), expected, 1e-6));
}

TEST(CudaStreams, AllocatorWaitsBeforeReusingMemoryOnAnotherStream) {
  PL_REQUIRE_GPU();
  const int64_t rows = 6;  // 24 KiB arrays: a size class this test has to itself
  auto slow = slow_double(rows, "cuda");
  auto fill = fill_rows(rows, "cuda");
  const Array hx = normal(50, {rows, kCols}), hv = normal(51, {kCols});
  // Compile both kernels first, keeping their results alive so that no cached block of this size
  // is left over for the stream below.
  const Array warm_slow = slow(to_device(steps(1), kCuda0), to_device(hx, kCuda0));
  const Array warm_fill = fill(to_device(hv, kCuda0));
  synchronize(kCuda0);
  const Stream s1 = new_stream(kCuda0), s2 = new_stream(kCuda0);
  Array y, filled, v;
  const void* x_memory = nullptr;
  {
    StreamScope scope(s1);
    Array x = to_device(hx, kCuda0);
    x_memory = x.data();
    y = slow(to_device(steps(kLongLoop), kCuda0), x);  // reads x only after a long loop
  }  // x is freed here, while the kernel reading it is still queued on s1
  {
    StreamScope scope(s2);
    v = to_device(hv, kCuda0);
    filled = fill(v);  // takes x's memory: s2 must wait for s1's kernel before writing it
  }
  EXPECT_EQ(filled.data(), x_memory) << "the allocator did not reuse the freed block; the test proves nothing";
  const Array got_y = to_host(y), got_filled = to_host(filled);
  for (int64_t i = 0; i < hx.size(); ++i) ASSERT_EQ(got_y.get(i), 2.0 * hx.get(i)) << "flat " << i;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < kCols; ++c)
      ASSERT_EQ(got_filled.get(r * kCols + c), static_cast<double>(static_cast<float>(hv.get(c) + static_cast<double>(r))));
}

TEST(CudaStreams, AllocatorWaitsForEveryStreamThatUsedABlock) {
  PL_REQUIRE_GPU();
  // x is made on the default stream and read by a kernel on s1: freeing it must not let the default
  // stream, where it was allocated, reuse it before s1's kernel is done (PyTorch's record_stream).
  const int64_t rows = 5;  // 20 KiB: a size class of its own
  auto slow = slow_double(rows, "cuda");
  auto fill = fill_rows(rows, "cuda");
  const Array hx = normal(52, {rows, kCols}), hv = normal(53, {kCols});
  const Array warm_slow = slow(to_device(steps(1), kCuda0), to_device(hx, kCuda0));
  const Array warm_fill = fill(to_device(hv, kCuda0));
  const Array v = to_device(hv, kCuda0), n = to_device(steps(kLongLoop), kCuda0);
  synchronize(kCuda0);
  const Stream s1 = new_stream(kCuda0);
  Array y;
  const void* x_memory = nullptr;
  {
    Array x = to_device(hx, kCuda0);  // on the default stream
    x_memory = x.data();
    StreamScope scope(s1);
    y = slow(n, x);
  }
  const Array filled = fill(v);  // on the default stream, in x's memory
  EXPECT_EQ(filled.data(), x_memory) << "the allocator did not reuse the freed block; the test proves nothing";
  const Array got_y = to_host(y), got_filled = to_host(filled);
  for (int64_t i = 0; i < hx.size(); ++i) ASSERT_EQ(got_y.get(i), 2.0 * hx.get(i)) << "flat " << i;
  for (int64_t c = 0; c < kCols; ++c) ASSERT_EQ(got_filled.get(c), hv.get(c));
}

TEST(CudaStreams, FreedMemoryIsReusedAtOnceOnTheSameStream) {
  PL_REQUIRE_GPU();
  const Stream s = new_stream(kCuda0);
  StreamScope scope(s);
  const void* first = nullptr;
  {
    const Array a = empty({5, 777}, f32, kCuda0);
    first = a.data();
  }
  const Array b = empty({5, 777}, f32, kCuda0);
  EXPECT_EQ(b.data(), first);
}

TEST(CudaStreams, DeviceToDeviceCopies) {
  PL_REQUIRE_GPU();
  const Array h = normal(60, {37, 129});
  const Array d = to_device(h, kCuda0);
  const Array same = to_device(d, kCuda0);
  EXPECT_NE(same.data(), d.data());
  EXPECT_EQ(same.device(), kCuda0);
  EXPECT_TRUE(agree(to_host(same), h, 0));
  {
    StreamScope scope(new_stream(kCuda0));
    const Array on_stream = to_device(d, kCuda0);
    EXPECT_TRUE(agree(to_host(on_stream), h, 0));
  }
  if (cuda_device_count() >= 2) {
    const Array other = to_device(d, kCuda1);
    EXPECT_EQ(other.device(), kCuda1);
    EXPECT_TRUE(agree(to_host(other), h, 0));
    EXPECT_TRUE(agree(to_host(to_device(other, kCuda0)), h, 0));
  }
}

// A stream made by "another library" (here the driver directly): Palladium's work in its scope is
// queued on it, copy_into lands results in a buffer that library owns, and the handle is not
// destroyed by Palladium.
TEST(CudaStreams, ExternalStreamAndCopyInto) {
  PL_REQUIRE_GPU();
  const cuda::DriverApi& d = cuda::require_driver();
  cuda::make_current(0);
  cuda::CUstream handle = nullptr;
  ASSERT_EQ(d.cuStreamCreate(&handle, cuda::kStreamNonBlocking), 0);
  const Array x = normal(62, {256, kCols}), y = normal(63, {256, kCols});
  Array foreign = empty({256, kCols}, f32, kCuda0);  // stands for a buffer the other library owns
  {
    const Stream s = external_stream(kCuda0, handle);
    EXPECT_NE(s.str().find("external stream"), std::string::npos) << s.str();
    StreamScope scope(s);
    const Array dx = to_device(x, kCuda0), dy = to_device(y, kCuda0), n = to_device(steps(kLongLoop), kCuda0);
    Array r = mix(256, "cuda")(slow_double(256, "cuda")(n, dx), dy);  // some milliseconds
    for (int i = 0; i < 20; ++i) r = mix(256, "cuda")(r, dy);  // queued work the copy must follow
    copy_into(r, foreign);
    // Queued on the external stream: still running there, done once that stream is synchronized.
    EXPECT_EQ(d.cuStreamQuery(handle), cuda::kErrorNotReady);
    EXPECT_EQ(d.cuStreamSynchronize(handle), 0);
    EXPECT_TRUE(s.done());
  }
  Array want = palladium::multiply(x, full({1}, 2.0, f32));  // slow_double
  for (int i = 0; i < 21; ++i) want = palladium::add(palladium::multiply(want, full({1}, 0.5, f32)),
                                                       palladium::add(palladium::multiply(y, full({1}, 0.25, f32)),
                                                                      full({1}, 1.0, f32)));
  EXPECT_LT(rel_error(to_host(foreign), want), 1e-6);
  Array host_dst(Shape{256, kCols}, f32);
  copy_into(foreign, host_dst);  // device to host
  EXPECT_TRUE(agree(host_dst, to_host(foreign), 0));
  copy_into(x, foreign);  // host to device
  EXPECT_TRUE(agree(to_host(foreign), x, 0));
  EXPECT_EQ(d.cuStreamDestroy(handle), 0);  // still ours to destroy
}

TEST(CudaStreams, AliasedDeviceInputsAreCopiedOnTheDevice) {
  PL_REQUIRE_GPU();
  // Only the first half of each row is written: the rest must keep the aliased input's values.
  auto make = [](const std::string& backend) {
    auto kernel = [](pl::Ref x, pl::Ref o) { o[pl::idx(pl::ds(0, kCols / 2))] = x[pl::idx(pl::ds(0, kCols / 2))] * 3.0f; };
    return pl::pallas_call(kernel, pl::ShapeDtype({4, kCols}, f32),
                           {.grid = {4}, .in_specs = {row_spec()}, .out_specs = {row_spec()},
                            .input_output_aliases = {{0, 0}}, .name = "half_triple", .backend = backend});
  };
  const Array h = normal(70, {4, kCols});
  const Array d = to_device(h, kCuda0);
  StreamScope scope(new_stream(kCuda0));
  const Array out = make("cuda")(d);
  EXPECT_EQ(out.device(), kCuda0);
  EXPECT_NE(out.data(), d.data());
  EXPECT_TRUE(agree(to_host(out), make("interpret")(h), 0));
  EXPECT_TRUE(agree(to_host(d), h, 0));  // the input itself is untouched
}

TEST(CudaStreams, ToHostReturnsFinishedDataFromAnyStream) {
  PL_REQUIRE_GPU();
  const int64_t rows = 4;
  auto slow = slow_double(rows, "cuda");
  const Array hx = normal(80, {rows, kCols});
  const Stream s = new_stream(kCuda0);
  Array y1, y2;
  Array inside;
  {
    StreamScope scope(s);
    y1 = slow(to_device(steps(kLongLoop), kCuda0), to_device(hx, kCuda0));
    inside = to_host(y1);  // on s: waits for its copy
    y2 = slow(to_device(steps(kLongLoop), kCuda0), to_device(hx, kCuda0));
  }
  const Array outside = to_host(y2);  // on the default stream: waits for s's kernel that wrote y2
  Array expected(hx.shape(), f32);
  for (int64_t i = 0; i < hx.size(); ++i) expected.set(i, 2.0 * hx.get(i));
  EXPECT_TRUE(agree(inside, expected, 0));
  EXPECT_TRUE(agree(outside, expected, 0));
}

TEST(CudaStreams, HostArrayCallsRunOnTheScopedStream) {
  PL_REQUIRE_GPU();
  const Array hx = normal(90, {16, kCols}), hy = normal(91, {16, kCols});
  const Stream s = new_stream(kCuda0);
  StreamScope scope(s);
  const Array out = mix(16, "cuda")(hx, hy);
  EXPECT_EQ(out.device(), kCpu);
  EXPECT_TRUE(agree(out, mix(16, "interpret")(hx, hy)));
  EXPECT_TRUE(s.done());  // host-array calls wait for their stream
}

TEST(CudaStreamErrors, CallUnderAScopeOfAnotherDevice) {
  PL_REQUIRE_GPU();
  const Array x = to_device(normal(100, {4, kCols}), kCuda0);
  const Array y = to_device(normal(101, {4, kCols}), kCuda0);
  auto call = mix(4, "cuda");
  // A stream of cuda:1 that never reaches the driver: this check runs on a one-GPU machine too.
  const Stream elsewhere = unbacked_cuda_stream(kCuda1);
  {
    StreamScope scope(elsewhere);
    EXPECT_EQ(error_message([&] { (void)call(x, y); }),
              "pallas_call 'mix': its arrays are on cuda:0 but the current stream is cuda:1 default stream (the "
              "innermost StreamScope); open a StreamScope on a stream of cuda:0 or move the arrays with to_device");
  }
  // With a scope for cuda:0 further out, the call runs on that stream.
  const Stream mine = new_stream(kCuda0);
  StreamScope outer(mine);
  StreamScope inner(elsewhere);
  EXPECT_TRUE(agree(to_host(call(x, y)), mix(4, "interpret")(to_host(x), to_host(y))));
}

TEST(CudaStreamErrors, CallWithArraysOnTwoDevices) {
  PL_REQUIRE_GPU();
  const Array x = to_device(normal(110, {4, kCols}), kCuda0);
  const Array y = unbacked_device_array({4, kCols}, kCuda1);  // never read: the check comes first
  EXPECT_EQ(error_message([&] { (void)mix(4, "cuda")(x, y); }),
            "pallas_call 'mix': its inputs are on two devices, cuda:0 and cuda:1; move them to one with to_device");
}

TEST(CudaStreamErrors, RealSecondDevice) {
  PL_REQUIRE_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "one CUDA device";
  const Array x = to_device(normal(120, {4, kCols}), kCuda0);
  StreamScope scope(new_stream(kCuda1));
  EXPECT_THAT(error_message([&] { (void)mix(4, "cuda")(x, x); }),
              HasSubstr("pallas_call 'mix': its arrays are on cuda:0 but the current stream is cuda:1 stream "));
  const Array on1 = to_device(x, kCuda1);  // runs on cuda:1's scoped stream
  const Array out = mix(4, "cuda")(on1, on1);
  EXPECT_EQ(out.device(), kCuda1);
  const Array hx = to_host(x);
  EXPECT_TRUE(agree(to_host(out), mix(4, "interpret")(hx, hx)));
}

}  // namespace
}  // namespace palladium::cudatest
