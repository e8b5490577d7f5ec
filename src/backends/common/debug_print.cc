#include "backends/common/debug_print.h"

#include <sstream>

namespace palladium::backend {

std::string format_debug_line(const std::string& kernel, const std::vector<int64_t>& program,
                              const std::string& format, const std::vector<Array>& values) {
  std::ostringstream os;
  os << "[" << kernel << " program (";
  for (size_t d = 0; d < program.size(); ++d) os << (d ? ", " : "") << program[d];
  os << ")] ";
  size_t v = 0, pos = 0;
  for (size_t p = format.find("{}"); p != std::string::npos && v < values.size(); p = format.find("{}", pos)) {
    os << format.substr(pos, p - pos) << values[v++].str();
    pos = p + 2;
  }
  os << format.substr(pos) << "\n";
  return os.str();
}

std::vector<int64_t> program_coordinates(int64_t linear, const Shape& grid) {
  std::vector<int64_t> pid(grid.size());
  for (size_t d = grid.size(); d-- > 0;) {
    pid[d] = linear % grid[d];
    linear /= grid[d];
  }
  return pid;
}

}  // namespace palladium::backend
