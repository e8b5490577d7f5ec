// The public device API (palladium/device.h) over the CUDA runtime of the backend. Transfers are
// queued on the current stream of the device they touch (palladium/stream.h).
#include "palladium/device.h"

#include <cstring>
#include "palladium/sharding.h"

#include "backends/cuda/device_runtime.h"
#include "backends/cuda/stream.h"

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
  const Stream s = cuda::current_stream_for("empty(" + d.str() + ")", d.index);
  return cuda::device_array(shape, dtype, d.index, cuda::stream_ref(s));
}

Array to_host(const Array& a) {
  PL_CHECK(a.defined(), "to_host: the array is undefined (none)");
  if (a.is_sharded()) return detail::gather_pieces(a);
  if (a.device().kind == Device::cpu) return a;
  const std::string op = "to_host(" + a.device().str() + ")";
  const Stream s = cuda::current_stream_for(op, a.device().index);
  const cuda::StreamRef ref = cuda::stream_ref(s);
  Array out(a.shape(), a.dtype());
  // The array may have been written on other streams: the copy waits for them (on the device), so
  // the host always sees the result of the work queued before this call.
  // No record_use: the copy is done before this returns.
  cuda::wait_for_uses(cuda::device_ptr(a), ref, op);
  cuda::copy_to_host(out.data(), cuda::device_ptr(a), a.nbytes(), ref, op);
  cuda::synchronize(ref, op + ": waiting for " + s.str());
  return out;
}

void copy_into(const Array& src, const Array& dst) {
  PL_CHECK(src.defined() && dst.defined(), "copy_into: the ", src.defined() ? "destination" : "source",
           " is undefined (none)");
  PL_CHECK(!src.is_tracer() && !dst.is_tracer(),
           "copy_into: a traced Array has no buffer to copy (call copy_into outside jit, grad and vmap)");
  PL_CHECK(!src.is_sharded() && !dst.is_sharded(), "copy_into: sharded Arrays are not copied piecewise; gather the "
           "source with to_host first");
  PL_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "copy_into: the source is ",
           dtype_name(src.dtype()), " of shape ", shape_str(src.shape()), " but the destination is ",
           dtype_name(dst.dtype()), " of shape ", shape_str(dst.shape()));
  const Device from = src.device(), to = dst.device();
  if (src.nbytes() == 0) return;
  if (to.kind == Device::cpu) {
    const Array h = to_host(src);  // waits for the device copy
    std::memmove(const_cast<void*>(dst.data()), h.data(), h.nbytes());
    return;
  }
  if (from.kind == Device::cuda && from != to) return copy_into(to_device(src, to), dst);
  const std::string op = "copy_into(" + from.str() + " -> " + to.str() + ")";
  const Stream to_stream = cuda::current_stream_for(op, to.index);
  const cuda::StreamRef ref = cuda::stream_ref(to_stream);
  cuda::wait_for_uses(cuda::device_ptr(dst), ref, op);  // earlier readers of the destination
  cuda::record_use(cuda::device_ptr(dst), ref);
  if (from.kind == Device::cpu) {
    cuda::copy_to_device(cuda::device_ptr(dst), src.data(), src.nbytes(), ref, op);
    cuda::synchronize(ref, op + ": waiting for " + to_stream.str());  // pageable host memory
  } else {
    cuda::record_use(cuda::device_ptr(src), ref);
    cuda::copy_on_device(cuda::device_ptr(dst), cuda::device_ptr(src), src.nbytes(), ref, op);
  }
}

Array to_device(const Array& a, Device d) {
  PL_CHECK(a.defined(), "to_device: the array is undefined (none)");
  if (d.kind == Device::cpu) return to_host(a);
  const Device from = a.device();
  const std::string op = "to_device(" + from.str() + " -> " + d.str() + ")";
  const Stream to_stream = cuda::current_stream_for(op, d.index);
  const cuda::StreamRef to = cuda::stream_ref(to_stream);
  Array out = cuda::device_array(a.shape(), a.dtype(), d.index, to);
  if (from.kind == Device::cpu) {
    cuda::copy_to_device(cuda::device_ptr(out), a.data(), a.nbytes(), to, op);
    // Pageable host memory may be staged after the call returns; waiting also makes the array
    // ready for every stream, not only the one that copied it.
    cuda::synchronize(to, op + ": waiting for " + to_stream.str());
  } else if (from == d) {
    cuda::record_use(cuda::device_ptr(a), to);
    cuda::copy_on_device(cuda::device_ptr(out), cuda::device_ptr(a), a.nbytes(), to, op);
  } else {
    // Across devices: the copy runs on the source device's current stream, in order after the work
    // that made `a`, and the destination's current stream is ordered around it both ways: before
    // it (the destination block may be reused from earlier work there) and after it (later work on
    // the destination sees the copy).
    const cuda::StreamRef src = cuda::stream_ref(cuda::current_stream_for(op, from.index));
    cuda::order_after(src, to, op);
    cuda::record_use(cuda::device_ptr(a), src);
    cuda::copy_between_devices(cuda::device_ptr(out), d.index, cuda::device_ptr(a), from.index, a.nbytes(), src, op);
    cuda::order_after(to, src, op);
  }
  return out;
}

void synchronize(Device d) {
  if (d.kind == Device::cuda) cuda::synchronize(d.index, "synchronize(" + d.str() + ")");
}

}  // namespace palladium
