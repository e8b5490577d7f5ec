// Devices, their contexts, and copies and waits queued on streams.
#include "backends/cuda/device_runtime.h"

#include <mutex>
#include <vector>

#include "palladium/error.h"

namespace palladium::cuda {
namespace {

struct Devices {
  std::mutex mu;
  std::vector<std::unique_ptr<DeviceInfo>> info;  // by ordinal, filled on first use
};
Devices& devices() {
  static Devices* d = new Devices;  // never destroyed: Arrays freed during exit still reach their device
  return *d;
}

}  // namespace

std::string unavailable_reason() {
  std::string why;
  driver(&why);
  return why;
}

int device_count() {
  const DriverApi* d = driver();
  int n = 0;
  if (d) d->cuDeviceGetCount(&n);
  return n;
}

const DeviceInfo& device(int ordinal) {
  Devices& ds = devices();
  std::lock_guard<std::mutex> lock(ds.mu);
  const DriverApi& d = require_driver();
  const int n = device_count();
  PL_CHECK(ordinal >= 0 && ordinal < n, "cuda:", ordinal, " does not exist (", n, " CUDA device", n == 1 ? "" : "s",
           " visible)");
  if (ds.info.size() < static_cast<size_t>(n)) ds.info.resize(static_cast<size_t>(n));
  std::unique_ptr<DeviceInfo>& slot = ds.info[static_cast<size_t>(ordinal)];
  if (!slot) {
    auto info = std::make_unique<DeviceInfo>();
    check_driver(d.cuDeviceGet(&info->device, ordinal), "cuDeviceGet");
    check_driver(d.cuDevicePrimaryCtxRetain(&info->context, info->device), "cuDevicePrimaryCtxRetain");
    char name[256] = {};
    d.cuDeviceGetName(name, sizeof(name), info->device);
    info->name = name;
    d.cuDeviceGetAttribute(&info->cc_major, kAttrComputeCapabilityMajor, info->device);
    d.cuDeviceGetAttribute(&info->cc_minor, kAttrComputeCapabilityMinor, info->device);
    d.cuDeviceGetAttribute(&info->multiprocessors, kAttrMultiprocessorCount, info->device);
    d.cuDeviceGetAttribute(&info->max_shared_optin, kAttrMaxSharedMemoryPerBlockOptin, info->device);
    d.cuDeviceGetAttribute(&info->max_grid_x, kAttrMaxGridDimX, info->device);
    d.cuDeviceGetAttribute(&info->max_grid_y, kAttrMaxGridDimY, info->device);
    slot = std::move(info);
  }
  check_driver(d.cuCtxSetCurrent(slot->context), "cuCtxSetCurrent");
  return *slot;
}

void make_current(int ordinal) { (void)device(ordinal); }

void copy_to_device(CUdeviceptr dst, const void* src, size_t bytes, StreamRef stream, const std::string& what) {
  if (!bytes) return;
  make_current(stream.device);
  check_driver(require_driver().cuMemcpyHtoDAsync(dst, src, bytes, stream.handle), what);
}

void copy_to_host(void* dst, CUdeviceptr src, size_t bytes, StreamRef stream, const std::string& what) {
  if (!bytes) return;
  make_current(stream.device);
  check_driver(require_driver().cuMemcpyDtoHAsync(dst, src, bytes, stream.handle), what);
}

void copy_on_device(CUdeviceptr dst, CUdeviceptr src, size_t bytes, StreamRef stream, const std::string& what) {
  if (!bytes) return;
  make_current(stream.device);
  check_driver(require_driver().cuMemcpyDtoDAsync(dst, src, bytes, stream.handle), what);
}

void copy_between_devices(CUdeviceptr dst, int dst_device, CUdeviceptr src, int src_device, size_t bytes,
                          StreamRef stream, const std::string& what) {
  if (!bytes) return;
  CUcontext dst_context = device(dst_device).context;
  CUcontext src_context = device(src_device).context;
  make_current(stream.device);
  check_driver(require_driver().cuMemcpyPeerAsync(dst, dst_context, src, src_context, bytes, stream.handle), what);
}

void synchronize(StreamRef stream, const std::string& what) {
  make_current(stream.device);
  check_driver(require_driver().cuStreamSynchronize(stream.handle), what);
}

bool query(StreamRef stream, const std::string& what) {
  make_current(stream.device);
  const CUresult r = require_driver().cuStreamQuery(stream.handle);
  if (r == kErrorNotReady) return false;
  check_driver(r, what);
  return true;
}

void synchronize(int ordinal, const std::string& what) {
  make_current(ordinal);
  check_driver(require_driver().cuCtxSynchronize(), what);
}

}  // namespace palladium::cuda
