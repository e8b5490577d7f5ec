// The seed attention (ops::mha) as XLA FFI handlers: the forward, and the custom VJP's halves (the
// forward with its residual, the backward kernel), each for the CPU and for CUDA. JAX passes its
// buffers (on a GPU, with the stream XLA runs the program on), which become Palladium Arrays
// without copies; results are written into XLA's output buffers. A Palladium error (bad shapes,
// say) comes back to JAX as an error carrying Palladium's message.
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
using F32 = ffi::Buffer<ffi::F32>;
using F32Result = ffi::ResultBuffer<ffi::F32>;

namespace {

// Where a handler runs: on XLA's GPU and stream when XLA passes a stream, else on the host. On the
// GPU, Palladium queues its kernels on XLA's stream (external_stream), in order with the rest of
// the jitted program, and copies results into XLA's buffers there: nothing waits on the host.
class AtXla {
 public:
  AtXla(CUstream_st* stream, int64_t device) {
    if (!stream) return;
    gpu_ = pl::Device{pl::Device::cuda, static_cast<int>(device)};
    on_stream_.emplace(pl::external_stream(*gpu_, stream));
  }

  // An XLA buffer as an Array over the same memory (XLA owns it; the Array frees nothing).
  pl::Array in(void* data, ffi::Span<const int64_t> dims) const {
    pl::Shape shape(dims.begin(), dims.end());
    auto storage = std::make_shared<pl::Storage>();
    storage->ptr = data;
    storage->nbytes = static_cast<size_t>(pl::numel(shape)) * sizeof(float);
    storage->device = gpu_.value_or(pl::Device{});
    return pl::Array(std::move(shape), pl::f32, std::move(storage));
  }
  pl::Array in(F32& b) const { return in(b.untyped_data(), b.dimensions()); }

  // Copies `result` into XLA's output buffer.
  void out(const pl::Array& result, F32Result& buffer, const char* handler) const {
    if (result.nbytes() != buffer->size_bytes())
      throw pl::Error(std::string(handler) + ": the result has " + std::to_string(result.nbytes()) +
                      " bytes, XLA's output buffer " + std::to_string(buffer->size_bytes()));
    if (gpu_) {
      pl::copy_into(result, in(buffer->untyped_data(), buffer->dimensions()));
      return;
    }
    const pl::Array host = pl::to_host(result);
    std::memcpy(buffer->untyped_data(), host.data(), host.nbytes());
  }

 private:
  std::optional<pl::Device> gpu_;
  std::optional<pl::StreamScope> on_stream_;
};

pl::ops::MhaOptions mha_options(float sm_scale, bool causal, int64_t block_q, int64_t block_k) {
  pl::ops::MhaOptions o;
  o.sm_scale = sm_scale;
  o.causal = causal;
  o.block_q = block_q;
  o.block_k = block_k;
  return o;
}

template <class F> ffi::Error guarded(F f) {
  try {
    f();
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return ffi::Error::InvalidArgument(e.what());
  }
}

// `stream` is null on the CPU (and `device` unused there).
ffi::Error MhaForward(CUstream_st* stream, F32 q, F32 k, F32 v, F32Result out, float sm_scale, bool causal,
                      int64_t block_q, int64_t block_k, int64_t device) {
  return guarded([&] {
    const AtXla at(stream, device);
    at.out(pl::ops::mha(at.in(q), at.in(k), at.in(v), pl::Array(), mha_options(sm_scale, causal, block_q, block_k)),
           out, "palladium_mha_forward");
  });
}

// The custom VJP's halves (jax.custom_vjp in attention_from_jax.py): the forward with its residual
// lse, and the backward kernel.
ffi::Error MhaResiduals(CUstream_st* stream, F32 q, F32 k, F32 v, F32Result out, F32Result lse, float sm_scale,
                        bool causal, int64_t block_q, int64_t block_k, int64_t device) {
  return guarded([&] {
    const AtXla at(stream, device);
    auto [o, l] = pl::ops::mha_forward(at.in(q), at.in(k), at.in(v), pl::Array(),
                                       mha_options(sm_scale, causal, block_q, block_k));
    at.out(o, out, "palladium_mha_residuals");
    at.out(l, lse, "palladium_mha_residuals");
  });
}

ffi::Error MhaBackward(CUstream_st* stream, F32 q, F32 k, F32 v, F32 out, F32 lse, F32 dout, F32Result dq,
                       F32Result dk, F32Result dv, float sm_scale, bool causal, int64_t block_q, int64_t block_k,
                       int64_t device) {
  return guarded([&] {
    const AtXla at(stream, device);
    auto [gq, gk, gv] = pl::ops::mha_backward(at.in(q), at.in(k), at.in(v), pl::Array(), at.in(out), at.in(lse),
                                              at.in(dout), mha_options(sm_scale, causal, block_q, block_k));
    at.out(gq, dq, "palladium_mha_backward");
    at.out(gk, dk, "palladium_mha_backward");
    at.out(gv, dv, "palladium_mha_backward");
  });
}

// The CPU handlers: no stream, no device.
ffi::Error MhaForwardCpu(F32 q, F32 k, F32 v, F32Result out, float sm_scale, bool causal, int64_t block_q,
                         int64_t block_k) {
  return MhaForward(nullptr, q, k, v, out, sm_scale, causal, block_q, block_k, 0);
}
ffi::Error MhaResidualsCpu(F32 q, F32 k, F32 v, F32Result out, F32Result lse, float sm_scale, bool causal,
                           int64_t block_q, int64_t block_k) {
  return MhaResiduals(nullptr, q, k, v, out, lse, sm_scale, causal, block_q, block_k, 0);
}
ffi::Error MhaBackwardCpu(F32 q, F32 k, F32 v, F32 out, F32 lse, F32 dout, F32Result dq, F32Result dk, F32Result dv,
                          float sm_scale, bool causal, int64_t block_q, int64_t block_k) {
  return MhaBackward(nullptr, q, k, v, out, lse, dout, dq, dk, dv, sm_scale, causal, block_q, block_k, 0);
}

// A handler's binding: `In` float32 operands, `Out` float32 results, then the attributes; on CUDA
// XLA's stream comes first and the device ordinal last.
// (N >= 1: a Binding cannot be returned as it is, only as the result of adding to it.)
template <int N, class Binding> auto f32_args(Binding b) {
  if constexpr (N == 1) return std::move(b).template Arg<F32>();
  else return f32_args<N - 1>(std::move(b).template Arg<F32>());
}
template <int N, class Binding> auto f32_results(Binding b) {
  if constexpr (N == 1) return std::move(b).template Ret<F32>();
  else return f32_results<N - 1>(std::move(b).template Ret<F32>());
}
template <class Binding> auto mha_attrs(Binding b) {
  return std::move(b)
      .template Attr<float>("sm_scale")
      .template Attr<bool>("causal")
      .template Attr<int64_t>("block_q")
      .template Attr<int64_t>("block_k");
}
template <int In, int Out> auto cpu_binding() { return mha_attrs(f32_results<Out>(f32_args<In>(ffi::Ffi::Bind()))); }
template <int In, int Out> auto cuda_binding() {
  return mha_attrs(f32_results<Out>(f32_args<In>(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<CUstream_st*>>())))
      .template Attr<int64_t>("device");
}

}  // namespace

// The forward (q, k, v) -> out; the custom VJP's halves (q, k, v) -> (out, lse) and
// (q, k, v, out, lse, dout) -> (dq, dk, dv). The bindings are parenthesised: the macro would read
// the comma between template arguments as a separator.
XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaForward, MhaForwardCpu, (cpu_binding<3, 1>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaForwardCuda, MhaForward, (cuda_binding<3, 1>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaResiduals, MhaResidualsCpu, (cpu_binding<3, 2>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaResidualsCuda, MhaResiduals, (cuda_binding<3, 2>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaBackward, MhaBackwardCpu, (cpu_binding<6, 3>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PalladiumMhaBackwardCuda, MhaBackward, (cuda_binding<6, 3>()));
