// A call's traced kernel and a kernel run as it is on a backend: for tests of IR rewrites.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/grid_mapping.h"
#include "palladium/palladium.h"

namespace palladium::ktest {

template <class R> ir::Kernel traced(const Callable<R>& call, const std::vector<ShapeDtype>& inputs) {
  detail::InputTypes in(inputs.begin(), inputs.end());
  return detail::trace_kernel(*call.impl(), detail::describe(*call.impl(), in));
}

// Runs a kernel as it is, on a backend (outputs allocated by the backend).
inline std::vector<Array> run_ir(const ir::Kernel& k, const std::string& backend_name, const std::vector<Array>& inputs) {
  std::unique_ptr<backend::Executable> exe = backend::get(backend_name).compile(k, {});
  std::vector<Array> outs(static_cast<size_t>(k.num_outputs()));
  exe->run(inputs, outs);
  return outs;
}

}  // namespace palladium::ktest
