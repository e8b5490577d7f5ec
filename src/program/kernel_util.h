// Helpers for building generated pallas_calls: tiling a shape into blocks, BlockSpecs that follow
// the grid, and the call itself.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "palladium/call.h"

namespace palladium::program {

struct Tiling {
  Shape block;  // block shape, one entry per dimension of the tiled shape
  Shape grid;   // cdiv(shape, block)
};
// `s` with leading size-1 dimensions up to rank r >= rank(s): NumPy's alignment for broadcasting.
Shape at_rank(const Shape& s, size_t r);

// Blocks of at most `budget` elements, filled from the last dimension (contiguous) outwards.
Tiling tile(const Shape& shape, int64_t budget);

// A BlockSpec over a grid of rank(t) whose block d is t.block[d] at grid index d, or size 1 at
// index 0 where `broadcast[d]` (a size-1 operand dimension).
BlockSpec grid_spec(const Tiling& t, const std::vector<bool>& broadcast);
// A BlockSpec from explicit block sizes and an index map over the grid indices.
BlockSpec make_spec(std::vector<int64_t> block, std::function<Indexer(std::span<const Value>)> map, size_t grid_rank);

std::shared_ptr<detail::CallImpl> make_kernel(std::string name, std::function<void(Refs)> body,
                                              std::vector<ShapeDtype> outs, Shape grid, std::vector<BlockSpec> in_specs,
                                              std::vector<BlockSpec> out_specs, const std::string& backend,
                                              std::vector<std::pair<int, int>> aliases = {},
                                              CompilerParams compiler = {});

}  // namespace palladium::program
