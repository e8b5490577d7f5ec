// The partitioner's model (docs/architecture.md, "Sharding"): a Sharding names, per dimension of
// an array, the mesh axes that split it (major first); axes it does not name replicate it. Every
// value of one partitioned program lives on the same mesh.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "palladium/sharding.h"
#include "program/executor.h"
#include "program/program.h"

namespace palladium::sharding {

struct Sharding {
  std::shared_ptr<const Mesh> mesh;
  std::vector<std::vector<int>> dims;  // per dimension: mesh axis indices, major first

  static Sharding replicated(std::shared_ptr<const Mesh> mesh, size_t rank);
  int64_t pieces(size_t d) const;  // how many pieces dimension d is cut into
  Shape local_shape(const Shape& global) const;
  // Which piece of dimension d the device at mesh `position` holds.
  int64_t piece_index(size_t d, int64_t position) const;
  bool operator==(const Sharding& o) const { return dims == o.dims; }
  std::string str() const;  // "(data, None)"
};

// A named sharding as a Sharding over its mesh; `rank` checks the spec's length. `what` names the
// caller in errors.
Sharding from_named(const NamedSharding& s, size_t rank, const std::string& what);
NamedSharding to_named(const Sharding& s);

// The devices of a mesh group: those sharing this position's coordinates off `axes`, ordered by
// their coordinates on `axes` (the first major). `index` receives this position's place in it.
std::vector<int64_t> group_of(const Mesh& mesh, const std::vector<int>& axes, int64_t position, int64_t* index);

// The piece of a host array that the device at `position` holds, and the inverse.
Array piece_of(const Array& host, const Sharding& s, int64_t position);
Array assemble(const Shape& global, DType dtype, const Sharding& s, const std::vector<Array>& pieces);
// Block `index` of `count` equal blocks of host array x along `axis`, and the inverse: host arrays
// joined along `axis`.
Array take_block(const Array& x, size_t axis, int64_t index, int64_t count);
Array join_blocks(const std::vector<Array>& parts, size_t axis);
// Pieces of x (host or sharded) laid out as `s`.
std::vector<Array> split(const Array& x, const Sharding& s);
Array make_sharded(const Shape& global, DType dtype, const Sharding& s, std::vector<Array> pieces);

// ---- propagation and partitioning (propagate.cc, partition.cc) ----
// One index space shared by dimensions of an equation's operands and results: (value, dim) where
// value < number of operands names an operand, else a result (value - operands).
struct Factor {
  std::vector<std::pair<int, int>> dims;
  bool contracting = false;  // in operands only: split, it leaves partial results to combine
  int grid_axis = -1;        // pallas_call: the grid axis whose programs the factor's blocks follow
};
using FactorRule = std::vector<Factor> (*)(const program::Eqn& e, const program::Program& p);
FactorRule factor_rule(program::Prim p);
// A pallas_call's grid axes (indexed by axis) and the operand and result dimensions whose blocks
// each follows, where its programs along the axis are independent (empty: not splittable); for
// `call` (not an autotune) bound by equation `e` of `p`.
std::vector<std::vector<std::pair<int, int>>> pallas_grid_dims(const detail::CallImpl* call,
                                                               const program::Eqn& e, const program::Program& p);
// How partial results of a contracting factor combine: "sum", "max", "min".
const char* partial_reduction(program::Prim p);

// The sharding of every var of `p` (inputs given; outputs where wanted; constraints inside).
std::vector<Sharding> propagate(const program::Program& p, const std::vector<Sharding>& inputs,
                                const std::vector<std::optional<Sharding>>& outputs,
                                const std::shared_ptr<const Mesh>& mesh);

struct Partitioned {
  program::Program local;             // one SPMD program over local shapes, with collectives
  std::vector<Sharding> in, out;      // of its inputs and outputs
  std::vector<Sharding> global_vars;  // the propagated sharding of every var of the global program
};
Partitioned partition(const program::Program& global, const std::vector<Sharding>& inputs,
                      const std::vector<std::optional<Sharding>>& outputs, const std::shared_ptr<const Mesh>& mesh);

// What sharding_constraint's params.callee holds: the spec as the user gave it (a counts spec is
// resolved against the call's mesh after tracing) or a NamedSharding.
struct ConstraintSpec {
  PartitionSpec spec;
  std::optional<NamedSharding> named;
};

// ---- running a per-device program (spmd.cc) ----
// The per-device program compiled for each device of the mesh (virtual CPU devices share one;
// each GPU gets its own). Collectives between GPUs go through the in-process engine (host copies)
// until the NCCL engine exists.
using SpmdExecutable = std::vector<std::shared_ptr<program::Executable>>;
SpmdExecutable compile_spmd(const program::Program& local, const Mesh& mesh);
// Runs it on every device of `mesh`, one thread each: inputs[position] are that device's Arrays;
// returns each device's results. A failure on any device fails the call on all of them.
std::vector<std::vector<Array>> run_spmd(const SpmdExecutable& exe, const std::shared_ptr<const Mesh>& mesh,
                                         const std::vector<std::vector<Array>>& inputs, const std::string& what);

}  // namespace palladium::sharding
