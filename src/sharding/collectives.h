// The executor's entry to collectives (a collective step of a per-device program).
#pragma once
#include <functional>
#include <vector>

#include "palladium/array.h"
#include "program/program.h"

namespace palladium::sharding {

// Runs collective equation `e` for the device of this thread's SPMD run (an Error outside one).
// With `join`, the engine may return before the device's stream is ordered after the collective
// and leave that ordering in *join (Communicator::native): the caller calls it before the results
// are read, and at the latest before they are freed or returned.
std::vector<Array> run_collective(const program::Eqn& e, const std::vector<Array>& ins,
                                  std::function<void()>* join = nullptr);

}  // namespace palladium::sharding
