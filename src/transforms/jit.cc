// jit: trace once per signature, optimise, compile, cache, run. Also the shared tracing and
// program-evaluation helpers, and optimize (CSE + DCE).
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "program/executor.h"
#include "program/families.h"
#include "program/trace.h"
#include "transforms/transforms.h"

namespace palladium::program {

std::vector<Type> types_of(const std::vector<Array>& xs) {
  std::vector<Type> t;
  for (const Array& a : xs) t.push_back({a.shape(), a.dtype()});
  return t;
}

Device device_of(const std::vector<Array>& xs) {
  for (const Array& a : xs)
    if (a.defined()) return a.device();
  return Device{};
}

Traced trace_flat(const std::string& name, const detail::FlatFn& f, const std::vector<Type>& in_types, Device device) {
  Trace t(name, device);
  std::vector<Array> args;
  for (const Type& ty : in_types) args.push_back(t.add_input(ty));
  std::vector<Array> outs = f(args);
  Traced r;
  r.program = t.finish(outs);
  r.captured = t.captured();
  return r;
}

std::vector<Array> bind_eqn(const Eqn& e, const std::vector<Array>& ins) { return bind(e.prim, e.params, ins); }

std::vector<Array> eval_program(const Program& p, const std::vector<Array>& ins) {
  PL_ASSERT(ins.size() == p.inputs.size(), "eval_program '", p.name, "': ", ins.size(), " inputs for ", p.inputs.size());
  std::vector<Array> env(p.types.size());
  for (size_t i = 0; i < ins.size(); ++i) env[static_cast<size_t>(p.inputs[i])] = ins[i];
  // Constants made while tracing live on the host; they follow the program's device, as a
  // compiled program places them (a gradient's ones or zeros meeting device Arrays).
  std::optional<Device> device;
  for (const Array& a : ins)
    if (a.defined() && !a.is_tracer() && !a.is_sharded() && a.device().kind != Device::cpu) {
      device = a.device();
      break;
    }
  for (size_t i = 0; i < p.consts.size(); ++i) {
    const Array& c = p.consts[i];
    env[static_cast<size_t>(p.const_vars[i])] = device && !c.is_tracer() ? placed(c, *device) : c;
  }
  for (const Eqn& e : p.eqns) {
    std::vector<Array> a;
    for (int v : e.ins) a.push_back(env[static_cast<size_t>(v)]);
    std::vector<Array> o = bind_eqn(e, a);
    for (size_t k = 0; k < e.outs.size(); ++k) env[static_cast<size_t>(e.outs[k])] = o[k];
  }
  std::vector<Array> outs;
  for (int v : p.outputs) outs.push_back(env[static_cast<size_t>(v)]);
  return outs;
}

Program optimize(const Program& in) {
  Program p = in;
  // CSE: an equation equal to an earlier one (primitive, params, operands) reuses its results.
  std::vector<int> rename(p.types.size());
  for (size_t v = 0; v < rename.size(); ++v) rename[v] = static_cast<int>(v);
  std::map<std::string, std::vector<int>> seen;  // key -> results of the first equal equation
  // Values equal to one everywhere (a `full` of 1, reshaped, broadcast or converted): a product
  // with one is its other operand, exactly (grad's seed cotangent times the loss's weights).
  std::vector<bool> one(p.types.size(), false);
  std::vector<Eqn> kept;
  kept.reserve(p.eqns.size());
  for (Eqn& e : p.eqns) {
    for (int& v : e.ins) v = rename[static_cast<size_t>(v)];
    if (e.prim == Prim::full) one[static_cast<size_t>(e.outs[0])] = e.params.scalar == 1.0;
    if ((e.prim == Prim::reshape || e.prim == Prim::broadcast || e.prim == Prim::convert) &&
        one[static_cast<size_t>(e.ins[0])])
      one[static_cast<size_t>(e.outs[0])] = true;
    if (e.prim == Prim::mul) {
      const int out = e.outs[0];
      int other = -1;
      for (size_t i = 0; i < 2 && other < 0; ++i)
        if (one[static_cast<size_t>(e.ins[i])] && p.type(e.ins[1 - i]) == p.type(out)) other = e.ins[1 - i];
      if (other >= 0) {
        rename[static_cast<size_t>(out)] = other;
        continue;
      }
    }
    std::string k = std::to_string(static_cast<int>(e.prim)) + e.params.key();
    for (int v : e.ins) {
      k += ',';
      k += std::to_string(v);
    }
    auto [it, fresh] = seen.emplace(std::move(k), e.outs);
    if (!fresh) {
      for (size_t o = 0; o < e.outs.size(); ++o) rename[static_cast<size_t>(e.outs[o])] = it->second[o];
      continue;
    }
    kept.push_back(std::move(e));
  }
  for (int& v : p.outputs) v = rename[static_cast<size_t>(v)];
  p.eqns = std::move(kept);
  // DCE: keep equations whose results are used, walking backwards.
  std::set<int> live(p.outputs.begin(), p.outputs.end());
  std::vector<Eqn> alive;
  for (size_t i = p.eqns.size(); i-- > 0;) {
    const Eqn& e = p.eqns[i];
    bool used = false;
    for (int v : e.outs) used = used || live.count(v);
    if (!used) continue;
    for (int v : e.ins) live.insert(v);
    alive.push_back(e);
  }
  p.eqns.assign(alive.rbegin(), alive.rend());
  return p;
}

}  // namespace palladium::program

namespace palladium::detail {

using program::Executable;

struct JitState {
  std::string name, backend;
  bool fuse = true;
  std::mutex mu;
  int traces = 0;
  struct Entry {
    program::Program traced, optimized;
    std::shared_ptr<Executable> exe;
  };
  std::map<std::string, std::shared_ptr<Entry>> entries;
};

std::shared_ptr<JitState> make_jit_state(std::string name, std::string backend, bool fuse) {
  auto s = std::make_shared<JitState>();
  s->name = std::move(name);
  s->backend = std::move(backend);
  s->fuse = fuse;
  return s;
}

namespace {

std::shared_ptr<JitState::Entry> entry(JitState& s, const std::string& key, const std::vector<Array>& flat,
                                       const FlatFn& trace) {
  const Device device = program::device_of(flat);
  const std::string k = key + '|' + device.str() + program::types_key(flat);  // built on every call
  std::lock_guard<std::mutex> lock(s.mu);
  if (auto it = s.entries.find(k); it != s.entries.end()) return it->second;
  auto e = std::make_shared<JitState::Entry>();
  program::Traced t = program::trace_flat(s.name, trace, program::types_of(flat), device);
  PL_ASSERT(t.captured.empty(), "a top-level jit trace captured outer values");
  ++s.traces;
  e->traced = std::move(t.program);
  e->optimized = program::compact(program::reroll_loops(program::optimize(e->traced)));
  program::verify(e->optimized);
  e->exe = Executable::compile(e->optimized, device, {s.backend, s.fuse, /*graphs=*/true});
  s.entries[k] = e;
  return e;
}

}  // namespace

std::vector<Array> jit_call(JitState& s, const std::string& key, const std::vector<Array>& flat, const FlatFn& trace) {
  // Inside another transformation the function is traced into the enclosing program.
  if (program::Trace::current() != nullptr) return trace(flat);
  return entry(s, key, flat, trace)->exe->run(flat);
}

std::string jit_lower(JitState& s, const std::string& key, const std::vector<Array>& flat, const FlatFn& trace) {
  auto e = entry(s, key, flat, trace);
  return "--- traced ---\n" + program::print(e->traced) + "--- optimized ---\n" + program::print(e->optimized) +
         "--- steps (" + std::to_string(e->exe->num_kernels()) + " kernels) ---\n" + e->exe->describe();
}

int jit_trace_count(const JitState& s) { return s.traces; }

}  // namespace palladium::detail
