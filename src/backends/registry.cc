#include <cstdlib>

#include "backends/backend.h"
#include "backends/interp/interpreter.h"
#include "palladium/error.h"

namespace palladium::backend {

std::vector<std::string> names() { return {"interpret"}; }

Backend& get(const std::string& name) {
  if (name == "interpret" || name == "interp") return interp::backend();
  std::string known;
  for (const std::string& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown backend '" + name + "' (known: " + known + ")");
}

std::string default_name() {
  if (const char* env = std::getenv("PALLADIUM_BACKEND"); env && *env) return env;
  return "interpret";
}

}  // namespace palladium::backend
