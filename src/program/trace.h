// Tracing Arrays into a Program. While a Trace is open on this thread, every Array op binds an
// equation into it and returns tracer Arrays (omnistaging: concrete operands become constants);
// with no Trace open, ops run eagerly. Traces nest (grad inside jit): an inner trace that meets a
// tracer of an outer one captures it as an extra input, so every Program stays closed.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "palladium/array.h"
#include "program/program.h"

namespace palladium::program {
class Trace;
}

namespace palladium::detail {

struct Tracer {
  program::Trace* trace = nullptr;
  uint64_t trace_id = 0;
  int var = -1;
};
Device tracer_device(const Tracer& t);
// JAX's ConcretizationTypeError: the data of a traced Array was asked for.
[[noreturn]] void concretization_error(const char* what, const Array& a);

}  // namespace palladium::detail

namespace palladium::program {

class Trace {
 public:
  Trace(std::string name, Device device);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // The innermost open trace on this thread, or nullptr.
  static Trace* current();
  // Hides every open trace of this thread (the executor runs ops for real); resume undoes it.
  static Trace* suspend();
  static void resume(Trace* saved);
  // Whether a tracer belongs to a trace that is still open on this thread.
  static bool is_live(const detail::Tracer& t);

  Array add_input(const Type& t);
  // Appends an equation; its outputs are new tracers.
  std::vector<Array> emit(Prim prim, Params params, const std::vector<Array>& ins, const std::vector<Type>& outs);
  // Closes the trace: the program computing `outs`. Tracers of outer traces that were used became
  // trailing inputs; `captured()` lists the outer Arrays to pass for them, in order.
  Program finish(const std::vector<Array>& outs);
  const std::vector<Array>& captured() const { return captured_; }

  const std::string& name() const { return program_.name; }
  Device device() const { return device_; }
  uint64_t id() const { return id_; }
  size_t num_eqns() const { return program_.eqns.size(); }

 private:
  int var_of(const Array& a);

  Program program_;
  Device device_;
  uint64_t id_;
  Trace* previous_;
  bool finished_ = false;
  std::vector<int> explicit_inputs_;
  std::vector<int> capture_vars_;
  std::vector<Array> captured_;
  std::map<std::pair<uint64_t, int>, int> capture_index_;  // (outer trace id, outer var) -> var
  std::map<const void*, int> const_index_;                  // storage -> var
};

// The single entry point of every Array op: infers the result types by the primitive's family
// rule (a user Error naming the op on bad input), then records the equation into the open trace
// or runs it eagerly on the inputs' device.
std::vector<Array> bind(Prim prim, Params params, const std::vector<Array>& ins);
inline Array bind1(Prim prim, Params params, const std::vector<Array>& ins) {
  return bind(prim, std::move(params), ins).at(0);
}

// Where an op's error happened: "" eagerly, else " (in 'f', equation 12)".
std::string trace_location();

// The copy of host scalar `a` on `device`, uploaded once per value, dtype and device (read-only:
// it is shared by every op given the same number).
Array uploaded_scalar(const Array& a, Device device);

}  // namespace palladium::program
