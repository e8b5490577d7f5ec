// CUDA devices as the backend sees them: one primary context per device, a stream-aware caching
// allocator of plain device memory (cuMemAlloc; never managed memory), pooled events, and copies
// queued on streams. Work on one stream runs in order; work on different streams may overlap.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "backends/cuda/driver_api.h"
#include "palladium/array.h"

namespace palladium::cuda {

struct DeviceInfo {
  CUdevice device = 0;
  CUcontext context = nullptr;
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  int max_shared_optin = 0;
  int max_grid_x = 0, max_grid_y = 0;
  std::string name;
};

// A stream as the runtime sees it. handle nullptr is the device's legacy default stream, which the
// driver resolves through the current context: every call given a StreamRef makes its device current.
struct StreamRef {
  int device = 0;
  CUstream handle = nullptr;
  bool operator==(const StreamRef&) const = default;
};

// Why CUDA cannot run here ("" when it can).
std::string unavailable_reason();
int device_count();
// The device (context retained and made current on this thread). Throws Error if absent.
const DeviceInfo& device(int ordinal);
void make_current(int ordinal);

// ---- memory (stream_allocator.cc) ----
// Device memory for work queued on `stream` (a stream of cuda:ordinal). Freed blocks are cached: a
// block goes back to work on the stream that alone used it at once (stream order makes that safe);
// any other stream first waits, on the device, for the queued work of every stream that used it.
CUdeviceptr allocate(int ordinal, size_t bytes, StreamRef stream);
// Memory for work on the device's legacy default stream.
CUdeviceptr allocate(int ordinal, size_t bytes);
// Returns a block to the cache (never throws; a block that cannot be ordered safely is dropped).
void release(CUdeviceptr p);
// Notes that work queued on `stream` uses block p (PyTorch's record_stream): it will not be reused
// before that work is done. Every launch and copy calls this for the arrays it touches.
void record_use(CUdeviceptr p, StreamRef stream);
// Makes `stream` wait, on the device, for the work queued so far on every other stream that used p.
void wait_for_uses(CUdeviceptr p, StreamRef stream, const std::string& what);
// Before a stream is destroyed: its queued work on cached and live blocks is captured in events, so
// no block refers to the dead handle.
void forget_stream(StreamRef stream) noexcept;
// Storage owning `bytes` of device memory on cuda:ordinal, allocated for `stream`.
std::shared_ptr<Storage> device_storage(int ordinal, size_t bytes, StreamRef stream);
// An uninitialised array on cuda:ordinal, its memory ordered for `stream`.
Array device_array(const Shape& shape, DType dtype, int ordinal, StreamRef stream);
// The device memory of an array on a CUDA device.
inline CUdeviceptr device_ptr(const Array& a) { return reinterpret_cast<CUdeviceptr>(a.data()); }

// ---- events (stream_allocator.cc), created with timing disabled and pooled per device ----
CUevent acquire_event(int ordinal);
void recycle_event(int ordinal, CUevent e) noexcept;
// A pooled event recorded on `stream` (recycle it when done; waits already queued on it are unaffected
// by its later reuse).
CUevent record_event(StreamRef stream, const std::string& what);
// Work queued on `stream` after this waits for the work `e` captured; the host does not block.
void wait_event(StreamRef stream, CUevent e, const std::string& what);
// Work queued on `waiter` from now on runs after the work queued so far on `producer`.
void order_after(StreamRef waiter, StreamRef producer, const std::string& what);

// ---- copies, queued on `stream`; errors read "<what>: <driver error>" ----
// From pageable host memory: the source may be staged before the copy runs; keep it alive until
// the stream is synchronized.
void copy_to_device(CUdeviceptr dst, const void* src, size_t bytes, StreamRef stream, const std::string& what);
// To pageable host memory the driver returns only once the copy is done; synchronize the stream anyway.
void copy_to_host(void* dst, CUdeviceptr src, size_t bytes, StreamRef stream, const std::string& what);
void copy_on_device(CUdeviceptr dst, CUdeviceptr src, size_t bytes, StreamRef stream, const std::string& what);
// Between the memory of two devices (cuMemcpyPeerAsync; the driver routes it, peer access or not).
void copy_between_devices(CUdeviceptr dst, int dst_device, CUdeviceptr src, int src_device, size_t bytes,
                          StreamRef stream, const std::string& what);

// Waits for the work queued on `stream`; throws Error("<what>: ...") on a device fault.
void synchronize(StreamRef stream, const std::string& what);
// Whether the work queued on `stream` is done (cuStreamQuery); throws on a device fault.
bool query(StreamRef stream, const std::string& what);
// Waits for all work on the device, every stream; throws Error("<what>: ...") on a device fault.
void synchronize(int ordinal, const std::string& what);

}  // namespace palladium::cuda
