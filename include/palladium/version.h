// The library's version ("0.1.0"), as built (also in the CMake package and palladium.pc).
#pragma once

namespace palladium {
const char* version();
}  // namespace palladium
