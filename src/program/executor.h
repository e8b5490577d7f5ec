// The executor: a Program compiled into a list of steps (generated kernels, views, user kernels,
// nested programs for calls and loops) and run over Arrays on one device.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "program/lower.h"
#include "program/program.h"

namespace palladium::program {

struct CompileOptions {
  std::string backend;  // "" = array_backend(device)
  bool fuse = true;     // fuse elementwise chains into one kernel
};

class Executable {
 public:
  static std::shared_ptr<Executable> compile(const Program& p, Device device, CompileOptions options = {});
  std::vector<Array> run(const std::vector<Array>& inputs) const;
  // The steps, one per line: what runs, e.g. "kernel fused_mul_add_max (%3, %4) -> %7".
  std::string describe() const;
  size_t num_kernels() const;

  struct Step;

 private:
  Program program_;
  Device device_;
  std::string backend_;
  std::vector<std::shared_ptr<Step>> steps_;
  std::vector<std::vector<int>> frees_;  // vars dead after each step
};

// `a` on device d (itself when it is there already); a sharded Array is gathered first.
Array placed(const Array& a, Device d);

// Runs one equation eagerly on concrete Arrays (compiled once per signature, then cached).
std::vector<Array> run_eager(Prim prim, const Params& params, const std::vector<Array>& ins,
                             const std::vector<Type>& outs, Device device);

// Groups of equations that run as one step: a fused elementwise chain, or one equation.
struct FusionGroup {
  std::vector<size_t> eqns;  // indices into the program, in order
  std::vector<int> ins;      // vars read from outside the group
  std::vector<int> outs;     // vars used after the group (or returned)
  bool elementwise = false;
};
std::vector<FusionGroup> fuse(const Program& p, bool enabled);

}  // namespace palladium::program
