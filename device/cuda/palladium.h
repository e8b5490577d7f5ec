// The one header that generated CUDA kernels include. Everything under device/cuda/ is embedded
// into the library and handed to NVRTC by name ("cuda/palladium.h"); none of it includes
// anything outside this folder.
#pragma once
#include "cuda/pl_types.h"
#include "cuda/pl_math.h"
#include "cuda/pl_atomics.h"
#include "cuda/pl_mma.h"
#include "cuda/pl_wgmma.h"
#include "cuda/pl_tma.h"
#include "cuda/pl_checks.h"
