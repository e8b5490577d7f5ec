// Host side of the TMA: a kernel's tensor maps (TensorMapSpec, codegen.h) encoded by the driver
// for the device pointers of one launch. 128 bytes each, passed by value as kernel parameters.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/codegen.h"
#include "backends/cuda/driver_api.h"

namespace palladium::cuda {

struct alignas(64) TensorMapBytes {
  uint64_t words[16] = {};
};

// The global addresses a tensor map accepts (the hardware's 16-byte alignment).
inline bool tensor_map_address_ok(CUdeviceptr p) { return (p & 15) == 0; }

// Encodes `spec` for the array at `base`; throws Error naming `what` when the driver refuses.
TensorMapBytes encode_tensor_map(const TensorMapSpec& spec, CUdeviceptr base, const std::string& what);

}  // namespace palladium::cuda
