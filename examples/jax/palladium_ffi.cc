// The seed attention forward (ops::mha) as XLA FFI handlers: JAX passes its buffers (CPU, or CUDA
// with the stream XLA runs the program on), which become Palladium Arrays without copies; the
// result is written into XLA's output buffer. A Palladium error (bad shapes, say) comes back to JAX
// as an error carrying Palladium's message.
#include <cstring>
#include <exception>
#include <memory>
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

}  // namespace

// The operands, result and attributes both handlers take.
template <class Binding> auto mha_signature(Binding b) {
  return std::move(b)
      .template Arg<ffi::Buffer<ffi::F32>>()
      .template Arg<ffi::Buffer<ffi::F32>>()
      .template Arg<ffi::Buffer<ffi::F32>>()
      .template Ret<ffi::Buffer<ffi::F32>>()
      .template Attr<float>("sm_scale")
      .template Attr<bool>("causal")
      .template Attr<int64_t>("block_q")
      .template Attr<int64_t>("block_k");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaForwardCuda, MhaForwardCuda,
                              mha_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<CUstream_st*>>())
                                  .Attr<int64_t>("device"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaForward, MhaForward, mha_signature(ffi::Ffi::Bind()));
