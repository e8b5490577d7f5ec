// The seed attention's forward and backward kernels behind a C interface for PyTorch
// (palladium_torch.py wraps them as torch.library custom ops with an autograd formula). Tensors
// cross as DLPack: each function takes ownership of the DLManagedTensors it is given (calling their
// deleters when done, also on failure) and returns new ones that the caller owns. On a GPU the
// kernels run on the stream the caller passes (torch's current stream), so they are ordered with
// the rest of the torch program and nothing waits on the host. A failure returns 1 with
// Palladium's message in `error`.
#include <cstdio>
#include <exception>
#include <optional>
#include <vector>

#include <dlpack/dlpack.h>

#include <palladium/dlpack.h>
#include <palladium/ops/attention.h>
#include <palladium/palladium.h>

namespace pl = palladium;

namespace {

// The given tensors as Arrays; those not yet adopted when one fails are released here.
std::vector<pl::Array> adopt(const std::vector<DLManagedTensor*>& tensors) {
  std::vector<pl::Array> arrays;
  for (size_t i = 0; i < tensors.size(); ++i) {
    try {
      arrays.push_back(pl::from_dlpack(tensors[i]));
    } catch (...) {
      for (size_t j = i; j < tensors.size(); ++j)
        if (tensors[j] && tensors[j]->deleter) tensors[j]->deleter(tensors[j]);
      throw;
    }
  }
  return arrays;
}

pl::ops::MhaOptions options(double sm_scale, int causal) {
  pl::ops::MhaOptions o;
  o.sm_scale = static_cast<float>(sm_scale);
  o.causal = causal != 0;
  return o;
}

// Adopts `tensors` and runs f on them, on `stream` where they are on a GPU. Returns 0, or 1 with the
// error's message in `error`.
template <class F>
int guarded(const std::vector<DLManagedTensor*>& tensors, void* stream, char* error, size_t error_len, F f) {
  try {
    const std::vector<pl::Array> in = adopt(tensors);
    std::optional<pl::StreamScope> on_stream;
    if (in[0].device().kind == pl::Device::cuda) on_stream.emplace(pl::external_stream(in[0].device(), stream));
    f(in);
    return 0;
  } catch (const std::exception& e) {
    if (error_len > 0) std::snprintf(error, error_len, "%s", e.what());
    return 1;
  }
}

}  // namespace

extern "C" {

// (q, k, v) of shape (batch, seq, heads, head_dim) -> out (same shape) and lse (batch, heads, seq).
int palladium_torch_mha_forward(DLManagedTensor* q, DLManagedTensor* k, DLManagedTensor* v, double sm_scale,
                                int causal, void* stream, DLManagedTensor** out, DLManagedTensor** lse, char* error,
                                size_t error_len) {
  return guarded({q, k, v}, stream, error, error_len, [&](const std::vector<pl::Array>& in) {
    auto [o, l] = pl::ops::mha_forward(in[0], in[1], in[2], pl::Array(), options(sm_scale, causal));
    *out = pl::to_dlpack(o);
    *lse = pl::to_dlpack(l);
  });
}

// The custom VJP's backward: (dq, dk, dv) from the forward's residuals and the output cotangent.
int palladium_torch_mha_backward(DLManagedTensor* q, DLManagedTensor* k, DLManagedTensor* v, DLManagedTensor* out,
                                 DLManagedTensor* lse, DLManagedTensor* dout, double sm_scale, int causal,
                                 void* stream, DLManagedTensor** dq, DLManagedTensor** dk, DLManagedTensor** dv,
                                 char* error, size_t error_len) {
  return guarded({q, k, v, out, lse, dout}, stream, error, error_len, [&](const std::vector<pl::Array>& in) {
    auto [gq, gk, gv] =
        pl::ops::mha_backward(in[0], in[1], in[2], pl::Array(), in[3], in[4], in[5], options(sm_scale, causal));
    *dq = pl::to_dlpack(gq);
    *dk = pl::to_dlpack(gk);
    *dv = pl::to_dlpack(gv);
  });
}

}  // extern "C"
