// A jitted program on a CUDA device replays as CUDA graphs. The first run compiles (kernels are
// generated lazily) and runs step by step; the second runs step by step under launch recordings,
// keeping every intermediate alive; from then on each run replays them. The kernels between two
// collectives make one graph (one cuGraphLaunch); each collective runs between them as in a step
// by step run, on its engine's stream, and the graph after it waits for it only where that graph
// reads its result (so the collective still overlaps the kernels that do not). The graphs'
// intermediates stay at their recorded addresses (their workspace, kept by the Executable); the
// pointer arguments that name the program's inputs, the kernel results it returns (allocated
// afresh for every run, as the caller keeps them) and the collectives' results (made afresh by
// each run's collective) are rewritten at each replay. Programs with loops or calls, and calls that
// do more than one launch on device arrays (host inputs, aliased inputs, scratch, checked runs),
// keep running step by step; PALLADIUM_GRAPHS=0 makes every program run step by step.
#include <cstdlib>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "backends/cuda/launch_graph.h"
#include "backends/cuda/stream.h"
#include "palladium/stream.h"
#include "program/executor.h"
#include "program/executor_step.h"
#include "sharding/collectives.h"

namespace palladium::program {

struct Executable::GraphCache {
  std::mutex mu;
  int runs = 0;
  bool recorded = false;
  std::string why_not;  // set: this program runs step by step
  // Where a value is at a replay: an input, a constant, a kernel result made afresh (one the program
  // returns), a collective's result (made by this run's collective), or, for none of these, the
  // recorded intermediate of the variable `kept` (its address fixed).
  struct Source {
    int input = -1, constant = -1, fresh = -1, collective = -1, kept = -1;
  };
  std::vector<Source> outputs;
  std::vector<int> fresh_vars;       // kernel results that are (or are viewed as) program outputs
  std::vector<int> collective_vars;  // the collectives' results, in program order
  struct Slot {
    size_t launch, arg;
    Source source;  // input, fresh or collective
  };
  // The kernels up to a collective, then the collective (none after the last graph).
  struct Part {
    std::unique_ptr<cuda::LaunchGraph> graph;
    std::vector<Slot> slots;
    std::vector<int> reads;  // the collective results (indices into collective_vars) its kernels read
    const Step* collective = nullptr;
    std::vector<Source> operands;  // the collective's
  };
  std::vector<Part> parts;
  std::optional<cuda::StreamRef> stream;
  std::vector<Array> kept;        // by variable: the intermediates at their recorded addresses
  std::vector<int> input_pattern;  // per input: the first input at the same address when recorded
};

namespace {

std::vector<int> same_address_pattern(const std::vector<Array>& inputs) {
  std::vector<int> pattern(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    // Misaligned inputs count apart: a kernel loading tiles through the TMA copies them first,
    // which a graph recorded with aligned ones does not do.
    pattern[i] = (reinterpret_cast<uintptr_t>(inputs[i].data()) & 15) ? -1 - static_cast<int>(i) : static_cast<int>(i);
    for (size_t j = 0; j < i; ++j)
      if (inputs[j].data() == inputs[i].data()) {
        pattern[i] = static_cast<int>(j);
        break;
      }
  }
  return pattern;
}

bool graphs_disabled() {
  const char* v = std::getenv("PALLADIUM_GRAPHS");
  return v != nullptr && std::string(v) == "0";
}

}  // namespace

std::shared_ptr<Executable::GraphCache> Executable::make_graph_cache(const Executable& x) {
  auto g = std::make_shared<GraphCache>();
  if (!cuda::graphs_available()) g->why_not = "the CUDA driver has no graph entry points";
  if (graphs_disabled()) g->why_not = "PALLADIUM_GRAPHS=0";
  std::map<int, const Step*> producer;
  for (const auto& s : x.steps_) {
    if (s->kind != Step::Kind::kernel && s->kind != Step::Kind::view && s->kind != Step::Kind::user_call &&
        s->kind != Step::Kind::collective && g->why_not.empty())
      g->why_not = "it runs " + s->label + " from the host";
    for (int v : s->outs) producer[v] = s.get();
    if (s->kind == Step::Kind::collective)
      g->collective_vars.insert(g->collective_vars.end(), s->outs.begin(), s->outs.end());
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
    for (size_t c = 0; c < g->collective_vars.size() && src.collective < 0; ++c)
      if (g->collective_vars[c] == base) src.collective = static_cast<int>(c);
    if (src.input < 0 && src.constant < 0 && src.collective < 0) {
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
  if (!graph_->recorded) return "recorded as a CUDA graph on its second run";
  size_t kernels = 0, graphs = 0, collectives = 0;
  for (const GraphCache::Part& part : graph_->parts) {
    if (part.graph) kernels += part.graph->size(), ++graphs;
    if (part.collective) ++collectives;
  }
  std::string s = "replayed as a CUDA graph of " + std::to_string(kernels) + " kernels";
  if (collectives)
    s += " in " + std::to_string(graphs) + " parts around " + std::to_string(collectives) + " collectives";
  return s;
}

namespace {

// Records the second run: one launch recording per stretch of kernels between collectives.
struct PartRecordings {
  std::list<cuda::LaunchRecording> recordings{1};  // a list: the open scope points into it
  std::vector<const Executable::Step*> collectives;
  std::optional<cuda::RecordingScope> scope{std::in_place, recordings.back()};
};

}  // namespace

// Builds the parts from the recorded run, or says why they cannot replay it.
// `base`: per variable, the variable it views (itself where it is no view).
static std::string build_parts(Executable::GraphCache& g, PartRecordings& rec, const std::vector<Array>& inputs,
                               const std::vector<Array>& env, const std::vector<int>& base) {
  using Source = Executable::GraphCache::Source;
  size_t launches = 0;
  for (const cuda::LaunchRecording& r : rec.recordings) {
    if (!r.unusable.empty()) return r.unusable;
    launches += r.launches.size();
    if (r.stream && g.stream && !(*r.stream == *g.stream)) return "its launches go to more than one stream";
    if (r.stream) g.stream = r.stream;
  }
  if (launches == 0) return "it launches no kernel";
  std::map<cuda::CUdeviceptr, Source> named;  // the addresses a replay rewrites
  for (size_t i = 0; i < inputs.size(); ++i) named.emplace(cuda::device_ptr(inputs[i]), Source{.input = static_cast<int>(i)});
  auto name = [&](int var, Source src) {
    const Array& a = env[static_cast<size_t>(var)];
    return a.defined() && a.nbytes() > 0 && named.emplace(cuda::device_ptr(a), src).second;
  };
  for (size_t j = 0; j < g.fresh_vars.size(); ++j)
    if (!name(g.fresh_vars[j], Source{.fresh = static_cast<int>(j)})) return "an output shares memory with another";
  // A collective's result is found by its address, made afresh by each run's collective: no other
  // array of the run may start there (a collective may return a view of its operand).
  for (size_t c = 0; c < g.collective_vars.size(); ++c) {
    const int var = g.collective_vars[c];
    bool alone = name(var, Source{.collective = static_cast<int>(c)});
    for (size_t v = 0; v < env.size() && alone; ++v)
      alone = !env[v].defined() || env[v].nbytes() == 0 || base[v] == var ||
              cuda::device_ptr(env[v]) != cuda::device_ptr(env[static_cast<size_t>(var)]);
    if (!alone) return "a collective's result shares memory with another array";
  }
  auto source_of = [&](int var) {
    const Array& a = env[static_cast<size_t>(var)];
    if (auto it = named.find(cuda::device_ptr(a)); a.nbytes() > 0 && it != named.end()) return it->second;
    return Source{.kept = var};
  };
  auto slice = rec.recordings.begin();
  for (size_t k = 0; k <= rec.collectives.size(); ++k, ++slice) {
    Executable::GraphCache::Part part;
    if (!slice->launches.empty()) {
      std::set<int> reads;
      for (size_t l = 0; l < slice->launches.size(); ++l)
        for (size_t a = 0; a < slice->launches[l].pointer_args; ++a)
          if (auto it = named.find(slice->launches[l].args[a]); it != named.end()) {
            part.slots.push_back({l, a, it->second});
            if (it->second.collective >= 0) reads.insert(it->second.collective);
          }
      part.reads.assign(reads.begin(), reads.end());
      part.graph = std::make_unique<cuda::LaunchGraph>(*slice);
    }
    if (k < rec.collectives.size()) {
      part.collective = rec.collectives[k];
      for (int v : part.collective->ins) part.operands.push_back(source_of(v));
    }
    g.parts.push_back(std::move(part));
  }
  g.kept.assign(env.size(), Array());
  for (size_t v = 0; v < env.size(); ++v)
    if (env[v].defined() && (env[v].nbytes() == 0 || !named.count(cuda::device_ptr(env[v])))) g.kept[v] = env[v];
  g.input_pattern = same_address_pattern(inputs);
  return "";
}

std::optional<std::vector<Array>> Executable::run_graphed(const std::vector<Array>& inputs) const {
  using Source = GraphCache::Source;
  GraphCache& g = *graph_;
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.why_not.empty()) return std::nullopt;
  for (const Array& a : inputs)
    if (a.device() != device_ || a.nbytes() == 0) return std::nullopt;
  if (!g.recorded) {
    if (++g.runs < 2) return std::nullopt;  // the first run compiles the kernels
    PartRecordings rec;
    const StepHook around_collective = [&rec](const Step& s, bool before) {
      if (before) {
        rec.scope.reset();
        rec.collectives.push_back(&s);
      } else {
        rec.scope.emplace(rec.recordings.emplace_back());
      }
    };
    std::vector<Array> env;
    std::vector<Array> result = run_steps(inputs, &env, &around_collective);
    rec.scope.reset();
    std::vector<int> base(env.size());
    for (size_t v = 0; v < base.size(); ++v) base[v] = static_cast<int>(v);
    for (const auto& s : steps_)
      if (s->kind == Step::Kind::view) base[static_cast<size_t>(s->outs[0])] = base[static_cast<size_t>(s->ins[0])];
    g.why_not = build_parts(g, rec, inputs, env, base);
    if (g.why_not.empty()) g.recorded = true;
    else g.parts.clear();
    return result;
  }
  const cuda::StreamRef stream = cuda::stream_ref(current_stream(device_));
  if (!(stream == *g.stream) || same_address_pattern(inputs) != g.input_pattern) return std::nullopt;
  std::vector<Array> fresh;
  for (int v : g.fresh_vars) fresh.push_back(cuda::device_array(program_.type(v).shape, program_.type(v).dtype, device_.index, stream));
  std::vector<Array> collective(g.collective_vars.size());
  // The collectives whose results the stream has not been ordered after yet (see run_steps).
  std::vector<std::shared_ptr<std::function<void()>>> unjoined(g.collective_vars.size());
  auto join = [&](int c) {
    if (const std::shared_ptr<std::function<void()>> order = std::exchange(unjoined[static_cast<size_t>(c)], nullptr))
      if (*order) std::exchange(*order, nullptr)();
  };
  auto value = [&](const Source& s) -> Array {
    if (s.input >= 0) return inputs[static_cast<size_t>(s.input)];
    if (s.constant >= 0) return program_.consts[static_cast<size_t>(s.constant)];
    if (s.fresh >= 0) return fresh[static_cast<size_t>(s.fresh)];
    if (s.collective >= 0) return collective[static_cast<size_t>(s.collective)];
    return g.kept[static_cast<size_t>(s.kept)];
  };
  for (const GraphCache::Part& part : g.parts) {
    if (part.graph) {
      for (int c : part.reads) join(c);
      std::vector<cuda::LaunchGraph::Patch> patches;
      for (const GraphCache::Slot& s : part.slots) patches.push_back({s.launch, s.arg, cuda::device_ptr(value(s.source))});
      part.graph->replay(patches);
    }
    if (!part.collective) continue;
    std::vector<Array> operands;
    for (size_t i = 0; i < part.operands.size(); ++i) {
      if (part.operands[i].collective >= 0) join(part.operands[i].collective);
      const Type& t = program_.type(part.collective->ins[i]);
      Array a = value(part.operands[i]);
      operands.push_back(a.shape() == t.shape ? a : a.reshape(t.shape));
    }
    std::function<void()> order;
    std::vector<Array> outs = sharding::run_collective(*part.collective->eqn, operands, &order);
    auto shared = std::make_shared<std::function<void()>>(std::move(order));
    for (size_t o = 0; o < outs.size(); ++o)
      for (size_t c = 0; c < g.collective_vars.size(); ++c)
        if (g.collective_vars[c] == part.collective->outs[o]) {
          collective[c] = std::move(outs[o]);
          unjoined[c] = shared;
        }
  }
  for (size_t c = 0; c < collective.size(); ++c) join(static_cast<int>(c));
  for (const Array& a : inputs) cuda::record_use(cuda::device_ptr(a), stream);
  for (const Array& a : fresh) cuda::record_use(cuda::device_ptr(a), stream);
  for (const Array& a : collective)
    if (a.defined() && a.nbytes() > 0) cuda::record_use(cuda::device_ptr(a), stream);
  std::vector<Array> outs;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    Array a = value(g.outputs[k]);
    const Shape& shape = program_.type(program_.outputs[k]).shape;
    outs.push_back(a.shape() == shape ? a : a.reshape(shape));
  }
  return outs;
}

}  // namespace palladium::program
