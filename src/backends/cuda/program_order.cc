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
//  - A block per program walks the fastest axis backwards where the programs' loops run longer
//    along it (longest_first, below).
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>

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

// The value of integer scalar `v` in the program whose id along `axis` is `pid`, where index
// arithmetic computes it from that id and constants alone; nullopt otherwise.
std::optional<int64_t> Emitter::scalar_at(ir::ValueId v, size_t axis, int64_t pid) const {
  const ir::Inst* d = def(v);
  const DType t = type(v).dtype;
  if (!d || d->results.size() != 1 || !d->regions.empty() || numel(type(v).shape) != 1 ||
      !(t == DType::int8 || t == DType::int16 || t == DType::int32 || t == DType::int64))
    return std::nullopt;
  if (d->op == ir::Op::Const) return d->i0;
  if (d->op == ir::Op::ProgramId) return static_cast<size_t>(d->i0) == axis ? std::optional<int64_t>(pid) : std::nullopt;
  if (d->operands.size() != 2) return std::nullopt;
  const std::optional<int64_t> a = scalar_at(d->operands[0], axis, pid), b = scalar_at(d->operands[1], axis, pid);
  if (!a || !b) return std::nullopt;
  switch (d->op) {
    case ir::Op::Add: return *a + *b;
    case ir::Op::Sub: return *a - *b;
    case ir::Op::Mul: return *a * *b;
    case ir::Op::Div: return *b == 0 ? std::nullopt : std::optional<int64_t>(*a / *b);  // truncating, as lax.div
    case ir::Op::Rem: return *b == 0 ? std::nullopt : std::optional<int64_t>(*a % *b);
    case ir::Op::Min: return std::min(*a, *b);
    case ir::Op::Max: return std::max(*a, *b);
    default: return std::nullopt;
  }
}

// Whether a block per program should walk the axis walked fastest backwards: where the producer's
// loops (or, in a kernel without a producer, its loops with a TMA ring: the head_dim 64 forward at
// blocks 128 x 64, 1% faster so at s8192 causal in each of three rounds, H200, stop 47 job 37) are
// bounded by that program id alone and run more rounds at its last index than at its
// first (the causal forward: q block i runs to key block i), the hardware then starts the longest
// programs first and ends on short ones, instead of ending the launch on the longest (up to a
// program's whole length with SMs idle). Persistent kernels keep their order: their balanced
// stride already walks every index, and reversed they ran about 1% slower (H200, stop 41 job 4:
// causal s2048 d128 0.303/0.301 -> 0.305/0.305 ms). H200, stop 41 job 5, two rounds against
// PALLADIUM_CUDA_LONGEST_FIRST=0 (same binary), causal forward s8192: d128 blocks 128 x 128
// 1.004/1.004 -> 0.984/0.981 ms, 128 x 64 1.153/1.148 -> 1.131/1.125, d64 128 x 128 1.397/1.391
// -> 1.380/1.379, d64 128 x 64 unchanged; forward+backward s8192 causal, seven and eight rounds
// (jobs 6-7): the fastest run 4.181 against 4.211 ms (d128), 5.020 against 5.060 (d64), where the
// non-causal rows, the same kernels on both sides, spread 4%. Stop 29 had found the reversal 15%
// slower at d128 128 x 64 (s2048, before the warp-specialised kernel).
// PALLADIUM_CUDA_LONGEST_FIRST=0 keeps the forward order.
bool Emitter::longest_first() const {
  const char* env = std::getenv("PALLADIUM_CUDA_LONGEST_FIRST");
  if ((env && std::string(env) == "0") || raster_group() > 0) return false;
  const std::optional<std::vector<const ir::Inst*>> varying = ring_loops_along_fastest();
  if (!varying) return false;
  const size_t fastest = program_order().back();
  const int64_t last = k_.grid[fastest] - 1;
  bool longer_last = false;
  for (const ir::Inst* loop : *varying) {
    const ir::ValueId lo = loop->operands[0], hi = loop->operands[1];
    const auto lo0 = scalar_at(lo, fastest, 0), hi0 = scalar_at(hi, fastest, 0);
    const auto lo1 = scalar_at(lo, fastest, last), hi1 = scalar_at(hi, fastest, last);
    if (!lo0 || !hi0 || !lo1 || !hi1 || *hi1 - *lo1 < *hi0 - *lo0) return false;
    longer_last = longer_last || *hi1 - *lo1 > *hi0 - *lo0;
  }
  return longer_last;
}

std::string Emitter::program_id_decode(bool reverse_fastest) const {
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
    if (reverse_fastest && j == plain - 1) {
      src << "  const int pl_pid" << d << " = " << k_.grid[d] - 1 << " - (int)(pl_rest % " << k_.grid[d] << "ll);\n";
      src << "  pl_rest /= " << k_.grid[d] << "ll;\n";
      continue;
    }
    src << "  const int pl_pid" << d << " = (int)(pl_rest % " << k_.grid[d] << "ll);\n";
    src << "  pl_rest /= " << k_.grid[d] << "ll;\n";
  }
  src << "  (void)pl_rest;\n";
  return src.str();
}

}  // namespace palladium::cuda
