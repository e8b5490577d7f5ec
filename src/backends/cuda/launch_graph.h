// CUDA graphs for jitted programs. While a LaunchRecording is open on a thread, the CUDA backend
// reports every kernel launch it makes (the run itself is a normal run); a call that does anything
// besides one launch on device arrays (uploads host inputs, copies an aliased input, clears scratch,
// reads back check or print records) marks the recording unusable. A usable recording becomes a
// LaunchGraph: one kernel node after another, replayed with one cuGraphLaunch, its pointer arguments
// for the program's inputs and outputs rewritten at each replay.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/device_runtime.h"
#include "backends/cuda/tensor_map.h"

namespace palladium::cuda {

struct RecordedLaunch {
  CUfunction function = nullptr;
  unsigned grid_x = 1, grid_y = 1, threads = 1, shared_bytes = 0;
  std::vector<uint64_t> args;  // every kernel argument in an 8-byte slot, in order
  size_t pointer_args = 0;     // the first ones are the refs' device pointers
  // The TMA's tensor maps, parameters after `args`: re-encoded when their ref's pointer changes.
  std::vector<TensorMapSpec> tensor_maps;
  std::vector<TensorMapBytes> map_values;
};

struct LaunchRecording {
  std::vector<RecordedLaunch> launches;
  std::optional<StreamRef> stream;
  std::string unusable;  // why these launches cannot replay as a graph ("" while they can)
};

// Opens `r` on this thread for the scope's lifetime.
class RecordingScope {
 public:
  explicit RecordingScope(LaunchRecording& r);
  ~RecordingScope();
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  LaunchRecording* previous_;
};

// The backend's reports (no-ops without an open recording).
bool recording();
void record_launch(RecordedLaunch launch, StreamRef stream);
void mark_unusable(const std::string& why);

// Whether the driver has the graph entry points.
bool graphs_available();

class LaunchGraph {
 public:
  struct Patch {
    size_t launch = 0, arg = 0;
    CUdeviceptr value = 0;
  };
  explicit LaunchGraph(const LaunchRecording& r);  // throws Error on a driver failure
  ~LaunchGraph();
  LaunchGraph(const LaunchGraph&) = delete;
  LaunchGraph& operator=(const LaunchGraph&) = delete;
  // Writes each patch into its launch's argument, updates the nodes whose arguments changed since
  // the last replay, and launches the graph on the recording's stream.
  void replay(const std::vector<Patch>& patches);
  StreamRef stream() const { return stream_; }
  size_t size() const { return launches_.size(); }

 private:
  std::vector<RecordedLaunch> launches_;
  std::vector<std::vector<void*>> params_;  // per launch: pointers to its argument slots
  std::vector<CUgraphNode> nodes_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  StreamRef stream_;
};

}  // namespace palladium::cuda
