// The CUDA backend: IR -> CUDA C++ -> NVRTC -> cubin -> driver API launch.
#pragma once
#include "backends/backend.h"

namespace palladium::cuda {
backend::Backend& backend();
}  // namespace palladium::cuda
