// IR -> C++ for the cpu backend: one translation unit per kernel that includes the device headers
// (device/cpu/palladium_cpu.h) and exports the entry points described in device/cpu/abi.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/common/access_check.h"
#include "ir/ir.h"

namespace palladium::cpu {

// A debug_print call site: the host formats its values (see debug_print.h).
struct PrintSite {
  std::string format;
  std::vector<ir::Type> types;
};

struct GeneratedKernel {
  std::string source;
  // Upper bound of one program's stack frame: every tile lives on the stack of a pool thread.
  int64_t frame_bytes = 0;
  std::vector<PrintSite> prints;
  // What palladium_cpu_run's [begin, end) counts: the points of the parallel axes (each runs its
  // chain of sequential programs), or every program in grid order when the kernel prints.
  int64_t work_items = 1;
  std::vector<backend::AccessSite> access_sites;  // checked runs: the memory ops, by site id
};

// The C++ translation unit of a kernel (the Builder has already rejected stores into input refs).
// With `checks`, every ref access is bounds-checked (see backends/common/access_check.h).
GeneratedKernel generate(const ir::Kernel& kernel, bool checks = false);

}  // namespace palladium::cpu
