// The native CPU backend: IR -> C++ -> host compiler -> shared object -> dlopen.
#pragma once
#include "backends/backend.h"

namespace palladium::cpu {
backend::Backend& backend();
}  // namespace palladium::cpu
