// IR -> CUDA C++. One thread block runs one program; the kernel's grid is folded into the launch
// grid (see emit_kernel.cc). The generated source includes only "cuda/palladium.h" (device/cuda/).
#pragma once
#include "backends/common/access_check.h"
#include <cstdint>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "palladium/call.h"

namespace palladium::cuda {

struct Target {
  int sm = 90;                        // compute capability major*10 + minor
  bool arch_specific = true;          // sm_90a rather than sm_90 (wgmma-class features)
  int64_t max_shared_bytes = 227 * 1024;  // opt-in dynamic shared memory per block
  bool tma = true;                    // the driver encodes tensor maps (cuTensorMapEncodeTiled)
  std::string arch_flag() const;      // "sm_90a"
};
// The target of a device of this compute capability (shared-memory limit from its generation).
Target target_for(int major, int minor);

// A debug_print of the kernel: its format text and the types of its values. The kernel appends
// records [u32 print index, u32 sequence in its program, i64 program, values...] (values in the
// register type, each padded to 8 bytes) to a buffer whose first two u64 are the bytes used and
// the capacity; the host formats them.
struct DebugPrintInfo {
  std::string text;
  std::vector<ir::Type> operands;
};
inline constexpr int64_t kDebugRecordHeader = 16;

// A tensor map the kernel takes as a __grid_constant__ parameter (after all others, in order): the
// host encodes it at each launch for the ref's device pointer (tensor_map.h). Dimensions innermost
// first; strides in bytes for dimensions 1 and up; the box is the 64-column block of a swizzled
// home (128-byte swizzle).
struct TensorMapSpec {
  int ref = 0;
  DType dtype = DType::bfloat16;
  std::vector<int64_t> dims, byte_strides, box;
};

struct GeneratedKernel {
  std::string source;                 // CUDA C++ for NVRTC
  std::string entry;                  // the __global__ function's name
  int threads = 128;                  // threads per block (one program)
  int64_t shared_bytes = 0;           // dynamic shared memory per block
  int64_t scratch_bytes = 0;          // global scratch per resident program (large tiles)
  int64_t num_programs = 1;           // thread blocks: the product of the parallel grid axes
  std::vector<DebugPrintInfo> prints; // non-empty: the kernel takes a debug buffer parameter
  std::vector<backend::AccessSite> access_sites;  // checked runs: the kernel takes a check record parameter
  bool checked = false;
  std::vector<TensorMapSpec> tensor_maps;  // TMA-loaded tiles (emit_tma.cc)
  // Each block walks programs pl_block, pl_block + blocks, ... (emit_producer.cc): launch no more
  // blocks than can be resident at once.
  bool persistent = false;
  // A persistent kernel whose programs' loops run longer along the axis walked fastest: that axis's
  // length, for the launch to choose a block count that shares the work alike (cuda_backend.cc,
  // balanced_blocks); 0 where the loops run alike.
  int64_t balance_length = 0;
  // Blocks per thread-block cluster (emit_cluster.cc), along the launch grid's x: the grid's x
  // extent must be a multiple of it, and a persistent launch is sized by the resident clusters.
  int cluster = 1;
};

// Throws Error naming the op for anything the backend cannot lower.
GeneratedKernel generate_cuda(const ir::Kernel& kernel, const CompilerParams& params, const Target& target);

}  // namespace palladium::cuda
