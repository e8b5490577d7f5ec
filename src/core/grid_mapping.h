// Canonical description of one pallas_call for given input types: the grid, one BlockSpec per
// input and output with explicit block shapes and index maps, and the program_id offset that vmap
// adds. vmap builds its description from the inner call's (Pallas's batching rule).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "palladium/call.h"

namespace palladium::ir {
struct Kernel;
}

namespace palladium::detail {

class CallImpl {
 public:
  // A pallas_call ...
  KernelFn kernel;
  std::vector<ShapeDtype> out_shapes;
  CallOptions options;
  // ... or a vmap of another callable ...
  std::shared_ptr<CallImpl> inner;
  std::vector<std::optional<int64_t>> in_axes;
  // ... or a choice among calls of one function, timed once per input signature and device
  // (autotune.cc). Whatever reads a call's structure (its grid, BlockSpecs, kernel) reads the
  // first candidate's: every candidate computes the same function.
  std::vector<std::shared_ptr<CallImpl>> choices;
  std::vector<std::string> choice_labels;
  std::string choice_name;
  struct Tuning;
  std::shared_ptr<Tuning> tuning;

  const CallImpl& base() const { return inner ? inner->base() : !choices.empty() ? choices[0]->base() : *this; }
  std::string name() const {
    if (!choices.empty()) return choice_name;
    return base().options.name.empty() ? "kernel" : base().options.name;
  }

  struct Cache;
  std::shared_ptr<Cache> cache;
};

using InputTypes = std::vector<std::optional<ShapeDtype>>;  // nullopt: a None input

InputTypes types_of(const std::vector<Array>& inputs);  // undefined inputs are None
// The backend a call runs on: interpret, its options' backend, else the default.
std::string choose_backend(const CallOptions& o);
// "cuda|bfloat16(8, 4)|none": the backend and input types a compiled call is cached under.
std::string signature(const InputTypes& in, const std::string& backend_name);

// The kernel IR `call` traces for these inputs (undefined ones are None), as printed: what the
// call computes and how (autotune keys its disk entries by it).
std::string kernel_text(const CallImpl& call, const std::vector<Array>& inputs);

struct CallDesc {
  std::string name;
  Shape grid;
  std::vector<uint8_t> sequential;    // per grid axis: 1 where the axis is `arbitrary`
  InputTypes inputs;
  std::vector<BlockSpec> in_specs;    // canonical: explicit shape and index map
  // The call's outputs, then one per scratch buffer (num_scratch of them): a block per point of
  // the parallel grid axes, which the call drops after the run.
  std::vector<ShapeDtype> outputs;
  std::vector<BlockSpec> out_specs;
  size_t num_scratch = 0;
  size_t num_results() const { return outputs.size() - num_scratch; }
  std::vector<std::pair<int, int>> aliases;
  int program_id_offset = 0;
  int num_prefetch = 0;  // the first inputs, whole arrays that the index maps read
};

CallDesc describe(const CallImpl& call, const InputTypes& inputs);
// A scratch buffer of type `s` as an extra output of the call: one block per point of the parallel
// grid axes, the same block for every program of a chain along the sequential axes (so it
// persists through them). Used for scratch_shapes and for run_scoped's buffers.
std::pair<ShapeDtype, BlockSpec> scratch_layout(const CallDesc& d, const ShapeDtype& s);
// The kernel IR of one call for a description (call.cc); the partitioner reads its index maps.
ir::Kernel trace_kernel(const CallImpl& call, const CallDesc& d);

}  // namespace palladium::detail
