// Trace: the program under construction on this thread, and bind, where every Array op starts.
#include "program/trace.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "palladium/device.h"
#include "program/executor.h"
#include "program/families.h"

namespace palladium::detail {

Device tracer_device(const Tracer& t) {
  if (program::Trace::is_live(t)) return t.trace->device();
  return Device{};
}

void concretization_error(const char* what, const Array& a) {
  std::string where = program::trace_location();
  throw Error(std::string(what) + ": the data of a traced Array (" + dtype_name(a.dtype()) + shape_str(a.shape()) +
              ") is not available while a program is traced" + where +
              ". Its value is only known when the program runs: branch with pl::cond or select with "
              "pl::jnp::where instead of C++ if, loop with pl::fori_loop/pl::scan, or pass the value as a "
              "static capture (ConcretizationTypeError)");
}

}  // namespace palladium::detail

namespace palladium::program {

namespace {
thread_local Trace* innermost = nullptr;
std::atomic<uint64_t> next_trace_id{1};
}  // namespace

Trace::Trace(std::string name, Device device) : device_(device), id_(next_trace_id++), previous_(innermost) {
  program_.name = std::move(name);
  innermost = this;
}

Trace::~Trace() {
  // Traces close innermost first; an exception unwinding through nested traces keeps that order.
  if (innermost == this) innermost = previous_;
}

Trace* Trace::current() { return innermost; }

Trace* Trace::suspend() {
  Trace* saved = innermost;
  innermost = nullptr;
  return saved;
}

void Trace::resume(Trace* saved) { innermost = saved; }

bool Trace::is_live(const detail::Tracer& t) {
  for (Trace* tr = innermost; tr != nullptr; tr = tr->previous_)
    if (tr == t.trace && tr->id_ == t.trace_id && !tr->finished_) return true;
  return false;
}

Array Trace::add_input(const Type& t) {
  const int v = program_.new_var(t);
  explicit_inputs_.push_back(v);
  return Array::from_tracer(t.shape, t.dtype, std::make_shared<detail::Tracer>(detail::Tracer{this, id_, v}));
}

int Trace::var_of(const Array& a) {
  PL_ASSERT(a.defined(), "binding an undefined Array");
  if (a.is_tracer()) {
    const detail::Tracer& t = *a.tracer();
    if (t.trace == this && t.trace_id == id_) return t.var;
    PL_CHECK(is_live(t), "a traced Array escaped the function that was traced: it was made while tracing another "
                         "program that has finished (return it from that function instead of storing it)",
             trace_location());
    auto key = std::make_pair(t.trace_id, t.var);
    if (auto it = capture_index_.find(key); it != capture_index_.end()) return it->second;
    const int v = program_.new_var({a.shape(), a.dtype()});
    capture_index_[key] = v;
    capture_vars_.push_back(v);
    captured_.push_back(a);
    return v;
  }
  const void* key = a.storage().get();
  if (auto it = const_index_.find(key); it != const_index_.end() && program_.type(it->second) == Type{a.shape(), a.dtype()})
    return it->second;
  const int v = program_.new_var({a.shape(), a.dtype()});
  const_index_[key] = v;
  program_.const_vars.push_back(v);
  program_.consts.push_back(a);
  return v;
}

std::vector<Array> Trace::emit(Prim prim, Params params, const std::vector<Array>& ins, const std::vector<Type>& outs) {
  PL_ASSERT(!finished_, "emit into a finished trace");
  Eqn e;
  e.prim = prim;
  e.params = std::move(params);
  for (const Array& a : ins) e.ins.push_back(var_of(a));
  std::vector<Array> results;
  for (const Type& t : outs) {
    const int v = program_.new_var(t);
    e.outs.push_back(v);
    results.push_back(Array::from_tracer(t.shape, t.dtype, std::make_shared<detail::Tracer>(detail::Tracer{this, id_, v})));
  }
  program_.eqns.push_back(std::move(e));
  return results;
}

Program Trace::finish(const std::vector<Array>& outs) {
  for (const Array& a : outs) {
    PL_CHECK(a.defined(), "'", program_.name, "': the traced function returned an undefined Array");
    program_.outputs.push_back(var_of(a));
  }
  finished_ = true;
  if (innermost == this) innermost = previous_;
  program_.inputs = explicit_inputs_;
  program_.inputs.insert(program_.inputs.end(), capture_vars_.begin(), capture_vars_.end());
  return std::move(program_);
}

std::string trace_location() {
  Trace* t = Trace::current();
  if (t == nullptr) return "";
  return " (while tracing '" + t->name() + "', at equation " + std::to_string(t->num_eqns()) + ")";
}

// Eager loops pass the same few numbers every iteration (relu's 0, a scale): uploading each again
// cost a blocking copy per op. Kernels only read such operands, so a cached copy is never written;
// values that change every call (a learning-rate schedule) fill the cache, which then starts over.
Array uploaded_scalar(const Array& a, Device device) {
  struct Key {
    DType dtype;
    Device device;
    uint64_t bits;
    bool operator<(const Key& o) const {
      return std::tie(dtype, device.kind, device.index, bits) < std::tie(o.dtype, o.device.kind, o.device.index, o.bits);
    }
  };
  Key key{a.dtype(), device, 0};
  std::memcpy(&key.bits, a.data(), std::min(a.nbytes(), sizeof key.bits));
  static std::mutex mu;
  static std::map<Key, Array> cache;
  constexpr size_t kMaxEntries = 256;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  Array placed = to_device(a, device);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kMaxEntries) cache.clear();
  cache.emplace(key, placed);
  return placed;
}

std::vector<Array> bind(Prim prim, Params params, const std::vector<Array>& ins) {
  std::vector<Type> in_types;
  for (size_t i = 0; i < ins.size(); ++i) {
    PL_CHECK(ins[i].defined(), prim_name(prim), ": operand ", i, " is an undefined (none) Array", trace_location());
    in_types.push_back({ins[i].shape(), ins[i].dtype()});
  }
  std::vector<Type> outs = infer_types(prim, params, in_types);
  if (Trace* t = Trace::current()) return t->emit(prim, std::move(params), ins, outs);
  // Host scalars (the weakly typed numbers of `x * 2.0`) follow the other operands to their device,
  // as JAX's uncommitted scalars do; any other mix of devices is an error.
  std::optional<Device> device;
  for (const Array& a : ins) {
    PL_CHECK(!a.is_tracer(), prim_name(prim),
             ": a traced Array escaped the function that was traced (it is used after its jit/grad/vmap "
             "finished); return it from that function instead of storing it");
    if (a.device().kind != Device::cpu || a.size() > 1) {
      if (!device) device = a.device();
      PL_CHECK(*device == a.device(), prim_name(prim), ": operands live on different devices (", device->str(), " and ",
               a.device().str(), "); move them to one device with pl::to_device first");
    }
  }
  if (!device) device = Device{};
  std::vector<Array> placed = ins;
  for (Array& a : placed)
    if (a.device() != *device) {
      PL_CHECK(a.size() <= 1, prim_name(prim), ": operands live on different devices (", device->str(), " and ",
               a.device().str(), "); move them to one device with pl::to_device first");
      a = is_elementwise(prim) && a.size() == 1 ? uploaded_scalar(a, *device) : to_device(a, *device);
    }
  return run_eager(prim, params, placed, outs, *device);
}

}  // namespace palladium::program
