// Launch recordings and the CUDA graphs built from them (see launch_graph.h).
#include "backends/cuda/launch_graph.h"

#include "palladium/error.h"

namespace palladium::cuda {
namespace {

thread_local LaunchRecording* open_recording = nullptr;

KernelNodeParams node_params(RecordedLaunch& l, std::vector<void*>& params) {
  KernelNodeParams p;
  p.func = l.function;
  p.grid_x = l.grid_x;
  p.grid_y = l.grid_y;
  p.block_x = l.threads;
  p.shared_bytes = l.shared_bytes;
  p.kernel_params = params.data();
  return p;
}

}  // namespace

RecordingScope::RecordingScope(LaunchRecording& r) : previous_(open_recording) { open_recording = &r; }
RecordingScope::~RecordingScope() { open_recording = previous_; }

bool recording() { return open_recording != nullptr; }

void record_launch(RecordedLaunch launch, StreamRef stream) {
  LaunchRecording* r = open_recording;
  if (!r) return;
  if (r->stream && !(*r->stream == stream)) r->unusable = "its launches go to more than one stream";
  r->stream = stream;
  r->launches.push_back(std::move(launch));
}

void mark_unusable(const std::string& why) {
  if (open_recording && open_recording->unusable.empty()) open_recording->unusable = why;
}

bool graphs_available() {
  const DriverApi* d = driver();
  return d && d->has_graphs;
}

LaunchGraph::LaunchGraph(const LaunchRecording& r) : launches_(r.launches), stream_(r.stream.value_or(StreamRef{})) {
  const DriverApi& d = require_driver();
  PL_ASSERT(d.has_graphs, "LaunchGraph without the driver's graph entry points");
  make_current(stream_.device);
  check_driver(d.cuGraphCreate(&graph_, 0), "CUDA graph of a jitted program: creating the graph");
  params_.resize(launches_.size());
  CUgraphNode previous = nullptr;
  for (size_t i = 0; i < launches_.size(); ++i) {
    for (uint64_t& a : launches_[i].args) params_[i].push_back(&a);
    for (TensorMapBytes& m : launches_[i].map_values) params_[i].push_back(&m);
    const KernelNodeParams p = node_params(launches_[i], params_[i]);
    CUgraphNode node = nullptr;
    check_driver(d.cuGraphAddKernelNode(&node, graph_, previous ? &previous : nullptr, previous ? 1 : 0, &p),
                 "CUDA graph of a jitted program: adding kernel " + std::to_string(i));
    nodes_.push_back(node);
    previous = node;
  }
  check_driver(d.cuGraphInstantiateWithFlags(&exec_, graph_, 0), "CUDA graph of a jitted program: instantiating it");
}

LaunchGraph::~LaunchGraph() {
  const DriverApi* d = driver();
  if (!d) return;
  if (exec_) d->cuGraphExecDestroy(exec_);
  if (graph_) d->cuGraphDestroy(graph_);
}

void LaunchGraph::replay(const std::vector<Patch>& patches) {
  const DriverApi& d = require_driver();
  make_current(stream_.device);
  std::vector<bool> changed(launches_.size(), false);
  for (const Patch& p : patches) {
    uint64_t& slot = launches_.at(p.launch).args.at(p.arg);
    if (slot != p.value) {
      slot = p.value;
      changed[p.launch] = true;
      RecordedLaunch& l = launches_[p.launch];
      for (size_t m = 0; m < l.tensor_maps.size(); ++m)
        if (static_cast<size_t>(l.tensor_maps[m].ref) == p.arg)
          l.map_values[m] = encode_tensor_map(l.tensor_maps[m], p.value, "CUDA graph of a jitted program, kernel " + std::to_string(p.launch));
    }
  }
  for (size_t i = 0; i < launches_.size(); ++i) {
    if (!changed[i]) continue;
    const KernelNodeParams p = node_params(launches_[i], params_[i]);
    check_driver(d.cuGraphExecKernelNodeSetParams(exec_, nodes_[i], &p),
                 "CUDA graph of a jitted program: updating kernel " + std::to_string(i));
  }
  check_driver(d.cuGraphLaunch(exec_, stream_.handle), "CUDA graph of a jitted program: launching it");
}

}  // namespace palladium::cuda
