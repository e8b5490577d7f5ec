// DLPack exchange (palladium/dlpack.h): an exported tensor holds a reference to the Array's
// storage until its deleter runs; an imported one becomes a Storage that frees nothing itself and
// calls the producer's deleter when the last Array using it goes.
#include "palladium/dlpack.h"

#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>

#include <string>
#include <vector>

#include "palladium/device.h"

namespace palladium {

namespace {

constexpr uint8_t kBoolCode = 6;  // DLPack 0.8's kDLBool (the Debian header is 0.6)

DLDataType to_dl(DType t) {
  const uint8_t bits = static_cast<uint8_t>(itemsize(t) * 8);
  switch (t) {
    case DType::bool_: return {kBoolCode, 8, 1};
    case DType::int8: case DType::int16: case DType::int32: case DType::int64: return {kDLInt, bits, 1};
    case DType::uint8: case DType::uint32: return {kDLUInt, bits, 1};
    case DType::float16: case DType::float32: case DType::float64: return {kDLFloat, bits, 1};
    case DType::bfloat16: return {kDLBfloat, 16, 1};
  }
  throw InternalError("to_dlpack: unknown dtype");
}

std::string dl_str(DLDataType t) {
  return "(code " + std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits, " + std::to_string(t.lanes) +
         " lanes)";
}

DType from_dl(DLDataType t) {
  PL_CHECK(t.lanes == 1, "from_dlpack: vector dtypes are not supported, got ", dl_str(t));
  switch (t.code) {
    case kDLInt:
      if (t.bits == 8) return DType::int8;
      if (t.bits == 16) return DType::int16;
      if (t.bits == 32) return DType::int32;
      if (t.bits == 64) return DType::int64;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::uint8;
      if (t.bits == 32) return DType::uint32;
      break;
    case kDLFloat:
      if (t.bits == 16) return DType::float16;
      if (t.bits == 32) return DType::float32;
      if (t.bits == 64) return DType::float64;
      break;
    case kDLBfloat:
      if (t.bits == 16) return DType::bfloat16;
      break;
    case kBoolCode:
      if (t.bits == 8) return DType::bool_;
      break;
    default:
      break;
  }
  throw Error("from_dlpack: dtype " + dl_str(t) + " has no Palladium dtype");
}

struct Exported {
  Array array;  // keeps the storage alive
  std::vector<int64_t> shape;
  DLManagedTensor tensor{};
};

}  // namespace

DLManagedTensor* to_dlpack(const Array& a) {
  PL_CHECK(a.defined(), "to_dlpack: the array is undefined (none)");
  PL_CHECK(!a.is_tracer(), "to_dlpack: a traced Array has no data (call it outside jit/grad/vmap)");
  PL_CHECK(!a.is_sharded(), "to_dlpack: the array is sharded; gather it with to_host first");
  auto* e = new Exported;
  e->array = a;
  e->shape.assign(a.shape().begin(), a.shape().end());
  DLTensor& t = e->tensor.dl_tensor;
  const Device d = a.device();
  t.data = a.storage()->ptr;
  t.device = DLDevice{d.kind == Device::cpu ? kDLCPU : kDLCUDA, d.kind == Device::cpu ? 0 : d.index};
  t.ndim = static_cast<int32_t>(a.ndim());
  t.dtype = to_dl(a.dtype());
  t.shape = e->shape.data();
  t.strides = nullptr;  // compact row-major
  t.byte_offset = 0;
  e->tensor.manager_ctx = e;
  e->tensor.deleter = [](DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); };
  return &e->tensor;
}

Array from_dlpack(DLManagedTensor* m) {
  PL_CHECK(m != nullptr, "from_dlpack: null tensor");
  const DLTensor& t = m->dl_tensor;
  PL_CHECK(t.ndim >= 0, "from_dlpack: negative rank ", t.ndim);
  Shape shape(t.shape, t.shape + t.ndim);
  for (int64_t s : shape) PL_CHECK(s >= 0, "from_dlpack: negative dimension in shape ", shape_str(shape));
  const DType dtype = from_dl(t.dtype);
  if (t.strides != nullptr) {
    int64_t expect = 1;
    for (int32_t d = t.ndim; d-- > 0;) {
      PL_CHECK(shape[static_cast<size_t>(d)] == 1 || t.strides[d] == expect, "from_dlpack: a tensor of shape ",
               shape_str(shape), " with strides (", [&] {
                 std::string s;
                 for (int32_t k = 0; k < t.ndim; ++k) s += (k ? ", " : "") + std::to_string(t.strides[k]);
                 return s;
               }(), ") is not compact row-major; make it contiguous first");
      expect *= shape[static_cast<size_t>(d)];
    }
  }
  Device device;
  if (t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost) device = Device{Device::cpu, 0};
  else if (t.device.device_type == kDLCUDA) device = Device{Device::cuda, t.device.device_id};
  else throw Error("from_dlpack: device type " + std::to_string(t.device.device_type) + " is not the host or CUDA");
  auto* storage = new Storage;
  storage->ptr = static_cast<char*>(t.data) + t.byte_offset;
  storage->nbytes = static_cast<size_t>(numel(shape)) * itemsize(dtype);
  storage->device = device;
  storage->free_fn = nullptr;  // the producer frees: its deleter runs when the storage goes
  std::shared_ptr<Storage> owner(storage, [m](Storage* s) {
    delete s;
    if (m->deleter) m->deleter(m);
  });
  return Array(std::move(shape), dtype, std::move(owner));
}

}  // namespace palladium

#else  // without dlpack/dlpack.h (install libdlpack-dev): the functions say so.

namespace palladium {
DLManagedTensor* to_dlpack(const Array&) {
  throw Error("to_dlpack: Palladium was built without dlpack/dlpack.h (install libdlpack-dev and rebuild)");
}
Array from_dlpack(DLManagedTensor*) {
  throw Error("from_dlpack: Palladium was built without dlpack/dlpack.h (install libdlpack-dev and rebuild)");
}
}  // namespace palladium

#endif
