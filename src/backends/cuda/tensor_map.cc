#include "backends/cuda/tensor_map.h"

#include "backends/cuda/device_runtime.h"
#include "palladium/error.h"

namespace palladium::cuda {
namespace {

// The driver's enum values (cuda.h: CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion).
constexpr int kTensorMapFloat16 = 6, kTensorMapBfloat16 = 9;
constexpr int kInterleaveNone = 0, kSwizzle128B = 3, kL2Promotion256B = 3, kOobFillZeros = 0;

}  // namespace

TensorMapBytes encode_tensor_map(const TensorMapSpec& spec, CUdeviceptr base, const std::string& what) {
  const DriverApi& d = require_driver();
  PL_CHECK(d.cuTensorMapEncodeTiled != nullptr, what, ": the kernel loads tiles with the TMA but the driver has no cuTensorMapEncodeTiled");
  PL_CHECK(tensor_map_address_ok(base), what, ": ref ", spec.ref, " is not 16-byte aligned for its tensor map");
  std::vector<uint64_t> dims(spec.dims.begin(), spec.dims.end()), strides(spec.byte_strides.begin(), spec.byte_strides.end());
  std::vector<unsigned> box(spec.box.begin(), spec.box.end()), element_strides(spec.dims.size(), 1u);
  TensorMapBytes out;
  const int type = spec.dtype == DType::float16 ? kTensorMapFloat16 : kTensorMapBfloat16;
  check_driver(d.cuTensorMapEncodeTiled(&out, type, static_cast<unsigned>(dims.size()), reinterpret_cast<void*>(base), dims.data(),
                                        strides.data(), box.data(), element_strides.data(), kInterleaveNone, kSwizzle128B,
                                        kL2Promotion256B, kOobFillZeros),
               what + ": encoding the tensor map of ref " + std::to_string(spec.ref));
  return out;
}

}  // namespace palladium::cuda
