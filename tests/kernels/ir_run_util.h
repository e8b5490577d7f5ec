// A call's traced kernel and a kernel run as it is on a backend: for tests of IR rewrites.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/grid_mapping.h"
#include "kernel_test_util.h"
#include "palladium/palladium.h"
#include "tests/support/program_support.h"

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

// A rewrite of an attention dK/dV step (inputs q, k, v, dout [rows, dim], lse, delta [rows];
// outputs dk, dv) run on every host backend on fresh inputs, against the step as written, traced in
// float64 and run on the interpreter.
inline void expect_step_matches_float64(const ir::Kernel& rewritten, const ir::Kernel& written64, int64_t rows,
                                        int64_t dim) {
  Rng rng;
  std::vector<Array> in;
  for (int i = 0; i < 4; ++i) in.push_back(rng.normal({rows, dim}));
  in.push_back(rng.uniform({rows}, f32, 0.5, 1.5));  // lse
  in.push_back(rng.normal({rows}));                  // delta
  std::vector<Array> in64;
  for (const Array& a : in) in64.push_back(a.astype(f64));
  const std::vector<Array> want = run_ir(written64, "interp", in64);
  for (const std::string& be : test_support::host_backends()) {
    SCOPED_TRACE(be);
    const std::vector<Array> got = run_ir(rewritten, be, in);
    EXPECT_TRUE(matches(got.at(0), want.at(0), f32));
    EXPECT_TRUE(matches(got.at(1), want.at(1), f32));
  }
}

}  // namespace palladium::ktest
