#include <cstdlib>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/interp/interpreter.h"
#include "palladium/error.h"

namespace palladium::backend {

void allocate_host_outputs(const ir::Kernel& kernel, std::vector<Array>& outputs) {
  for (const ir::RefParam& p : kernel.refs)
    if (p.is_output && !outputs.at(static_cast<size_t>(p.operand)).defined())
      outputs[static_cast<size_t>(p.operand)] = Array(p.array_shape, p.dtype);
}

std::vector<std::string> names() { return {"interpret", "cpu", "cuda"}; }

Backend& get(const std::string& name) {
  if (name == "interpret" || name == "interp") return interp::backend();
  if (name == "cpu") return cpu::backend();
  if (name == "cuda") return cuda::backend();
  std::string known;
  for (const std::string& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown backend '" + name + "' (known: " + known + ")");
}

std::vector<std::string> available_names() {
  std::vector<std::string> out;
  for (const std::string& n : names())
    if (get(n).available()) out.push_back(n);
  return out;
}

std::string default_name() {
  if (const char* env = std::getenv("PALLADIUM_BACKEND"); env && *env) return env;
  // The fastest backend that can run here.
  for (const char* n : {"cuda", "cpu"})
    if (get(n).available()) return n;
  return "interpret";
}

}  // namespace palladium::backend
