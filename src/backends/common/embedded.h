// Device-side headers (device/cpu/*.h, device/cuda/*.h), embedded into the library at build time
// so generated code can include them without the source tree.
#pragma once
#include <map>
#include <string>

namespace palladium::backend {

// Maps "cpu/tile.h"-style names (relative to device/) to file contents.
const std::map<std::string, std::string>& embedded_headers();

}  // namespace palladium::backend
