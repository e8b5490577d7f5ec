// Streams and events: in-order queues of device work, as CUDA streams.
//
// Every pallas_call on device arrays and every transfer runs on the current stream of its device:
// the innermost StreamScope of this thread naming a stream of that device, else the device's legacy
// default stream. Work queued on one stream runs in order and asynchronously to the host; work on
// different streams may overlap, and is ordered only by events (or by synchronizing). On the host
// (Device{cpu}) streams are trivial: work runs synchronously, so the same code runs everywhere.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "palladium/array.h"

namespace palladium {

namespace detail {
struct StreamState;
struct EventState;
}  // namespace detail

class Event;

// A shared handle to a stream; copies name the same stream. A stream from new_stream is destroyed
// when its last handle goes (its queued work still completes).
class Stream {
 public:
  explicit Stream(std::shared_ptr<const detail::StreamState> state);  // use new_stream / default_stream

  Device device() const;
  bool is_default() const;  // the device's legacy default stream
  // Blocks until the work queued on this stream is done; a device fault raises an Error naming it.
  void synchronize() const;
  // Whether the work queued on this stream is done (never blocks).
  bool done() const;
  // Work queued on this stream from now on waits for the work `e` captured; the host does not block.
  // `e` may come from a stream of another CUDA device, but not from a cpu stream (and vice versa).
  void wait(const Event& e) const;
  std::string str() const;  // "cuda:0 stream 3", "cuda:0 default stream", "cpu default stream"

  bool operator==(const Stream& other) const { return state_ == other.state_; }
  const detail::StreamState& state() const { return *state_; }

 private:
  std::shared_ptr<const detail::StreamState> state_;
};

// A shared handle to a point in a stream's queue: the work queued before it was recorded.
class Event {
 public:
  explicit Event(std::shared_ptr<const detail::EventState> state);  // use record

  Device device() const;
  // Blocks until the captured work is done; a device fault raises an Error naming the event's stream.
  void synchronize() const;
  bool done() const;
  const detail::EventState& state() const { return *state_; }

 private:
  std::shared_ptr<const detail::EventState> state_;
};

// A new stream on `d`. On a CUDA device it runs independently of the legacy default stream
// (non-blocking); on the host it is a synchronous stream like the default one.
Stream new_stream(Device d);
// A stream that another library made and owns, as a CUstream / cudaStream_t handle (the stream XLA
// hands an FFI handler, torch.cuda.current_stream().cuda_stream): work in a StreamScope of it is
// queued there, in order with that library's work. Palladium never destroys it; the handle must
// stay valid while any Stream naming it lives. A null handle is the legacy default stream.
Stream external_stream(Device d, void* handle);
// The legacy default stream of `d` (the stream used when no StreamScope is active).
Stream default_stream(Device d);
// The stream work on `d` is queued on by this thread now.
Stream current_stream(Device d);
// Captures the work queued on `s` so far.
Event record(const Stream& s);

// Makes `s` the current stream of its device on this thread until the scope ends. Scopes nest; the
// innermost one wins, and its end restores the previous stream. A pallas_call whose arrays are on
// one CUDA device while the innermost scope names a stream of another, with no scope for theirs, is
// an Error: the call would not run on the stream the scope asks for.
class StreamScope {
 public:
  explicit StreamScope(const Stream& s);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  uint64_t token_;
};

}  // namespace palladium
