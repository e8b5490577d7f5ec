// One step of an Executable (executor.cc builds them, executor_graph.cc reads them).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "program/executor.h"

namespace palladium::program {

struct Executable::Step {
  enum class Kind { kernel, view, user_call, program_call, control, collective } kind = Kind::kernel;
  KernelStep kernel;
  std::vector<int> ins, outs;
  const Eqn* eqn = nullptr;  // view, user_call, control: the equation (in program_)
  std::vector<std::shared_ptr<Executable>> subs;
  std::string label;
};

}  // namespace palladium::program
