// Executable: fusion groups lowered to steps, then run in order over an environment of Arrays that
// frees each value after its last use (the backends' allocators reuse the memory).
#include "program/executor.h"
#include "program/executor_step.h"

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "core/grid_mapping.h"
#include "palladium/device.h"
#include "palladium/numpy.h"
#include "palladium/stream.h"
#include "program/control_flow.h"
#include "program/families.h"
#include "program/pallas_call_prim.h"
#include "program/step_profile.h"
#include "program/trace.h"
#include "sharding/collectives.h"

namespace palladium::program {

Array placed(const Array& a, Device d) {
  if (a.is_sharded()) return placed(to_host(a), d);  // eager ops on a sharded Array see its global value
  if (a.device() == d) return a;
  return d.kind == Device::cpu ? to_host(a) : to_device(a, d);
}

namespace {

Array empty_on(const Type& t, Device d) {
  return d.kind == Device::cpu ? Array(t.shape, t.dtype) : empty(t.shape, t.dtype, d);
}

// Runs with no trace open, so that ops the executor itself issues run rather than being staged.
class NoTrace {
 public:
  NoTrace() : saved_(Trace::suspend()) {}
  ~NoTrace() { Trace::resume(saved_); }
  NoTrace(const NoTrace&) = delete;
  NoTrace& operator=(const NoTrace&) = delete;

 private:
  Trace* saved_;
};

}  // namespace

std::shared_ptr<Executable> Executable::compile(const Program& p, Device device, CompileOptions options) {
  auto x = std::make_shared<Executable>();
  x->program_ = p;
  x->device_ = device;
  x->backend_ = options.backend.empty() ? array_backend(device) : options.backend;
  const Program& prog = x->program_;
  for (Array& c : x->program_.consts) c = placed(c, device);
  for (const FusionGroup& g : fuse(prog, options.fuse, x->backend_)) {
    auto step = std::make_shared<Step>();
    const Eqn& first = prog.eqns[g.eqns[0]];
    step->eqn = &first;
    if (g.fused) {
      if (g.outs.empty()) continue;  // nothing of it is used
      std::vector<const Eqn*> members;
      for (size_t i : g.eqns) members.push_back(&prog.eqns[i]);
      step->kernel = lower_fused_group(prog, members, g, x->backend_);
      step->ins = g.ins;
      step->outs = g.outs;
      step->label = "kernel " + step->kernel.call->name();
      x->steps_.push_back(step);
      continue;
    }
    step->ins = first.ins;
    step->outs = first.outs;
    switch (family_of(first.prim)) {
      case Family::reshape:
      case Family::constraint:  // an identity once partitioned (or where nothing partitions)
        step->kind = Step::Kind::view;
        step->label = first.prim == Prim::reshape ? "view reshape" : "view sharding_constraint";
        break;
      case Family::collective:
        step->kind = Step::Kind::collective;
        step->label = std::string("collective ") + prim_name(first.prim);
        break;
      case Family::pallas_call:
        step->kind = Step::Kind::user_call;
        step->label = "pallas_call " + first.params.name;
        break;
      case Family::custom_vjp:
        step->kind = Step::Kind::program_call;
        step->subs.push_back(compile(*first.params.regions.at(0), device, options));
        step->label = "custom_vjp " + first.params.name;
        break;
      case Family::scan:
        if (options.fuse) {
          if (std::optional<KernelStep> fused = lower_fused_scan(prog, first, x->backend_)) {
            step->kernel = std::move(*fused);
            step->label = "kernel " + step->kernel.call->name();
            break;
          }
        }
        [[fallthrough]];
      case Family::while_loop:
      case Family::cond:
        step->kind = Step::Kind::control;
        for (const auto& r : first.params.regions) step->subs.push_back(compile(*r, device, options));
        step->label = prim_name(first.prim);
        break;
      default: {
        std::vector<KernelStep> ks = lower_structural(prog, first, x->backend_);
        PL_ASSERT(ks.size() == 1, "one kernel per structural equation");
        step->kernel = std::move(ks[0]);
        for (Array& a : step->kernel.extra) a = placed(a, device);
        step->label = "kernel " + step->kernel.call->name();
        break;
      }
    }
    x->steps_.push_back(step);
  }
  if (options.graphs && device.kind == Device::cuda) x->graph_ = make_graph_cache(*x);
  // Free each var after the last step that reads it (never the program's outputs).
  std::map<int, size_t> last_use;
  for (size_t k = 0; k < x->steps_.size(); ++k)
    for (int v : x->steps_[k]->ins) last_use[v] = k;
  std::set<int> keep(prog.outputs.begin(), prog.outputs.end());
  x->frees_.assign(x->steps_.size(), {});
  for (auto [v, k] : last_use)
    if (!keep.count(v)) x->frees_[k].push_back(v);
  return x;
}

size_t Executable::num_kernels() const {
  size_t n = 0;
  for (const auto& s : steps_) n += s->kind == Step::Kind::kernel ? 1 : 0;
  return n;
}

std::string Executable::describe() const {
  std::ostringstream os;
  auto vars = [](const std::vector<int>& vs) {
    std::string s = "(";
    for (size_t i = 0; i < vs.size(); ++i) s += (i ? ", %" : "%") + std::to_string(vs[i]);
    return s + ")";
  };
  for (const auto& s : steps_) os << "  " << s->label << " " << vars(s->ins) << " -> " << vars(s->outs) << "\n";
  if (const std::string g = graph_status(); !g.empty()) os << "  (" << g << ")\n";
  return os.str();
}

std::vector<Array> Executable::run(const std::vector<Array>& inputs) const {
  NoTrace no_trace;
  const Program& p = program_;
  PL_ASSERT(inputs.size() == p.inputs.size(), "program '", p.name, "' takes ", p.inputs.size(), " inputs, got ",
            inputs.size());
  std::vector<Array> at_device;
  for (const Array& a : inputs) at_device.push_back(placed(a, device_));
  // On a GPU every step runs on the device's current stream, kernels without inputs included
  // (they would otherwise make host results and wait for the GPU).
  std::optional<StreamScope> on_stream;
  if (device_.kind == Device::cuda) on_stream.emplace(current_stream(device_));
  if (graph_)
    if (std::optional<std::vector<Array>> r = run_graphed(at_device)) return std::move(*r);
  return run_steps(at_device, nullptr);
}

std::vector<Array> Executable::run_steps(const std::vector<Array>& inputs, std::vector<Array>* keep,
                                         const StepHook* around_collective) const {
  const Program& p = program_;
  std::vector<Array> env(p.types.size());
  for (size_t i = 0; i < inputs.size(); ++i) env[static_cast<size_t>(p.inputs[i])] = inputs[i];
  for (size_t i = 0; i < p.consts.size(); ++i) env[static_cast<size_t>(p.const_vars[i])] = p.consts[i];
  auto read = [&](const std::vector<int>& vs) {
    std::vector<Array> a;
    for (int v : vs) a.push_back(env[static_cast<size_t>(v)]);
    return a;
  };
  const std::unique_ptr<StepProfile> profile = keep ? nullptr : StepProfile::start(p.name, device_);
  // Results of collectives that the device's stream has not been ordered after yet (so that the
  // collective overlaps the steps in between), by variable: joined before a step reads one, before
  // one is freed, and at the end.
  std::map<int, std::shared_ptr<std::function<void()>>> unjoined;
  auto join = [&](int v) {
    auto it = unjoined.find(v);
    if (it == unjoined.end()) return;
    const std::shared_ptr<std::function<void()>> order = it->second;
    unjoined.erase(it);
    if (*order) std::exchange(*order, nullptr)();
  };
  for (size_t k = 0; k < steps_.size(); ++k) {
    const Step& s = *steps_[k];
    std::vector<Array> outs;
    if (!unjoined.empty())
      for (int v : s.ins) join(v);  // a step's inputs (a kernel's operands among them)
    switch (s.kind) {
      case Step::Kind::kernel: {
        bool empty_result = false;
        for (int v : s.outs) empty_result = empty_result || numel(p.type(v).shape) == 0;
        if (empty_result) {
          for (int v : s.outs) outs.push_back(empty_on(p.type(v), device_));
          break;
        }
        std::vector<Array> ins = read(s.kernel.ins);
        for (size_t i = 0; i < s.kernel.in_views.size(); ++i)
          if (ins[i].shape() != s.kernel.in_views[i]) ins[i] = ins[i].reshape(s.kernel.in_views[i]);
        ins.insert(ins.end(), s.kernel.extra.begin(), s.kernel.extra.end());
        outs = detail::invoke(*s.kernel.call, ins);
        if (s.kernel.then) outs = detail::invoke(*s.kernel.then, outs);
        // A fused group stores a reduced value with its reduced axes as size-1 dimensions.
        for (size_t o = 0; o < outs.size(); ++o)
          if (outs[o].shape() != p.type(s.outs[o]).shape) outs[o] = outs[o].reshape(p.type(s.outs[o]).shape);
        break;
      }
      case Step::Kind::view:
        outs = {s.eqn->prim == Prim::reshape ? env[static_cast<size_t>(s.ins[0])].reshape(s.eqn->params.shape)
                                             : env[static_cast<size_t>(s.ins[0])]};
        break;
      case Step::Kind::collective: {
        std::function<void()> order;
        if (around_collective) (*around_collective)(s, true);
        outs = sharding::run_collective(*s.eqn, read(s.ins), keep ? nullptr : &order);
        if (around_collective) (*around_collective)(s, false);
        if (order) {
          auto shared = std::make_shared<std::function<void()>>(std::move(order));
          for (int v : s.outs) unjoined[v] = shared;
        }
        break;
      }
      case Step::Kind::user_call:
        outs = detail::invoke(*std::static_pointer_cast<const detail::CallImpl>(s.eqn->params.callee),
                              with_none_inputs(s.eqn->params, read(s.ins)));
        break;
      case Step::Kind::program_call:
        outs = s.subs[0]->run(read(s.ins));
        break;
      case Step::Kind::control:
        outs = run_control(*s.eqn, s.subs, read(s.ins));
        break;
    }
    for (size_t o = 0; o < s.outs.size(); ++o) env[static_cast<size_t>(s.outs[o])] = std::move(outs[o]);
    if (!keep)
      for (int v : frees_[k]) {
        join(v);
        env[static_cast<size_t>(v)] = Array();
      }
    if (profile) profile->step_done(s.label);
  }
  while (!unjoined.empty()) join(unjoined.begin()->first);
  if (profile) profile->finish();
  std::vector<Array> result = read(p.outputs);
  if (keep) *keep = std::move(env);
  return result;
}

namespace {

// The program of one equation over operands of these types.
Program single_equation(Prim prim, const Params& params, const std::vector<Array>& ins, const std::vector<Type>& outs) {
  Program p;
  p.name = prim_name(prim);
  Eqn e{prim, params, {}, {}};
  for (const Array& a : ins) e.ins.push_back(p.new_var({a.shape(), a.dtype()}));
  for (const Type& t : outs) e.outs.push_back(p.new_var(t));
  p.inputs = e.ins;
  p.outputs = e.outs;
  p.eqns.push_back(std::move(e));
  return p;
}

// Where a slice of a row-major array is one contiguous run of its elements (every step one, the
// axes after the last partial one whole, the axes before it of extent one), its first element.
std::optional<int64_t> contiguous_slice_start(const Params& params, const Shape& shape) {
  const size_t r = shape.size();
  size_t last_partial = r;
  for (size_t d = 0; d < r; ++d) {
    if (params.step[d] != 1) return std::nullopt;
    if (params.lo[d] != 0 || params.hi[d] != shape[d]) last_partial = d;
  }
  for (size_t d = 0; d < last_partial && last_partial < r; ++d)
    if (params.hi[d] - params.lo[d] != 1) return std::nullopt;
  int64_t start = 0;
  for (size_t d = 0; d < r; ++d) start = start * shape[d] + params.lo[d];
  return start;
}

// An Array over part of another's buffer, keeping that buffer alive. Only device arrays are viewed:
// their data is written by kernels that make new arrays, never in place, while a host Array's
// data can be set through the view's parent. Only eager ops: in a jitted program a view at an
// offset into an input would escape the CUDA graph's pointer patching, which matches whole
// buffers by address (executor_graph.cc).
Array device_view(const Array& a, int64_t first, const Type& t) {
  struct View {
    std::shared_ptr<Storage> parent;
    Storage storage;
  };
  auto v = std::make_shared<View>();
  v->parent = a.storage();
  v->storage.ptr = static_cast<char*>(a.storage()->ptr) + static_cast<size_t>(first) * itemsize(a.dtype());
  v->storage.nbytes = static_cast<size_t>(numel(t.shape)) * itemsize(t.dtype);
  v->storage.device = a.device();
  return Array(t.shape, t.dtype, std::shared_ptr<Storage>(v, &v->storage));
}

}  // namespace

std::vector<Array> run_eager(Prim prim, const Params& params, const std::vector<Array>& ins,
                             const std::vector<Type>& outs, Device device) {
  // x[t] in an eager loop: a view of the row rather than a kernel that copies it.
  if (prim == Prim::slice && device.kind == Device::cuda && !ins[0].is_sharded() && ins[0].device() == device &&
      numel(outs[0].shape) > 0)
    if (std::optional<int64_t> first = contiguous_slice_start(params, ins[0].shape()))
      return {device_view(ins[0], *first, outs[0])};
  if (prim == Prim::pallas_call)
    return detail::invoke(*std::static_pointer_cast<const detail::CallImpl>(params.callee), with_none_inputs(params, ins));
  if (prim == Prim::full && device.kind == Device::cpu) return {palladium::full(params.shape, params.scalar, params.dtype)};
  // Equations with callees or regions hold pointers in their key: compiled afresh, never cached.
  if (params.callee || !params.regions.empty())
    return Executable::compile(single_equation(prim, params, ins, outs), device)->run(ins);
  // The cache key, appended into one string (an ostringstream per eager op cost more than the rest
  // of the lookup).
  std::string key = prim_name(prim);
  key += params.key();
  key += '|';
  key += device.str();
  key += '|';
  key += array_backend(device);
  key += types_key(ins);
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Executable>> cache;
  std::shared_ptr<Executable> exe;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) exe = it->second;
  }
  if (!exe) {
    exe = Executable::compile(single_equation(prim, params, ins, outs), device);
    std::lock_guard<std::mutex> lock(mu);
    cache[key] = exe;
  }
  return exe->run(ins);
}

}  // namespace palladium::program
