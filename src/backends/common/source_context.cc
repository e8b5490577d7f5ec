// Error context for generated source: numbered lines around a compiler's complaint.
#include "backends/common/source_context.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>
#include <vector>

namespace palladium::backend {

std::string source_excerpt(const std::string& source, int line, int radius) {
  std::vector<std::string> lines;
  std::istringstream in(source);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  if (line < 1 || lines.empty()) return "";
  const int last_line = static_cast<int>(lines.size());
  const int first = std::max(1, line - radius), last = std::min(last_line, line + radius);
  const int width = static_cast<int>(std::to_string(last).size());
  std::ostringstream os;
  for (int n = first; n <= last; ++n) {
    char number[32];
    std::snprintf(number, sizeof number, "%*d", width, n);
    os << (n == line ? ">> " : "   ") << number << " | " << lines[static_cast<size_t>(n - 1)] << "\n";
  }
  return os.str();
}

int first_error_line(const std::string& log) {
  // Accepts "<name>(LINE)" (NVRTC) and "<name>:LINE:" (GCC, Clang) where <name> is a run of
  // non-space characters; the first such mention wins.
  const size_t n = log.size();
  for (size_t i = 0; i < n; ++i) {
    const char open = log[i];
    if (open != '(' && open != ':') continue;
    if (i == 0 || std::isspace(static_cast<unsigned char>(log[i - 1])) || log[i - 1] == ':') continue;
    size_t j = i + 1;
    int line = 0;
    while (j < n && std::isdigit(static_cast<unsigned char>(log[j])) && line < 100000000) line = line * 10 + (log[j++] - '0');
    if (j == i + 1 || j >= n) continue;
    if ((open == '(' && log[j] == ')') || (open == ':' && log[j] == ':')) return line;
  }
  return 0;
}

}  // namespace palladium::backend
