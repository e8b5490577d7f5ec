// CUDA C++ -> cubin through NVRTC, with the device headers (device/cuda/) handed over by name,
// and a disk cache of cubins keyed by everything that determines them.
#pragma once
#include <string>

#include "backends/cuda/codegen.h"

namespace palladium::cuda {

struct CompileResult {
  std::string cubin;
  std::string ptx;       // only when asked for (debug)
  bool from_cache = false;
};

// "13.0" (empty when NVRTC is missing).
std::string nvrtc_version();
// Why NVRTC cannot be used here ("" when it can).
std::string nvrtc_unavailable_reason();

// Compiles `g` for `target`. `kernel_name` names the pallas_call in errors: an NVRTC failure
// raises Error with the log and the generated lines around the first failing line. The disk
// cache is used when `use_cache`; `want_ptx` also compiles the PTX (never from the cache).
CompileResult compile_to_cubin(const GeneratedKernel& g, const std::string& kernel_name, const Target& target,
                               bool use_cache, bool want_ptx);

}  // namespace palladium::cuda
