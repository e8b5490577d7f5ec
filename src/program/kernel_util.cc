// Tiling and generated-call helpers for the program lowering.
#include "program/kernel_util.h"

#include <algorithm>

#include "palladium/error.h"
#include "palladium/lang.h"

namespace palladium::program {

Shape at_rank(const Shape& s, size_t r) {
  PL_ASSERT(s.size() <= r, "at_rank: a rank-", s.size(), " shape at rank ", r);
  Shape out(r - s.size(), 1);
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

Tiling tile(const Shape& shape, int64_t budget) {
  Tiling t;
  t.block.assign(shape.size(), 1);
  t.grid.assign(shape.size(), 1);
  int64_t rest = std::max<int64_t>(budget, 1);
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t b = std::max<int64_t>(1, std::min(shape[d], rest));
    t.block[d] = b;
    t.grid[d] = cdiv(shape[d], b);
    rest = std::max<int64_t>(1, rest / b);
  }
  return t;
}

BlockSpec make_spec(std::vector<int64_t> block, std::function<Indexer(std::span<const Value>)> map, size_t grid_rank) {
  std::vector<BlockDim> dims(block.begin(), block.end());
  return BlockSpec::from_parts(std::move(dims), std::move(map), 1u << grid_rank);
}

BlockSpec grid_spec(const Tiling& t, const std::vector<bool>& broadcast) {
  std::vector<int64_t> block = t.block;
  for (size_t d = 0; d < block.size(); ++d)
    if (broadcast[d]) block[d] = 1;
  return make_spec(block, [broadcast](std::span<const Value> g) {
    Indexer idx;
    for (size_t d = 0; d < broadcast.size(); ++d) idx.args.emplace_back(broadcast[d] ? Value(0) : g[d]);
    return idx;
  }, t.grid.size());
}

std::shared_ptr<detail::CallImpl> make_kernel(std::string name, std::function<void(Refs)> body,
                                              std::vector<ShapeDtype> outs, Shape grid, std::vector<BlockSpec> in_specs,
                                              std::vector<BlockSpec> out_specs, const std::string& backend,
                                              std::vector<std::pair<int, int>> aliases, CompilerParams compiler) {
  CallOptions o;
  o.name = std::move(name);
  o.grid = std::move(grid);
  o.in_specs = std::move(in_specs);
  o.out_specs = std::move(out_specs);
  o.backend = backend;
  o.input_output_aliases = std::move(aliases);
  o.compiler_params = compiler;
  detail::KernelFn fn{std::move(body), detail::kAnyArity};
  return detail::make_call(std::move(fn), std::move(outs), std::move(o));
}

}  // namespace palladium::program
