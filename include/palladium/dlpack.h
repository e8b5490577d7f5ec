// DLPack exchange (dlpack/dlpack.h, Debian's libdlpack-dev): Arrays to and from other libraries
// (NumPy, PyTorch, JAX, CuPy) without copies, on the host and on CUDA devices.
//
//   DLManagedTensor* t = pl::to_dlpack(a);   // shares a's buffer; the consumer calls t->deleter(t)
//   pl::Array b = pl::from_dlpack(t);         // takes ownership: calls t->deleter when b's buffer dies
//
// Every Palladium dtype maps to DLPack's (bfloat16 is kDLBfloat; bool is DLPack 0.8's kDLBool,
// code 6). from_dlpack accepts compact row-major tensors only (strides null or equal to the
// row-major strides); anything else is an Error naming what was given: copy it contiguous first.
// CUDA tensors are used on the current stream of their device: the producer must have finished
// writing them (DLPack's stream handshake is the caller's, as with __dlpack__(stream=...)).
#pragma once
#include "palladium/array.h"

struct DLManagedTensor;

namespace palladium {

DLManagedTensor* to_dlpack(const Array& a);
Array from_dlpack(DLManagedTensor* tensor);

}  // namespace palladium
