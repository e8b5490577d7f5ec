// Error context for generated source: the lines around a failing line, numbered, for compile
// errors raised by the compiled backends.
#pragma once
#include <string>

namespace palladium::backend {

// Lines [line - radius, line + radius] of `source` (1-based), each prefixed with its number and a
// marker on `line`.
std::string source_excerpt(const std::string& source, int line, int radius = 4);
// The first line number mentioned in a compiler log as "<name>(LINE)" or "<name>:LINE:", or 0.
int first_error_line(const std::string& log);

}  // namespace palladium::backend
