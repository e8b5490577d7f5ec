// pallas_call equations: the call's inputs with its None inputs put back in place.
#pragma once
#include <vector>

#include "program/program.h"

namespace palladium::program {
std::vector<Array> with_none_inputs(const Params& q, const std::vector<Array>& defined);
}  // namespace palladium::program
