// autotune: a choice among pallas_calls of one function, made by timing them on the first inputs of
// each signature and device (include/palladium/call.h). The winner is kept in the call (for this
// process) and in the disk cache under autotune/, keyed by the candidates' labels, the input types
// and the device's description, so a later process on the same kind of device does not time again.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include "backends/common/disk_cache.h"
#include "backends/cuda/launch_graph.h"
#include "core/grid_mapping.h"
#include "palladium/device.h"
#include "palladium/error.h"
#include "palladium/stream.h"

namespace palladium::detail {

struct CallImpl::Tuning {
  std::mutex mu;
  std::map<std::string, size_t> chosen;  // signature and device -> candidate
};

namespace {

bool tuning_off() {
  const char* v = std::getenv("PALLADIUM_AUTOTUNE");
  return v != nullptr && std::string(v) == "0";
}

std::string type_str(const ShapeDtype& t) { return std::string(dtype_short_name(t.dtype)) + shape_str(t.shape); }

// Where the call runs: its inputs' device (a GPU's when any input is on one).
Device device_of(const std::vector<Array>& inputs) {
  for (const Array& a : inputs)
    if (a.defined() && !a.is_sharded() && a.device().kind != Device::cpu) return a.device();
  return Device{Device::cpu, 0};
}

void wait_for(Device d) {
  if (d.kind == Device::cuda) current_stream(d).synchronize();
}

// The key of a choice: the candidates themselves (their labels, backends, compiler parameters and
// kernel IR, so that two autotunes of one name over different kernels, such as a causal and a
// plain attention, do not share an entry), the input types and the device.
// A candidate's kernel IR, or why it cannot be traced (it fails when timed, too).
std::string text_or_error(const CallImpl& c, const std::vector<Array>& inputs) {
  try {
    return kernel_text(c, inputs);
  } catch (const std::exception& e) {
    return std::string("fails: ") + e.what();
  }
}

// The key of a choice on disk: the candidates themselves (their labels, backends, compiler
// parameters and kernel IR, so that two autotunes of one name over different kernels, such as a
// causal and a plain attention, do not share an entry), the input types and the device.
std::string disk_key(const CallImpl& call, const std::vector<Array>& inputs, Device d) {
  std::string key = "autotune " + call.choice_name;
  for (size_t i = 0; i < call.choices.size(); ++i) {
    const CallOptions& o = call.choices[i]->base().options;
    const CompilerParams& cp = o.compiler_params;
    key += "|" + call.choice_labels[i] + "@" + choose_backend(o) + " w" + std::to_string(cp.num_warps) + " s" +
           std::to_string(cp.num_stages) + (cp.fast_math ? " fast" : "") + (cp.allow_tf32 ? " tf32" : "") + " " +
           backend::hash_hex(text_or_error(*call.choices[i], inputs));
  }
  return key + "|" + signature(types_of(inputs), d.str()) + "|" + device_description(d);
}

// Made at each use (a signature's first call only): PALLADIUM_CACHE_DIR as it is then.
backend::DiskCache disk() { return backend::DiskCache("autotune"); }

// One timed call of a candidate; it throws where the candidate fails.
double seconds_of_one(const CallImpl& c, const std::vector<Array>& inputs, Device d) {
  const auto t0 = std::chrono::steady_clock::now();
  (void)invoke(c, inputs);
  wait_for(d);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Each candidate's best of kRounds runs, after one that compiles and warms it up; infinity where it
// fails. The runs go in rounds, each round timing every candidate once, so that a drift of the
// device's clocks or of the machine's load while timing touches every candidate alike; timed one
// after another, a slower candidate that ran during a fast spell could win. (Stop 39's "pick
// slower than a candidate" was not this: cuda_bench had timed the two rows differently.)
constexpr int kRounds = 5;
std::vector<double> seconds_of(const CallImpl& call, const std::vector<Array>& inputs, Device d,
                               std::vector<std::string>* why) {
  const size_t n = call.choices.size();
  std::vector<double> best(n, std::numeric_limits<double>::infinity());
  std::vector<bool> alive(n, true);
  auto attempt = [&](size_t i, auto&& run) {
    try {
      run();
    } catch (const std::exception& e) {
      (*why)[i] = e.what();
      alive[i] = false;
      best[i] = std::numeric_limits<double>::infinity();
    }
  };
  for (size_t i = 0; i < n; ++i) attempt(i, [&] { (void)seconds_of_one(*call.choices[i], inputs, d); });
  for (int r = 0; r < kRounds; ++r)
    for (size_t i = 0; i < n; ++i)
      if (alive[i]) attempt(i, [&] { best[i] = std::min(best[i], seconds_of_one(*call.choices[i], inputs, d)); });
  return best;
}

size_t choose(const CallImpl& call, const std::vector<Array>& inputs) {
  if (tuning_off()) return 0;
  const Device d = device_of(inputs);
  const std::string mine = signature(types_of(inputs), d.str());  // the choice within this call
  CallImpl::Tuning& t = *call.tuning;
  std::lock_guard<std::mutex> lock(t.mu);  // concurrent first calls time once
  if (auto it = t.chosen.find(mine); it != t.chosen.end()) return it->second;
  const std::string key = disk_key(call, inputs, d);  // traces the candidates: first calls only
  if (std::optional<std::string> stored = disk().load(key))
    for (size_t i = 0; i < call.choice_labels.size(); ++i)
      if (call.choice_labels[i] == *stored) return t.chosen[mine] = i;
  // Timing launches kernels beyond the one of a call: a CUDA graph recorded now would hold them.
  if (cuda::recording()) cuda::mark_unusable("autotune '" + call.choice_name + "' timed its candidates");
  std::vector<std::string> why(call.choices.size());
  const std::vector<double> times = seconds_of(call, inputs, d, &why);
  size_t best = 0;
  double best_s = std::numeric_limits<double>::infinity();
  std::string failures;
  for (size_t i = 0; i < call.choices.size(); ++i) {
    if (!why[i].empty()) failures += "\n  " + call.choice_labels[i] + ": " + why[i];
    if (times[i] < best_s) {
      best_s = times[i];
      best = i;
    }
  }
  if (best_s == std::numeric_limits<double>::infinity())
    throw Error("autotune '" + call.choice_name + "': every candidate failed on these inputs:" + failures);
  if (const char* v = std::getenv("PALLADIUM_AUTOTUNE_VERBOSE"); v && std::string(v) == "1") {
    std::string report = "autotune '" + call.choice_name + "' on " + d.str() + ":";
    for (size_t i = 0; i < call.choices.size(); ++i)
      report += " " + call.choice_labels[i] + (times[i] == std::numeric_limits<double>::infinity() ? " failed;" : " " + std::to_string(times[i] * 1e6) + " us;");
    std::fprintf(stderr, "%s chose %s\n", report.c_str(), call.choice_labels[best].c_str());
  }
  disk().store(key, call.choice_labels[best]);
  return t.chosen[mine] = best;
}

}  // namespace

std::shared_ptr<CallImpl> make_choice(std::string name, std::vector<std::string> labels,
                                      std::vector<std::shared_ptr<CallImpl>> candidates) {
  const std::string what = "autotune '" + name + "'";
  PL_CHECK(!candidates.empty(), what, ": no candidates");
  PL_ASSERT(labels.size() == candidates.size(), "one label per candidate");
  std::set<std::string> seen;
  for (size_t i = 0; i < candidates.size(); ++i) {
    PL_CHECK(candidates[i] != nullptr, what, ": candidate '", labels[i], "' is not a call");
    PL_CHECK(seen.insert(labels[i]).second, what, ": two candidates are labelled '", labels[i], "'");
  }
  // Candidates of a fixed result (not vmaps, whose results follow their inputs) return the same.
  const CallImpl& first = *candidates[0];
  for (size_t i = 1; i < candidates.size(); ++i) {
    const CallImpl& c = *candidates[i];
    if (c.inner || first.inner || !c.choices.empty() || !first.choices.empty()) continue;
    bool same = c.out_shapes.size() == first.out_shapes.size();
    for (size_t o = 0; same && o < c.out_shapes.size(); ++o)
      same = c.out_shapes[o].shape == first.out_shapes[o].shape && c.out_shapes[o].dtype == first.out_shapes[o].dtype;
    if (!same) {
      std::string a, b;
      for (const ShapeDtype& t : first.out_shapes) a += (a.empty() ? "" : ", ") + type_str(t);
      for (const ShapeDtype& t : c.out_shapes) b += (b.empty() ? "" : ", ") + type_str(t);
      throw Error(what + ": candidate '" + labels[i] + "' returns (" + b + ") but '" + labels[0] + "' returns (" + a +
                  "); the candidates must compute the same function");
    }
  }
  auto c = std::make_shared<CallImpl>();
  c->choices = std::move(candidates);
  c->choice_labels = std::move(labels);
  c->choice_name = std::move(name);
  c->tuning = std::make_shared<CallImpl::Tuning>();
  c->out_shapes = first.out_shapes;
  c->cache = first.cache;  // trace counts and lowering are the first candidate's
  return c;
}

std::vector<Array> invoke_choice(const CallImpl& call, const std::vector<Array>& inputs) {
  return invoke(*call.choices[choose(call, inputs)], inputs);
}

std::string chosen_label(const CallImpl& call, const std::vector<Array>& inputs) {
  PL_CHECK(!call.choices.empty(), "autotune_choice: pallas_call '", call.name(), "' is not an autotune");
  return call.choice_labels[choose(call, inputs)];
}

}  // namespace palladium::detail
