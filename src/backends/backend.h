// A backend turns an ir::Kernel into something that runs it over its grid. The interpreter is the
// definition of every op; compiled backends are tested against it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "palladium/array.h"
#include "palladium/call.h"

namespace palladium::backend {

struct CompileOptions {
  bool debug = false;
  CompilerParams params{};
};

class Executable {
 public:
  virtual ~Executable() = default;
  // inputs: one per pallas_call input (undefined for None inputs); outputs: one per kernel output,
  // holding a copy of the aliased input where an alias exists and undefined otherwise: the backend
  // allocates those where it computes them (a host buffer made for a device result cost a malloc,
  // or an mmap for a large one, per eager op).
  virtual void run(const std::vector<Array>& inputs, std::vector<Array>& outputs) = 0;
};

// Host allocations for the outputs `run` received undefined (the host backends' first step).
void allocate_host_outputs(const ir::Kernel& kernel, std::vector<Array>& outputs);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Why the backend cannot run here ("" when it can).
  virtual std::string unavailable_reason() const { return ""; }
  // unavailable_reason().empty(), without building the reason (asked on every call).
  virtual bool available() const { return unavailable_reason().empty(); }
  // True when its executables read and write host memory: pallas_call then hands them host copies
  // of device inputs and returns host arrays. False when they take arrays where they are, as the
  // cuda backend does.
  virtual bool runs_on_host() const = 0;
  virtual std::unique_ptr<Executable> compile(const ir::Kernel& kernel, const CompileOptions& options) = 0;
};

// The backend of this name ("interpret", ...); throws an Error listing the known names.
Backend& get(const std::string& name);
// PALLADIUM_BACKEND if set, else the fastest backend available on this machine.
std::string default_name();
std::vector<std::string> names();
// The backends that can run on this machine, interpreter first.
std::vector<std::string> available_names();

}  // namespace palladium::backend
