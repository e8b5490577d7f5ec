// Running the control-flow primitives (scan, while_loop, cond): their regions are compiled
// programs, driven from the host in a loop of compiled steps.
#pragma once
#include <memory>
#include <vector>

#include "program/program.h"

namespace palladium::program {
class Executable;
std::vector<Array> run_control(const Eqn& e, const std::vector<std::shared_ptr<Executable>>& regions,
                               const std::vector<Array>& ins);
}  // namespace palladium::program
