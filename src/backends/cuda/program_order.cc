// The order in which a kernel's blocks walk its programs. The parallel programs are independent,
// so any order is theirs; the one chosen decides which input blocks the programs running at once
// share in L2. Blocks are dispatched in index order, so the fastest-varying axis should be the
// one along which the inputs' blocks stay the same:
//  - By default, the parallel axis along which the most input bytes are shared (inputs whose block
//    index does not depend on it, by their block sizes) is walked fastest, when it shares strictly
//    more than the last axis does. The attention forward's grid (q blocks, batch, heads) then walks
//    the q blocks of one head together, and they read that head's K and V from L2: on an H100 the
//    forward d128 s2048 read about nine times its inputs from DRAM in the row-major order (Nsight
//    Compute, DRAM throughput 87%, stop 29).
//  - A warp-specialised kernel (a matmul's K loop: each program reads a row block of one operand
//    and a column block of the other) walks its two innermost parallel axes in groups of `group`
//    along the outer one, so that the programs running at once share fewer, more reused operand
//    blocks (PALLADIUM_CUDA_RASTER_GROUP, 0 for the plain order).
// PALLADIUM_CUDA_PROGRAM_ORDER=0 keeps the row-major order (the last axis fastest) everywhere.
// Tried and not kept: walking an axis backwards where the programs' loops run longer along it
// (causal attention, longest first). H100, stop 29 job 7: the forward at blocks 128 x 128 within
// 2%, at 128 x 64 with d128 15% slower, the forward+backward 1-2% slower.
#include <algorithm>
#include <cstdlib>
#include <functional>

#include "backends/cuda/emitter.h"

namespace palladium::cuda {
namespace {

bool program_order_enabled() {
  const char* env = std::getenv("PALLADIUM_CUDA_PROGRAM_ORDER");
  return !(env && std::string(env) == "0");
}

}  // namespace

// The grid axes whose program ids `v` is computed from (every axis for values read from memory,
// such as scalar-prefetch indices).
std::set<size_t> Emitter::program_axes_of(ir::ValueId v) const {
  std::set<size_t> axes;
  std::set<ir::ValueId> seen;
  std::function<void(ir::ValueId)> visit = [&](ir::ValueId x) {
    if (!seen.insert(x).second) return;
    const ir::Inst* in = def(x);
    if (!in) return;
    if (in->op == ir::Op::ProgramId || in->op == ir::Op::NumPrograms) {
      if (in->op == ir::Op::ProgramId) axes.insert(static_cast<size_t>(in->i0));
      return;
    }
    if (ir::op_family(in->op) == ir::Family::Memory)
      for (size_t d = 0; d < k_.grid.size(); ++d) axes.insert(d);
    for (ir::ValueId o : in->operands) visit(o);
  };
  visit(v);
  return axes;
}

std::set<size_t> Emitter::program_axes_of(const std::vector<ir::ValueId>& vs) const {
  std::set<size_t> axes;
  for (ir::ValueId v : vs) {
    const std::set<size_t> a = program_axes_of(v);
    axes.insert(a.begin(), a.end());
  }
  return axes;
}

std::vector<size_t> Emitter::program_order() const {
  std::vector<size_t> parallel;
  for (size_t d = 0; d < k_.grid.size(); ++d)
    if (!k_.is_sequential(d)) parallel.push_back(d);
  if (!program_order_enabled() || raster_groups() || parallel.size() < 2) return parallel;
  std::map<size_t, int64_t> shared;  // axis -> input bytes per program that do not depend on it
  for (const ir::RefParam& p : k_.refs) {
    if (p.is_output) continue;
    const std::set<size_t> depends = program_axes_of(p.origin);
    const int64_t bytes = numel(p.block_shape) * itemsize(p.dtype);
    for (size_t d : parallel)
      if (!depends.count(d) && k_.grid[d] > 1) shared[d] += bytes;
  }
  size_t best = parallel.back();
  for (size_t d : parallel)
    if (shared[d] > shared[best]) best = d;
  if (best != parallel.back()) {
    parallel.erase(std::find(parallel.begin(), parallel.end(), best));
    parallel.push_back(best);
  }
  return parallel;
}

// The rows of a raster group (0 where the programs are walked row-major).
int64_t Emitter::raster_group() const {
  const std::vector<size_t> parallel = program_order();
  int64_t group = 8;
  if (const char* env = std::getenv("PALLADIUM_CUDA_RASTER_GROUP"); env && *env) group = std::atoll(env);
  const bool on = program_order_enabled() && raster_groups() && group > 1 && parallel.size() >= 2 &&
                  k_.grid[parallel[parallel.size() - 2]] > 1;
  return on ? group : 0;
}

// The one grid axis along which programs 2m and 2m + 1 differ in the walk above, or -1 where
// some pair differs along another (or holds no second program). Raster groups of an even height
// over an even number of rows pair two rows of one column; the row-major walk pairs two
// neighbours along the last axis where it has an even length.
int Emitter::pair_axis() const {
  const std::vector<size_t> parallel = program_order();
  if (parallel.empty()) return -1;
  if (const int64_t group = raster_group(); group > 0) {
    const size_t rows = parallel[parallel.size() - 2];
    return group % 2 == 0 && k_.grid[rows] % 2 == 0 ? static_cast<int>(rows) : -1;
  }
  const size_t last = parallel.back();
  return k_.grid[last] % 2 == 0 ? static_cast<int>(last) : -1;
}

std::string Emitter::program_id_decode() const {
  const std::vector<size_t> parallel = program_order();  // outermost first
  const int64_t group = raster_group();
  std::ostringstream src;
  size_t plain = parallel.size();
  if (group > 0) {
    const size_t a = parallel[plain - 2], b = parallel[plain - 1];
    const int64_t rows = k_.grid[a], cols = k_.grid[b], span = group * cols;
    src << "  const long long pl_tile = pl_rest % " << rows * cols << "ll;\n";
    src << "  pl_rest /= " << rows * cols << "ll;\n";
    src << "  const long long pl_first = (pl_tile / " << span << "ll) * " << group << "ll;\n";
    src << "  const long long pl_height = " << rows << "ll - pl_first < " << group << "ll ? " << rows
        << "ll - pl_first : " << group << "ll;\n";
    src << "  const int pl_pid" << a << " = (int)(pl_first + (pl_tile % " << span << "ll) % pl_height);\n";
    src << "  const int pl_pid" << b << " = (int)((pl_tile % " << span << "ll) / pl_height);\n";
    plain -= 2;
  }
  for (size_t j = plain; j-- > 0;) {
    const size_t d = parallel[j];
    src << "  const int pl_pid" << d << " = (int)(pl_rest % " << k_.grid[d] << "ll);\n";
    src << "  pl_rest /= " << k_.grid[d] << "ll;\n";
  }
  src << "  (void)pl_rest;\n";
  return src.str();
}

}  // namespace palladium::cuda
