#include "backends/cuda/device_runtime.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "palladium/error.h"

namespace palladium::cuda {
namespace {

struct Devices {
  std::mutex mu;
  std::vector<std::unique_ptr<DeviceInfo>> info;  // by ordinal, filled on first use
};
Devices& devices() {
  static Devices d;
  return d;
}

const DriverApi& api() {
  std::string why;
  const DriverApi* d = driver(&why);
  if (!d) throw Error("CUDA is unavailable: " + why);
  return *d;
}

// Freed blocks are kept per (device, size) and reused: cuMemAlloc/cuMemFree synchronise the
// device and cost tens of microseconds, too much for every pallas_call.
struct Allocator {
  std::mutex mu;
  std::unordered_map<CUdeviceptr, std::pair<int, size_t>> live;   // ptr -> (device, bytes)
  std::map<std::pair<int, size_t>, std::vector<CUdeviceptr>> free_blocks;
  size_t cached_bytes = 0;
};
Allocator& allocator() {
  static Allocator* a = new Allocator;  // never destroyed: Arrays may be freed during exit
  return *a;
}

size_t rounded(size_t bytes) {
  const size_t granule = bytes < (1u << 20) ? 512 : (2u << 20);
  return (std::max<size_t>(bytes, 1) + granule - 1) / granule * granule;
}

void free_cached(int ordinal) {
  Allocator& a = allocator();
  for (auto& [key, blocks] : a.free_blocks) {
    if (key.first != ordinal) continue;
    for (CUdeviceptr p : blocks) api().cuMemFree(p);
    a.cached_bytes -= key.second * blocks.size();
    blocks.clear();
  }
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
  const DriverApi& d = api();
  const int n = device_count();
  PL_CHECK(ordinal >= 0 && ordinal < n, "cuda:", ordinal, " does not exist (", n, " CUDA device", n == 1 ? "" : "s",
           " visible)");
  if (ds.info.size() < static_cast<size_t>(n)) ds.info.resize(static_cast<size_t>(n));
  std::unique_ptr<DeviceInfo>& slot = ds.info[static_cast<size_t>(ordinal)];
  if (!slot) {
    auto info = std::make_unique<DeviceInfo>();
    info->ordinal = ordinal;
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

CUdeviceptr allocate(int ordinal, size_t bytes) {
  const size_t size = rounded(bytes);
  Allocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  auto& blocks = a.free_blocks[{ordinal, size}];
  CUdeviceptr p = 0;
  if (!blocks.empty()) {
    p = blocks.back();
    blocks.pop_back();
    a.cached_bytes -= size;
  } else {
    make_current(ordinal);
    CUresult r = api().cuMemAlloc(&p, size);
    if (r != 0) {  // give the cache back to the driver and try once more
      free_cached(ordinal);
      r = api().cuMemAlloc(&p, size);
    }
    if (r != 0)
      throw Error("cuda:" + std::to_string(ordinal) + ": cannot allocate " + std::to_string(bytes) +
                  " bytes of device memory: " + driver_error_text(r));
  }
  a.live[p] = {ordinal, size};
  return p;
}

void release(CUdeviceptr p) {
  if (!p) return;
  Allocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = a.live.find(p);
  if (it == a.live.end()) return;
  a.free_blocks[it->second].push_back(p);
  a.cached_bytes += it->second.second;
  a.live.erase(it);
}

std::shared_ptr<Storage> device_storage(int ordinal, size_t bytes) {
  auto s = std::make_shared<Storage>();
  s->ptr = reinterpret_cast<void*>(allocate(ordinal, bytes));
  s->nbytes = bytes;
  s->device = Device{Device::cuda, ordinal};
  s->free_fn = [](void* p) { release(reinterpret_cast<CUdeviceptr>(p)); };
  return s;
}

void copy_to_device(CUdeviceptr dst, const void* src, size_t bytes) {
  if (bytes) check_driver(api().cuMemcpyHtoD(dst, src, bytes), "copy to the device");
}

void copy_to_host(void* dst, CUdeviceptr src, size_t bytes) {
  if (bytes) check_driver(api().cuMemcpyDtoH(dst, src, bytes), "copy to the host");
}

void synchronize(int ordinal, const std::string& what) {
  make_current(ordinal);
  check_driver(api().cuCtxSynchronize(), what);
}

}  // namespace palladium::cuda
