// Fused groups lowered to one tiled kernel each: the grid tiles the group's domain (its reduced
// axes whole in every block), an operand of lower rank or with broadcast (size-1) dimensions gets
// blocks of size 1 there (index 0), and each equation applies the kernel language's op of the same
// name to the blocks.
#include <algorithm>
#include <map>
#include <optional>

#include "core/grid_mapping.h"
#include "palladium/control.h"
#include "palladium/lang.h"
#include "palladium/ref.h"
#include "program/families.h"
#include "program/kernel_util.h"
#include "program/lower.h"

namespace palladium::program {

Value apply_elementwise(const Eqn& e, const std::vector<Value>& a, const Shape& block, size_t rank) {
  const Params& q = e.params;
  switch (e.prim) {
    case Prim::neg: return -a[0];
    case Prim::abs: return jnp::abs(a[0]);
    case Prim::exp: return jnp::exp(a[0]);
    case Prim::exp2: return jnp::exp2(a[0]);
    case Prim::log: return jnp::log(a[0]);
    case Prim::log2: return jnp::log2(a[0]);
    case Prim::log1p: return jnp::log1p(a[0]);
    case Prim::sqrt: return jnp::sqrt(a[0]);
    case Prim::rsqrt: return jnp::rsqrt(a[0]);
    case Prim::sin: return jnp::sin(a[0]);
    case Prim::cos: return jnp::cos(a[0]);
    case Prim::tanh: return jnp::tanh(a[0]);
    case Prim::logistic: return jnp::logistic(a[0]);
    case Prim::erf: return jnp::erf(a[0]);
    case Prim::floor: return jnp::floor(a[0]);
    case Prim::ceil: return jnp::ceil(a[0]);
    case Prim::logical_not: return !a[0];
    case Prim::stop_gradient: return a[0];
    case Prim::add: return a[0] + a[1];
    case Prim::sub: return a[0] - a[1];
    case Prim::mul: return a[0] * a[1];
    case Prim::div: return a[0] / a[1];
    case Prim::rem: return a[0] % a[1];
    case Prim::pow: return jnp::pow(a[0], a[1]);
    case Prim::max: return jnp::maximum(a[0], a[1]);
    case Prim::min: return jnp::minimum(a[0], a[1]);
    case Prim::bit_and: return a[0] & a[1];
    case Prim::bit_or: return a[0] | a[1];
    case Prim::bit_xor: return a[0] ^ a[1];
    case Prim::eq: return a[0] == a[1];
    case Prim::ne: return a[0] != a[1];
    case Prim::lt: return a[0] < a[1];
    case Prim::le: return a[0] <= a[1];
    case Prim::gt: return a[0] > a[1];
    case Prim::ge: return a[0] >= a[1];
    case Prim::select: return jnp::where(a[0], a[1], a[2]);
    case Prim::convert: return a[0].astype(q.dtype);
    case Prim::broadcast: return a[0];  // operands broadcast against each other in the block
    case Prim::full: return jnp::full(Shape(rank, 1), q.scalar, q.dtype);
    case Prim::iota: {
      // The block's own positions along the iota dimension, offset by the block's origin.
      const size_t d = static_cast<size_t>(q.axis) + (rank - q.shape.size());
      Shape s(rank, 1);
      s[d] = block[d];
      Value local = jnp::iota(q.dtype, s, static_cast<int64_t>(d));
      return local + (program_id(static_cast<int>(d)) * block[d]).astype(q.dtype);
    }
    default:
      throw InternalError(std::string("lower_elementwise: ") + prim_name(e.prim) + " is not elementwise");
  }
}

namespace {

// The domain tiled with its whole axes in one block: the other axes share what the block budget
// leaves after the whole ones.
Tiling tile_domain(const Shape& domain, const std::vector<int64_t>& whole, int64_t budget) {
  std::vector<bool> is_whole(domain.size(), false);
  int64_t whole_elems = 1;
  for (int64_t a : whole) {
    is_whole[static_cast<size_t>(a)] = true;
    whole_elems *= domain[static_cast<size_t>(a)];
  }
  Shape kept;
  for (size_t d = 0; d < domain.size(); ++d)
    if (!is_whole[d]) kept.push_back(domain[d]);
  const Tiling k = tile(kept, std::max<int64_t>(1, budget / std::max<int64_t>(whole_elems, 1)));
  Tiling t;
  for (size_t d = 0, j = 0; d < domain.size(); ++d) {
    t.block.push_back(is_whole[d] ? domain[d] : k.block[j]);
    t.grid.push_back(is_whole[d] ? 1 : k.grid[j++]);
  }
  return t;
}

// The group's kernel, tiled as `mp` tiles its head matmul where it has one.
KernelStep fused_group_kernel(const Program& p, const std::vector<const Eqn*>& eqns, const FusionGroup& g,
                              const std::string& backend, const Eqn* head, const std::map<int, int>& transposed_from,
                              std::optional<MatmulPlan> mp) {
  const Shape& shape = g.domain;
  const size_t rank = shape.size();
  std::vector<int> head_sources;  // the vars the matmul's refs hold
  Tiling t;
  if (head) {
    for (int i = 0; i < 2; ++i) {
      auto it = transposed_from.find(head->ins[static_cast<size_t>(i)]);
      head_sources.push_back(it == transposed_from.end() ? head->ins[static_cast<size_t>(i)] : it->second);
      (i == 0 ? mp->trans_a : mp->trans_b) = it != transposed_from.end();
    }
    t.block.assign(mp->nb, 1);
    t.block.push_back(mp->bm);
    t.block.push_back(mp->bn);
    t.grid = mp->grid;
  } else {
    t = tile_domain(shape, g.whole, block_budget(backend));
  }
  // Every value's shape at the domain's rank (fusion.cc): reduced and broadcast axes of size 1.
  std::map<int, Shape> embedded = g.embedded;
  for (int v : g.ins) embedded[v] = at_rank(p.type(v).shape, rank);
  auto block_of = [&](int v) {
    Shape b = t.block;
    for (size_t d = 0; d < rank; ++d)
      if (embedded.at(v)[d] == 1) b[d] = 1;
    return b;
  };
  auto broadcast_dims = [&](int v) {
    std::vector<bool> b(rank);
    for (size_t d = 0; d < rank; ++d) b[d] = embedded.at(v)[d] == 1 && shape[d] != 1;
    return b;
  };
  KernelStep step;
  std::vector<BlockSpec> in_specs, out_specs;
  if (head) {  // the matmul's operands first, in its blocks (one ref each, also for x @ x)
    for (int v : head_sources) {
      step.ins.push_back(v);
      step.in_views.push_back(p.type(v).shape);
    }
    in_specs = {mp->lhs_spec(), mp->rhs_spec()};
  }
  for (int v : g.ins) {
    if (head && (v == head_sources[0] || v == head_sources[1])) continue;
    step.ins.push_back(v);
    step.in_views.push_back(embedded.at(v));
    in_specs.push_back(grid_spec(t, broadcast_dims(v)));
  }
  step.outs = g.outs;
  std::vector<ShapeDtype> out_types;
  for (int v : g.outs) {
    out_types.emplace_back(embedded.at(v), p.type(v).dtype);
    out_specs.push_back(grid_spec(t, broadcast_dims(v)));
  }
  std::vector<Eqn> body;
  std::map<int, Shape> reduce_blocks;  // per reduction: its operand's block, and its result's
  std::map<int, DType> reduce_dtypes;  // per reduction: its result's dtype
  for (const Eqn* e : eqns) {
    if (e->prim == Prim::transpose) continue;  // folded into the matmul
    body.push_back(*e);
    if (family_of(e->prim) == Family::reduce) {
      reduce_blocks[e->ins[0]] = block_of(e->ins[0]);
      reduce_blocks[e->outs[0]] = block_of(e->outs[0]);
      reduce_dtypes[e->outs[0]] = p.type(e->outs[0]).dtype;
    }
  }
  std::string name = "fused";
  for (const Eqn& e : body)
    if (e.prim != Prim::reshape) name += std::string("_") + prim_name(e.prim);
  if (name.size() > 48) name = name.substr(0, 48);
  const Shape block = t.block;
  const std::vector<int> ins = step.ins, outs = g.outs;
  const size_t loaded_from = head ? 2 : 0;  // refs read whole (the matmul's are read by it)
  const DType head_dtype = head ? p.type(head->outs[0]).dtype : DType::float32;
  auto kernel = [body, ins, outs, block, rank, reduce_blocks, reduce_dtypes, mp, loaded_from, head_dtype](Refs refs) {
    std::map<int, Value> env;
    for (size_t i = loaded_from; i < ins.size(); ++i) env[ins[i]] = refs[i][all];
    for (const Eqn& e : body) {
      if (e.prim == Prim::matmul) {
        env[e.outs[0]] = mp->compute(refs[0], refs[1]).astype(head_dtype);
        continue;
      }
      if (family_of(e.prim) == Family::reduce) {
        // The operand may be held smaller than its block (broadcast): reduce the whole block.
        const Value v = jnp::broadcast_to(env.at(e.ins[0]), reduce_blocks.at(e.ins[0]));
        env[e.outs[0]] = reduce_tile(e.prim, v, e.params.axes, reduce_dtypes.at(e.outs[0])).reshape(reduce_blocks.at(e.outs[0]));
        continue;
      }
      if (e.prim == Prim::reshape) {  // the identity on embedded shapes
        env[e.outs[0]] = env.at(e.ins[0]);
        continue;
      }
      std::vector<Value> a;
      for (int v : e.ins) a.push_back(env.at(v));
      env[e.outs[0]] = apply_elementwise(e, a, block, rank);
    }
    for (size_t o = 0; o < outs.size(); ++o) {
      const Ref& r = refs[ins.size() + o];
      Value v = env.at(outs[o]);
      if (v.shape() != r.shape()) v = jnp::broadcast_to(v, r.shape());
      store(r, v.astype(r.dtype()));
    }
  };
  step.call = make_kernel(name, kernel, out_types, t.grid, std::move(in_specs), std::move(out_specs), backend, {},
                          mp ? mp->compiler : CompilerParams{});
  return step;
}

}  // namespace

KernelStep lower_fused_group(const Program& p, const std::vector<const Eqn*>& eqns, const FusionGroup& g,
                             const std::string& backend) {
  // A group headed by a matmul is tiled as the matmul is (its whole axes fit one tile: fusion.cc).
  // Transposes of its operands placed before it are folded into its dot: it reads their operands.
  const Eqn* head = nullptr;
  std::map<int, int> transposed_from;  // transposed var -> the var it transposes
  for (const Eqn* e : eqns) {
    if (e->prim == Prim::transpose) { transposed_from[e->outs[0]] = e->ins[0]; continue; }
    if (e->prim == Prim::matmul) head = e;
    break;
  }
  PL_ASSERT(head || transposed_from.empty(), "lower_fused_group: a folded transpose without its matmul");
  if (!head) return fused_group_kernel(p, eqns, g, backend, nullptr, transposed_from, std::nullopt);
  // Where the matmul has several candidate tilings, the kernel is an autotune of one per tiling.
  const std::vector<MatmulPlan> plans = matmul_plans(p.type(head->ins[0]).shape, p.type(head->ins[1]).shape,
                                                     p.type(head->ins[0]).dtype, p.type(head->outs[0]).dtype, backend);
  KernelStep step = fused_group_kernel(p, eqns, g, backend, head, transposed_from, plans[0]);
  if (plans.size() == 1) return step;
  std::vector<std::string> labels{plans[0].label()};
  std::vector<std::shared_ptr<detail::CallImpl>> calls{step.call};
  for (size_t k = 1; k < plans.size(); ++k) {
    labels.push_back(plans[k].label());
    calls.push_back(fused_group_kernel(p, eqns, g, backend, head, transposed_from, plans[k]).call);
  }
  step.call = detail::make_choice(step.call->name(), std::move(labels), std::move(calls));
  return step;
}

}  // namespace palladium::program
