// The one format of debug_print output, shared by every backend so their lines are identical:
// "[kernel program (i, j)] text" with each "{}" replaced by the value printed as NumPy prints it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "palladium/array.h"

namespace palladium::backend {

std::string format_debug_line(const std::string& kernel, const std::vector<int64_t>& program,
                              const std::string& format, const std::vector<Array>& values);
// Program coordinates of a row-major linear program id (last axis fastest).
std::vector<int64_t> program_coordinates(int64_t linear, const Shape& grid);

}  // namespace palladium::backend
