// CUDA devices as the backend sees them: one primary context per device, a caching allocator of
// plain device memory (cuMemAlloc; never managed memory), and host <-> device copies. Everything
// runs on the legacy default stream, so launches and copies are ordered.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "backends/cuda/driver_api.h"
#include "palladium/array.h"

namespace palladium::cuda {

struct DeviceInfo {
  int ordinal = 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  int max_shared_optin = 0;
  int max_grid_x = 0, max_grid_y = 0;
  std::string name;
};

// Why CUDA cannot run here ("" when it can).
std::string unavailable_reason();
int device_count();
// The device (context retained and made current on this thread). Throws Error if absent.
const DeviceInfo& device(int ordinal);
void make_current(int ordinal);

// Device memory from a per-device cache of freed blocks (freeing returns a block to the cache).
CUdeviceptr allocate(int ordinal, size_t bytes);
void release(CUdeviceptr p);
// Storage owning `bytes` of device memory on cuda:ordinal (for Arrays on the device).
std::shared_ptr<Storage> device_storage(int ordinal, size_t bytes);

void copy_to_device(CUdeviceptr dst, const void* src, size_t bytes);
void copy_to_host(void* dst, CUdeviceptr src, size_t bytes);
// Waits for all work on the device; throws Error("<what>: ...") on a device fault.
void synchronize(int ordinal, const std::string& what);

}  // namespace palladium::cuda
