// What a Stream and an Event hold, and the lookups the CUDA backend and transfers use to find the
// stream to queue work on (palladium/stream.h is the public side).
#pragma once
#include <optional>
#include <string>

#include "backends/cuda/device_runtime.h"
#include "palladium/stream.h"

namespace palladium::detail {

struct StreamState {
  Device device;
  cuda::CUstream handle = nullptr;  // nullptr: the legacy default stream (always, for a cpu stream)
  bool owned = false;               // made by new_stream on a CUDA device: destroyed with the state
  bool external = false;            // another library's stream (external_stream): never destroyed here
  uint64_t serial = 0;              // 0 for default streams; else numbers new_stream's streams
  StreamState(Device d, cuda::CUstream h, bool own, uint64_t n) : device(d), handle(h), owned(own), serial(n) {}
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;
  ~StreamState();
};

struct EventState {
  Device device;
  cuda::CUevent handle = nullptr;  // from the device's event pool; nullptr for a cpu event
  std::string stream;              // the stream it was recorded on, for messages
  EventState(Device d, cuda::CUevent h, std::string s) : device(d), handle(h), stream(std::move(s)) {}
  EventState(const EventState&) = delete;
  EventState& operator=(const EventState&) = delete;
  ~EventState();
};

}  // namespace palladium::detail

namespace palladium::cuda {

// The runtime's view of a stream of a CUDA device.
StreamRef stream_ref(const Stream& s);
// current_stream(cuda:ordinal), with errors (CUDA unavailable, no such device) prefixed by `op`.
Stream current_stream_for(const std::string& op, int ordinal);
// The innermost StreamScope of this thread, if any.
std::optional<Stream> innermost_scope();
// Whether a StreamScope of this thread names a stream of `d`.
bool has_scope_for(Device d);

}  // namespace palladium::cuda
