// The Palladium IR: a kernel is a typed SSA program over tiles (rank-N values of static shape),
// with structured control flow (regions) and loads/stores on ref parameters.
//
// Calling convention of an ir::Kernel (what every backend implements):
//  - refs[0 .. num_inputs) are the inputs, then the outputs, in pallas_call order.
//  - The kernel body runs once per point of `grid` (row-major, last axis fastest).
//  - Each ref sees a block of its array: block element (l_0, ..) is array element
//    (origin_0 + l_0, ..), where origin values are scalar int32 values computed at the top of the
//    body from program ids (the traced index_map). Squeezed dimensions have block size 1 and are
//    absent from the kernel-visible ref shape; their index is the origin itself.
//  - Block elements past the array's end are padding: loads there yield poison, stores are dropped.
//  - Stores and atomics write output refs only; inputs are read-only.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "palladium/dtype.h"

namespace palladium::ir {

enum class Op : uint16_t {
#define PL_OP(Name, name, Family) Name,
#include "ir/ops.def"
#undef PL_OP
};
enum class Family : uint8_t { Leaf, Unary, Binary, Compare, Select, Cast, Layout, Reduce, Scan, Dot, Memory, Control, Effect };

const char* op_name(Op op);
Family op_family(Op op);
// Read-modify-write memory ops (every Memory op but Load and Store).
inline bool is_atomic(Op op) { return op_family(op) == Family::Memory && op != Op::Load && op != Op::Store; }

using ValueId = int32_t;

struct Type {
  DType dtype = DType::float32;
  Shape shape;
  bool operator==(const Type&) const = default;
};
std::string type_str(const Type& t);  // "f32[128,64]", "i32[]"

// One dimension of a memory op's index: a scalar index, a slice (size elements `stride` apart
// from the start operand), or a gather: the operand is an integer tile with the access's shape,
// each lane naming its own index (size and stride unused). In an access with gathers, every
// non-scalar dimension is a gather and the access has the tiles' shape.
struct IndexEntry {
  bool scalar = false;
  int64_t size = 1;
  int64_t stride = 1;
  bool gather = false;
  bool operator==(const IndexEntry&) const = default;
};

inline constexpr int64_t kHasMask = 1;
inline constexpr int64_t kHasOther = 2;
inline constexpr int64_t kGather = 4;  // some index entry is a gather (set by the Builder)

struct Region;

struct Inst {
  Op op{};
  std::vector<ValueId> results;
  std::vector<ValueId> operands;
  int64_t i0 = 0, i1 = 0;
  double f = 0.0;
  std::vector<int64_t> ints;
  std::string text;
  std::vector<IndexEntry> index;
  std::vector<Region> regions;
};

struct Region {
  std::vector<ValueId> args;
  std::vector<Inst> body;
};

struct RefParam {
  std::string name;             // "x0" for input 0, "o1" for output 1, or the user's name
  bool is_output = false;
  bool scratch = false;         // an output that is a scratch buffer, dropped after the call
  int operand = 0;              // index among the inputs or among the outputs
  DType dtype = DType::float32;
  Shape array_shape;
  Shape block_shape;            // full rank; squeezed dimensions are 1
  std::vector<bool> squeezed;
  Shape ref_shape;              // what the kernel sees: block_shape without squeezed dimensions
  std::vector<ValueId> origin;  // per array dimension, element offset of the block
};

struct Kernel {
  std::string name;
  Shape grid;
  // Per grid axis, 1 where it is sequential (`arbitrary`): the programs that differ only along
  // such axes run in grid order, one after another. Empty: every axis parallel.
  std::vector<uint8_t> sequential;
  int num_inputs = 0;
  std::vector<RefParam> refs;
  std::vector<Type> types;      // indexed by ValueId
  Region body;
  std::vector<std::pair<int, int>> aliases;  // (input, output)

  const Type& type(ValueId v) const { return types.at(static_cast<size_t>(v)); }
  int num_outputs() const { return static_cast<int>(refs.size()) - num_inputs; }
  bool is_sequential(size_t axis) const { return axis < sequential.size() && sequential[axis] != 0; }
  bool any_sequential() const {
    for (uint8_t s : sequential)
      if (s) return true;
    return false;
  }
  // Programs per chain of sequential programs (1 when every axis is parallel), and the chains.
  int64_t sequential_programs() const {
    int64_t n = 1;
    for (size_t a = 0; a < grid.size(); ++a) n *= is_sequential(a) ? grid[a] : 1;
    return n;
  }
  int64_t parallel_programs() const {
    int64_t n = 1;
    for (size_t a = 0; a < grid.size(); ++a) n *= is_sequential(a) ? 1 : grid[a];
    return n;
  }
};

std::string print(const Kernel& k);
// Whether the instruction, or one nested in its regions, stores, updates memory atomically or prints.
bool has_effects(const Inst& in);
// Whether the instruction, or one nested in its regions, reads one of `values`.
bool reads(const Inst& in, const std::set<ValueId>& values);
// Throws InternalError describing the first broken invariant (a bug in tracing or a pass).
void verify(const Kernel& k);
// Removes instructions without effects whose results nothing reads (block origins count as
// readers), to a fixed point: what a rewrite leaves behind.
void remove_dead_code(Kernel& k);

}  // namespace palladium::ir
