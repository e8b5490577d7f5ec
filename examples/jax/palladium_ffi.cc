// The seed attention (ops::mha) as XLA FFI handlers: the forward, and the custom VJP's halves (the
// forward with its residual, the backward kernel). JAX passes its buffers (CPU, or CUDA with the
// stream XLA runs the program on), which become Palladium Arrays without copies; results are
// written into XLA's output buffers. A Palladium error (bad shapes, say) comes back to JAX
// as an error carrying Palladium's message.
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <palladium/ops/attention.h>
#include <palladium/palladium.h>

#include "xla/ffi/api/ffi.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace ffi = xla::ffi;
namespace pl = palladium;

namespace {

// An XLA buffer as an Array over the same memory (XLA owns it; the Array frees nothing).
pl::Array borrow(void* data, ffi::Span<const int64_t> dims, pl::Device device = {}) {
  pl::Shape shape(dims.begin(), dims.end());
  auto storage = std::make_shared<pl::Storage>();
  storage->ptr = data;
  storage->nbytes = static_cast<size_t>(pl::numel(shape)) * sizeof(float);
  storage->device = device;
  return pl::Array(std::move(shape), pl::f32, std::move(storage));
}

pl::ops::MhaOptions mha_options(float sm_scale, bool causal, int64_t block_q, int64_t block_k) {
  pl::ops::MhaOptions o;
  o.sm_scale = sm_scale;
  o.causal = causal;
  o.block_q = block_q;
  o.block_k = block_k;
  return o;
}

ffi::Error MhaForward(ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                      ffi::ResultBuffer<ffi::F32> out, float sm_scale, bool causal, int64_t block_q, int64_t block_k) {
  try {
    const pl::ops::MhaOptions o = mha_options(sm_scale, causal, block_q, block_k);
    pl::Array result = pl::ops::mha(borrow(q.untyped_data(), q.dimensions()), borrow(k.untyped_data(), k.dimensions()),
                                    borrow(v.untyped_data(), v.dimensions()), pl::Array(), o);
    result = pl::to_host(result);
    if (result.nbytes() != out->size_bytes())
      return ffi::Error::Internal("palladium_mha_forward: the result has " + std::to_string(result.nbytes()) +
                                  " bytes, XLA's output buffer " + std::to_string(out->size_bytes()));
    std::memcpy(out->untyped_data(), result.data(), result.nbytes());
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return ffi::Error::InvalidArgument(e.what());
  }
}

// On a GPU: XLA's device buffers and its stream. Palladium queues the attention kernel on that
// stream (external_stream), so it runs in order with the rest of the jitted program, and copies the
// result into XLA's output buffer on it; nothing waits on the host. `device` is the CUDA ordinal
// of the buffers (the Python side passes it).
ffi::Error MhaForwardCuda(CUstream_st* stream, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                          ffi::Buffer<ffi::F32> v, ffi::ResultBuffer<ffi::F32> out, float sm_scale, bool causal,
                          int64_t block_q, int64_t block_k, int64_t device) {
  try {
    const pl::Device gpu{pl::Device::cuda, static_cast<int>(device)};
    pl::StreamScope on_xla_stream(pl::external_stream(gpu, stream));
    pl::Array result = pl::ops::mha(borrow(q.untyped_data(), q.dimensions(), gpu),
                                    borrow(k.untyped_data(), k.dimensions(), gpu),
                                    borrow(v.untyped_data(), v.dimensions(), gpu), pl::Array(),
                                    mha_options(sm_scale, causal, block_q, block_k));
    pl::copy_into(result, borrow(out->untyped_data(), out->dimensions(), gpu));
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return ffi::Error::InvalidArgument(e.what());
  }
}

// Copies `result` into XLA's output buffer: on the host, or on the GPU on the current stream.
void write(const pl::Array& result, ffi::ResultBuffer<ffi::F32>& out, std::optional<pl::Device> gpu,
           const char* name) {
  if (result.nbytes() != out->size_bytes())
    throw pl::Error(std::string(name) + ": the result has " + std::to_string(result.nbytes()) + " bytes, XLA's output buffer " +
                    std::to_string(out->size_bytes()));
  if (gpu) {
    pl::copy_into(result, borrow(out->untyped_data(), out->dimensions(), *gpu));
    return;
  }
  const pl::Array host = pl::to_host(result);
  std::memcpy(out->untyped_data(), host.data(), host.nbytes());
}

// The custom VJP's two halves (jax.custom_vjp in attention_from_jax.py): the forward with its
// residual lse, and the backward kernel. `stream` is null on the CPU.
ffi::Error MhaResiduals(CUstream_st* stream, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                        ffi::ResultBuffer<ffi::F32> out, ffi::ResultBuffer<ffi::F32> lse, float sm_scale, bool causal,
                        int64_t block_q, int64_t block_k, int64_t device) {
  try {
    std::optional<pl::Device> gpu;
    if (stream) gpu = pl::Device{pl::Device::cuda, static_cast<int>(device)};
    std::optional<pl::StreamScope> on_xla_stream;
    if (gpu) on_xla_stream.emplace(pl::external_stream(*gpu, stream));
    const pl::Device at = gpu.value_or(pl::Device{});
    auto [o, l] = pl::ops::mha_forward(borrow(q.untyped_data(), q.dimensions(), at), borrow(k.untyped_data(), k.dimensions(), at),
                                       borrow(v.untyped_data(), v.dimensions(), at), pl::Array(),
                                       mha_options(sm_scale, causal, block_q, block_k));
    write(o, out, gpu, "palladium_mha_residuals");
    write(l, lse, gpu, "palladium_mha_residuals");
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return ffi::Error::InvalidArgument(e.what());
  }
}

ffi::Error MhaBackward(CUstream_st* stream, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                       ffi::Buffer<ffi::F32> out, ffi::Buffer<ffi::F32> lse, ffi::Buffer<ffi::F32> dout,
                       ffi::ResultBuffer<ffi::F32> dq, ffi::ResultBuffer<ffi::F32> dk, ffi::ResultBuffer<ffi::F32> dv,
                       float sm_scale, bool causal, int64_t block_q, int64_t block_k, int64_t device) {
  try {
    std::optional<pl::Device> gpu;
    if (stream) gpu = pl::Device{pl::Device::cuda, static_cast<int>(device)};
    std::optional<pl::StreamScope> on_xla_stream;
    if (gpu) on_xla_stream.emplace(pl::external_stream(*gpu, stream));
    const pl::Device at = gpu.value_or(pl::Device{});
    auto b = [&](ffi::Buffer<ffi::F32>& x) { return borrow(x.untyped_data(), x.dimensions(), at); };
    auto [gq, gk, gv] = pl::ops::mha_backward(b(q), b(k), b(v), pl::Array(), b(out), b(lse), b(dout),
                                              mha_options(sm_scale, causal, block_q, block_k));
    write(gq, dq, gpu, "palladium_mha_backward");
    write(gk, dk, gpu, "palladium_mha_backward");
    write(gv, dv, gpu, "palladium_mha_backward");
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return ffi::Error::InvalidArgument(e.what());
  }
}

ffi::Error MhaResidualsCpu(ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                           ffi::ResultBuffer<ffi::F32> out, ffi::ResultBuffer<ffi::F32> lse, float sm_scale, bool causal,
                           int64_t block_q, int64_t block_k) {
  return MhaResiduals(nullptr, q, k, v, out, lse, sm_scale, causal, block_q, block_k, 0);
}

ffi::Error MhaBackwardCpu(ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                          ffi::Buffer<ffi::F32> out, ffi::Buffer<ffi::F32> lse, ffi::Buffer<ffi::F32> dout,
                          ffi::ResultBuffer<ffi::F32> dq, ffi::ResultBuffer<ffi::F32> dk, ffi::ResultBuffer<ffi::F32> dv,
                          float sm_scale, bool causal, int64_t block_q, int64_t block_k) {
  return MhaBackward(nullptr, q, k, v, out, lse, dout, dq, dk, dv, sm_scale, causal, block_q, block_k, 0);
}

}  // namespace

// The attributes every handler takes.
template <class Binding> auto mha_attrs(Binding b) {
  return std::move(b)
      .template Attr<float>("sm_scale")
      .template Attr<bool>("causal")
      .template Attr<int64_t>("block_q")
      .template Attr<int64_t>("block_k");
}

// The forward's operands, result and attributes.
template <class Binding> auto mha_signature(Binding b) {
  return mha_attrs(std::move(b)
                       .template Arg<ffi::Buffer<ffi::F32>>()
                       .template Arg<ffi::Buffer<ffi::F32>>()
                       .template Arg<ffi::Buffer<ffi::F32>>()
                       .template Ret<ffi::Buffer<ffi::F32>>());
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaForwardCuda, MhaForwardCuda,
                              mha_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<CUstream_st*>>())
                                  .Attr<int64_t>("device"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaForward, MhaForward, mha_signature(ffi::Ffi::Bind()));

// The custom VJP's halves: (q, k, v) -> (out, lse), and (q, k, v, out, lse, dout) -> (dq, dk, dv).
using F32 = ffi::Buffer<ffi::F32>;
XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaResiduals, MhaResidualsCpu,
                              mha_attrs(ffi::Ffi::Bind().Arg<F32>().Arg<F32>().Arg<F32>().Ret<F32>().Ret<F32>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaResidualsCuda, MhaResiduals,
                              mha_attrs(ffi::Ffi::Bind()
                                            .Ctx<ffi::PlatformStream<CUstream_st*>>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Ret<F32>()
                                            .Ret<F32>())
                                  .Attr<int64_t>("device"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaBackward, MhaBackwardCpu,
                              mha_attrs(ffi::Ffi::Bind()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Ret<F32>()
                                            .Ret<F32>()
                                            .Ret<F32>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaBackwardCuda, MhaBackward,
                              mha_attrs(ffi::Ffi::Bind()
                                            .Ctx<ffi::PlatformStream<CUstream_st*>>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Arg<F32>()
                                            .Ret<F32>()
                                            .Ret<F32>()
                                            .Ret<F32>())
                                  .Attr<int64_t>("device"));
