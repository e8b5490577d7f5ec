// The executor's entry to collectives (a collective step of a per-device program).
#pragma once
#include <vector>

#include "palladium/array.h"
#include "program/program.h"

namespace palladium::sharding {

// Runs collective equation `e` for the device of this thread's SPMD run (an Error outside one).
std::vector<Array> run_collective(const program::Eqn& e, const std::vector<Array>& ins);

}  // namespace palladium::sharding
