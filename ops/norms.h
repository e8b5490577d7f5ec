// Normalisation kernels beside attention, as the Pallas GPU ops ship them: layer norm and RMS norm
// (forward and backward kernels, wired as custom VJPs so grad runs the backward kernels) and
// softmax over the last axis (forward and backward kernels). x is (rows, features); each program
// owns a block of whole rows, computing in float32 (float64 for float64 inputs).
#pragma once
#include <string>

#include "palladium/array.h"

namespace palladium::ops {

struct NormOptions {
  double eps = 1e-5;
  // Rows per program: the largest divisor of the row count up to this. 0: chosen for the backend
  // (CUDA: rows of up to 4096 elements in all, at least one; otherwise 16).
  int64_t block_rows = 0;
  std::string backend;      // "" = the default backend
};

// (x - mean) / sqrt(var + eps) * weight + bias, per row; weight and bias are (features,).
Array layer_norm(const Array& x, const Array& weight, const Array& bias, const NormOptions& options = {});
// x / sqrt(mean(x^2) + eps) * weight, per row.
Array rms_norm(const Array& x, const Array& weight, const NormOptions& options = {});
// exp(x - max) / sum(exp(x - max)) over the last axis, per row.
Array softmax(const Array& x, const NormOptions& options = {});

}  // namespace palladium::ops
