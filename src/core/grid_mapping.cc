#include "core/grid_mapping.h"

#include "palladium/error.h"

namespace palladium::detail {
namespace {

BlockSpec whole_block(const Shape& shape) {
  std::vector<BlockDim> dims(shape.begin(), shape.end());
  const size_t rank = shape.size();
  return BlockSpec::from_parts(
      dims, [rank](std::span<const Value>) { return Indexer(std::vector<IndexArg>(rank, IndexArg(0))); }, kAnyArity);
}

BlockSpec canonical(const BlockSpec& spec, const Shape& shape) {
  if (spec.whole_array()) return whole_block(shape);
  if (!spec.has_index_map()) {
    const size_t rank = spec.block_shape().size();
    return BlockSpec::from_parts(
        spec.block_shape(), [rank](std::span<const Value>) { return Indexer(std::vector<IndexArg>(rank, IndexArg(0))); },
        kAnyArity);
  }
  return spec;
}

}  // namespace

std::pair<ShapeDtype, BlockSpec> scratch_layout(const CallDesc& d, const ShapeDtype& s) {
  Shape shape;
  std::vector<BlockDim> block;
  std::vector<size_t> parallel;
  for (size_t a = 0; a < d.grid.size(); ++a) {
    if (d.sequential[a]) continue;
    parallel.push_back(a);
    shape.push_back(d.grid[a]);
    block.emplace_back(None);
  }
  for (int64_t n : s.shape) {
    shape.push_back(n);
    block.emplace_back(n);
  }
  const size_t rank = s.shape.size();
  auto map = [parallel, rank](std::span<const Value> g) {
    std::vector<IndexArg> args;
    for (size_t a : parallel) args.emplace_back(g[a]);
    for (size_t k = 0; k < rank; ++k) args.emplace_back(0);
    return Indexer(std::move(args));
  };
  return {ShapeDtype(shape, s.dtype), BlockSpec::from_parts(block, map, d.grid.size() < 32 ? 1u << d.grid.size() : kAnyArity)};
}

namespace {

void add_scratch(CallDesc& d, const std::vector<ShapeDtype>& scratch) {
  for (const ShapeDtype& s : scratch) {
    auto [array, spec] = scratch_layout(d, s);
    d.outputs.push_back(std::move(array));
    d.out_specs.push_back(std::move(spec));
    ++d.num_scratch;
  }
}

CallDesc describe_base(const CallImpl& c, const InputTypes& inputs) {
  const CallOptions& o = c.options;
  CallDesc d;
  d.name = c.name();
  d.grid = o.grid;
  d.inputs = inputs;
  d.outputs = c.out_shapes;
  d.aliases = o.input_output_aliases;
  const std::string where = "pallas_call '" + d.name + "': ";
  for (int64_t g : d.grid) PL_CHECK(g > 0, where, "grid ", shape_str(d.grid), " has a dimension that is not positive");
  PL_CHECK(o.dimension_semantics.empty() || o.dimension_semantics.size() == d.grid.size(), where,
           "dimension_semantics has ", o.dimension_semantics.size(), " entries but the grid ", shape_str(d.grid), " has rank ",
           d.grid.size());
  d.sequential.assign(d.grid.size(), 0);
  for (size_t a = 0; a < o.dimension_semantics.size(); ++a)
    d.sequential[a] = o.dimension_semantics[a] == DimensionSemantics::arbitrary ? 1 : 0;
  d.num_prefetch = o.num_scalar_prefetch;
  PL_CHECK(d.num_prefetch >= 0 && d.num_prefetch <= static_cast<int>(inputs.size()), where, "num_scalar_prefetch is ",
           d.num_prefetch, " but the call got ", inputs.size(), " inputs");
  for (int i = 0; i < d.num_prefetch; ++i)
    PL_CHECK(inputs[static_cast<size_t>(i)] && is_integer(inputs[static_cast<size_t>(i)]->dtype), where, "scalar-prefetch input ",
             i, " must be an integer array, got ",
             inputs[static_cast<size_t>(i)] ? std::string(dtype_name(inputs[static_cast<size_t>(i)]->dtype)) : std::string("None"));
  const size_t blocked = inputs.size() - static_cast<size_t>(d.num_prefetch);  // the inputs in_specs describes
  PL_CHECK(o.in_specs.empty() || o.in_specs.size() == blocked, where, "in_specs has ", o.in_specs.size(),
           " entries but the call got ", blocked, " inputs", d.num_prefetch ? " besides its scalar-prefetch ones" : "");
  PL_CHECK(o.out_specs.empty() || o.out_specs.size() == d.outputs.size(), where, "out_specs has ", o.out_specs.size(),
           " entries but there are ", d.outputs.size(), " outputs");
  PL_CHECK(!d.outputs.empty(), where, "needs at least one output shape");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t n = static_cast<size_t>(d.num_prefetch);
    BlockSpec s = o.in_specs.empty() || i < n ? BlockSpec() : o.in_specs[i - n];
    d.in_specs.push_back(inputs[i] ? canonical(s, inputs[i]->shape) : s);
  }
  for (size_t i = 0; i < d.outputs.size(); ++i)
    d.out_specs.push_back(canonical(o.out_specs.empty() ? BlockSpec() : o.out_specs[i], d.outputs[i].shape));
  add_scratch(d, o.scratch_shapes);
  std::vector<int> aliased(d.num_results(), -1);
  for (auto [in, out] : d.aliases) {
    if (out >= 0 && out < static_cast<int>(d.num_results())) {
      PL_CHECK(aliased[static_cast<size_t>(out)] < 0, where, "output ", out, " is aliased to both input ",
               aliased[static_cast<size_t>(out)], " and input ", in);
      aliased[static_cast<size_t>(out)] = in;
    }
    PL_CHECK(in >= 0 && in < static_cast<int>(inputs.size()) && out >= 0 && out < static_cast<int>(d.num_results()),
             where, "input_output_aliases entry (", in, ", ", out, ") is out of range");
    PL_CHECK(inputs[static_cast<size_t>(in)] && *inputs[static_cast<size_t>(in)] == d.outputs[static_cast<size_t>(out)], where,
             "input ", in, " is aliased to output ", out, " but their shapes or dtypes differ");
  }
  return d;
}

CallDesc describe_vmap(const CallImpl& c, const InputTypes& inputs) {
  const std::string where = "vmap of pallas_call '" + c.name() + "': ";
  std::vector<std::optional<int64_t>> axes = c.in_axes;
  if (axes.empty()) axes.assign(inputs.size(), 0);
  PL_CHECK(axes.size() == inputs.size(), where, "in_axes has ", axes.size(), " entries but the call got ",
           inputs.size(), " inputs");
  int64_t batch = -1;
  InputTypes inner_inputs = inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!axes[i] || !inputs[i]) { axes[i].reset(); continue; }
    const Shape& s = inputs[i]->shape;
    int64_t a = *axes[i] < 0 ? *axes[i] + static_cast<int64_t>(s.size()) : *axes[i];
    PL_CHECK(a >= 0 && a < static_cast<int64_t>(s.size()), where, "in_axes[", i, "] = ", *axes[i],
             " is out of range for input ", i, " of shape ", shape_str(s));
    axes[i] = a;
    PL_CHECK(batch < 0 || batch == s[static_cast<size_t>(a)], where, "input ", i, " has batch size ",
             s[static_cast<size_t>(a)], " but an earlier input has ", batch);
    batch = s[static_cast<size_t>(a)];
    inner_inputs[i]->shape.erase(inner_inputs[i]->shape.begin() + a);
  }
  PL_CHECK(batch >= 0, where, "no input is batched (every in_axes entry is None)");

  CallDesc inner = describe(*c.inner, inner_inputs);
  // Scalar-prefetch inputs stay whole and shared by the batch: the index maps read them as given.
  for (int i = 0; i < inner.num_prefetch; ++i)
    PL_CHECK(!axes[static_cast<size_t>(i)], where, "scalar-prefetch input ", i,
             " must be unbatched (in_axes None): every batch element's index maps read the same array");
  for (auto [in, out] : inner.aliases)
    PL_CHECK(axes[static_cast<size_t>(in)] == 0, where, "input ", in, " is aliased to output ", out,
             ", so it must be batched along axis 0 (outputs are), but its in_axes entry is ",
             axes[static_cast<size_t>(in)] ? std::to_string(*axes[static_cast<size_t>(in)]) : std::string("None"));
  CallDesc d = inner;
  d.inputs = inputs;
  d.grid.insert(d.grid.begin(), batch);
  d.sequential.insert(d.sequential.begin(), 0);  // the batch axis is parallel
  d.program_id_offset = inner.program_id_offset + 1;
  auto batched = [](const BlockSpec& s, int64_t axis) {
    std::vector<BlockDim> shape = s.block_shape();
    shape.insert(shape.begin() + axis, BlockDim(None));
    auto map = [m = s.index_map(), axis](std::span<const Value> g) {
      Indexer r = m(g.subspan(1));
      r.args.insert(r.args.begin() + axis, IndexArg(g[0]));
      return r;
    };
    uint32_t arity = s.arity_mask() == kAnyArity ? kAnyArity : s.arity_mask() << 1;
    return BlockSpec::from_parts(shape, map, arity);
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) continue;
    const BlockSpec& s = inner.in_specs[i];
    if (axes[i]) {
      d.in_specs[i] = batched(s, *axes[i]);
    } else {
      uint32_t arity = s.arity_mask() == kAnyArity ? kAnyArity : s.arity_mask() << 1;
      d.in_specs[i] = BlockSpec::from_parts(
          s.block_shape(), [m = s.index_map()](std::span<const Value> g) { return m(g.subspan(1)); }, arity);
    }
  }
  for (size_t o = 0; o < d.outputs.size(); ++o) {
    d.outputs[o].shape.insert(d.outputs[o].shape.begin(), batch);
    d.out_specs[o] = batched(inner.out_specs[o], 0);
  }
  return d;
}

}  // namespace

CallDesc describe(const CallImpl& call, const InputTypes& inputs) {
  if (!call.choices.empty()) return describe(*call.choices[0], inputs);  // an autotune: as its first candidate
  return call.inner ? describe_vmap(call, inputs) : describe_base(call, inputs);
}

}  // namespace palladium::detail
