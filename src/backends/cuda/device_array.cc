// The public device API (palladium/device.h) over the CUDA runtime of the backend.
#include "palladium/device.h"

#include <cstring>

#include "backends/cuda/device_runtime.h"

namespace palladium {

int cuda_device_count() { return cuda::unavailable_reason().empty() ? cuda::device_count() : 0; }

std::string cuda_unavailable_reason() { return cuda::unavailable_reason(); }

Device cuda_device(int index) {
  (void)cuda::device(index);  // checks that it exists
  return Device{Device::cuda, index};
}

std::string device_description(Device d) {
  if (d.kind == Device::cpu) return d.str();
  const cuda::DeviceInfo& i = cuda::device(d.index);
  return i.name + " (sm_" + std::to_string(i.cc_major * 10 + i.cc_minor) + ", " + std::to_string(i.multiprocessors) +
         " SMs)";
}

Array empty(Shape shape, DType dtype, Device d) {
  if (d.kind == Device::cpu) return Array(std::move(shape), dtype);
  const size_t bytes = static_cast<size_t>(numel(shape)) * static_cast<size_t>(itemsize(dtype));
  return Array(std::move(shape), dtype, cuda::device_storage(d.index, bytes));
}

Array to_host(const Array& a) {
  PL_CHECK(a.defined(), "to_host: the array is undefined (none)");
  if (a.device().kind == Device::cpu) return a;
  Array out(a.shape(), a.dtype());
  cuda::make_current(a.device().index);
  cuda::copy_to_host(out.data(), reinterpret_cast<cuda::CUdeviceptr>(a.data()), a.nbytes());
  return out;
}

Array to_device(const Array& a, Device d) {
  PL_CHECK(a.defined(), "to_device: the array is undefined (none)");
  if (d.kind == Device::cpu) return to_host(a);
  Array out = empty(a.shape(), a.dtype(), d);
  const auto dst = reinterpret_cast<cuda::CUdeviceptr>(out.data());
  if (a.device().kind == Device::cpu) {
    cuda::copy_to_device(dst, a.data(), a.nbytes());
  } else {
    // Device to device (possibly across devices): through the host keeps this simple.
    Array host = to_host(a);
    cuda::make_current(d.index);
    cuda::copy_to_device(dst, host.data(), host.nbytes());
  }
  return out;
}

void synchronize(Device d) {
  if (d.kind == Device::cuda) cuda::synchronize(d.index, "synchronize(" + d.str() + ")");
}

}  // namespace palladium
