// A jitted program on a CUDA device replays as one CUDA graph. The first run compiles (kernels are
// generated lazily) and runs step by step; the second runs step by step under a launch recording,
// keeping every intermediate alive; from then on each run is one cuGraphLaunch. The graph's
// intermediates stay at their recorded addresses (its workspace, kept by the Executable); the
// pointer arguments that name the program's inputs, and the kernel results it returns (allocated
// afresh for every run, as the caller keeps them), are rewritten at each replay. Programs with
// loops, calls or collectives, and calls that do more than one launch on device arrays (host
// inputs, aliased inputs, scratch, checked runs), keep running step by step.
#include <map>
#include <mutex>

#include "backends/cuda/launch_graph.h"
#include "backends/cuda/stream.h"
#include "palladium/stream.h"
#include "program/executor.h"
#include "program/executor_step.h"

namespace palladium::program {

struct Executable::GraphCache {
  std::mutex mu;
  int runs = 0;
  std::string why_not;  // set: this program runs step by step
  std::unique_ptr<cuda::LaunchGraph> graph;
  std::vector<Array> retained;  // the intermediates at their recorded addresses
  // Where each program output comes from: an input, a constant, or a kernel result made afresh.
  struct Source {
    int input = -1, constant = -1, fresh = -1;
  };
  std::vector<Source> outputs;
  std::vector<int> fresh_vars;  // kernel results that are (or are viewed as) program outputs
  struct Slot {
    size_t launch, arg;
    int input = -1, fresh = -1;
  };
  std::vector<Slot> slots;
  std::vector<int> input_pattern;  // per input: the first input at the same address when recorded
};

namespace {

std::vector<int> same_address_pattern(const std::vector<Array>& inputs) {
  std::vector<int> pattern(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    pattern[i] = static_cast<int>(i);
    for (size_t j = 0; j < i; ++j)
      if (inputs[j].data() == inputs[i].data()) {
        pattern[i] = static_cast<int>(j);
        break;
      }
  }
  return pattern;
}

}  // namespace

std::shared_ptr<Executable::GraphCache> Executable::make_graph_cache(const Executable& x) {
  auto g = std::make_shared<GraphCache>();
  if (!cuda::graphs_available()) g->why_not = "the CUDA driver has no graph entry points";
  std::map<int, const Step*> producer;
  for (const auto& s : x.steps_) {
    if (s->kind != Step::Kind::kernel && s->kind != Step::Kind::view && s->kind != Step::Kind::user_call &&
        g->why_not.empty())
      g->why_not = "it runs " + s->label + " from the host";
    for (int v : s->outs) producer[v] = s.get();
  }
  const Program& p = x.program_;
  for (int v : p.outputs) {
    int base = v;
    while (producer.count(base) && producer[base]->kind == Step::Kind::view) base = producer[base]->ins[0];
    GraphCache::Source src;
    for (size_t i = 0; i < p.inputs.size() && src.input < 0; ++i)
      if (p.inputs[i] == base) src.input = static_cast<int>(i);
    for (size_t i = 0; i < p.const_vars.size() && src.constant < 0; ++i)
      if (p.const_vars[i] == base) src.constant = static_cast<int>(i);
    if (src.input < 0 && src.constant < 0) {
      for (size_t j = 0; j < g->fresh_vars.size() && src.fresh < 0; ++j)
        if (g->fresh_vars[j] == base) src.fresh = static_cast<int>(j);
      if (src.fresh < 0) {
        src.fresh = static_cast<int>(g->fresh_vars.size());
        g->fresh_vars.push_back(base);
      }
    }
    g->outputs.push_back(src);
  }
  return g;
}

std::string Executable::graph_status() const {
  if (!graph_) return "";
  std::lock_guard<std::mutex> lock(graph_->mu);
  if (!graph_->why_not.empty()) return "launched kernel by kernel: " + graph_->why_not;
  if (graph_->graph) return "replayed as a CUDA graph of " + std::to_string(graph_->graph->size()) + " kernels";
  return "recorded as a CUDA graph on its second run";
}

std::optional<std::vector<Array>> Executable::run_graphed(const std::vector<Array>& inputs) const {
  GraphCache& g = *graph_;
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.why_not.empty()) return std::nullopt;
  for (const Array& a : inputs)
    if (a.device() != device_ || a.nbytes() == 0) return std::nullopt;
  if (!g.graph) {
    if (++g.runs < 2) return std::nullopt;  // the first run compiles the kernels
    cuda::LaunchRecording rec;
    std::vector<Array> env, result;
    {
      cuda::RecordingScope scope(rec);
      result = run_steps(inputs, &env);
    }
    if (rec.unusable.empty() && rec.launches.empty()) rec.unusable = "it launches no kernel";
    std::map<cuda::CUdeviceptr, std::pair<int, int>> named;  // address -> (input, fresh)
    for (size_t i = 0; i < inputs.size(); ++i) named.emplace(cuda::device_ptr(inputs[i]), std::make_pair(static_cast<int>(i), -1));
    for (size_t j = 0; j < g.fresh_vars.size() && rec.unusable.empty(); ++j) {
      const Array& a = env[static_cast<size_t>(g.fresh_vars[j])];
      if (!a.defined() || a.nbytes() == 0 || !named.emplace(cuda::device_ptr(a), std::make_pair(-1, static_cast<int>(j))).second)
        rec.unusable = "an output shares memory with another";
    }
    if (!rec.unusable.empty()) {
      g.why_not = rec.unusable;
      return result;
    }
    for (size_t l = 0; l < rec.launches.size(); ++l)
      for (size_t a = 0; a < rec.launches[l].pointer_args; ++a)
        if (auto it = named.find(rec.launches[l].args[a]); it != named.end())
          g.slots.push_back({l, a, it->second.first, it->second.second});
    for (const Array& a : env)
      if (a.defined() && a.device() == device_ && !named.count(cuda::device_ptr(a))) g.retained.push_back(a);
    g.input_pattern = same_address_pattern(inputs);
    g.graph = std::make_unique<cuda::LaunchGraph>(rec);
    return result;
  }
  const cuda::StreamRef stream = cuda::stream_ref(current_stream(device_));
  if (!(stream == g.graph->stream()) || same_address_pattern(inputs) != g.input_pattern) return std::nullopt;
  std::vector<Array> fresh;
  for (int v : g.fresh_vars) fresh.push_back(cuda::device_array(program_.type(v).shape, program_.type(v).dtype, device_.index, stream));
  std::vector<cuda::LaunchGraph::Patch> patches;
  for (const GraphCache::Slot& s : g.slots)
    patches.push_back({s.launch, s.arg, cuda::device_ptr(s.input >= 0 ? inputs[static_cast<size_t>(s.input)] : fresh[static_cast<size_t>(s.fresh)])});
  g.graph->replay(patches);
  for (const Array& a : inputs) cuda::record_use(cuda::device_ptr(a), stream);
  for (const Array& a : fresh) cuda::record_use(cuda::device_ptr(a), stream);
  std::vector<Array> outs;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const GraphCache::Source& src = g.outputs[k];
    Array a = src.input >= 0 ? inputs[static_cast<size_t>(src.input)]
              : src.constant >= 0 ? program_.consts[static_cast<size_t>(src.constant)]
                                  : fresh[static_cast<size_t>(src.fresh)];
    const Shape& shape = program_.type(program_.outputs[k]).shape;
    outs.push_back(a.shape() == shape ? a : a.reshape(shape));
  }
  return outs;
}

}  // namespace palladium::program
