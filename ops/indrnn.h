// IndRNN (the blog's workload): h_t = relu(u * h_{t-1} + x_t), each feature independent. One
// program owns a block of features and runs the whole time loop without synchronising — what a
// scan over time steps cannot do.
#pragma once
#include <string>

#include "palladium/array.h"

namespace palladium::ops {

// x: (T, F), u: (F,), h0: (F,) -> all hidden states (T, F). block_f features per program.
Array indrnn(const Array& x, const Array& u, const Array& h0, int64_t block_f = 64, const std::string& backend = "");
// The plain loop over time, in float64 (the reference).
Array indrnn_reference(const Array& x, const Array& u, const Array& h0);

}  // namespace palladium::ops
