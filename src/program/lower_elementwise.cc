// Elementwise families lowered to one tiled kernel per fused group: the grid tiles the result
// shape, an operand of lower rank or with broadcast (size-1) dimensions gets blocks of size 1 there
// (index 0), and each equation applies the kernel language's op of the same name to the blocks.
#include <map>

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

KernelStep lower_elementwise_group(const Program& p, const std::vector<const Eqn*>& eqns, const std::vector<int>& ins,
                                   const std::vector<int>& outs, const std::string& backend) {
  const Shape shape = p.type(outs.at(0)).shape;
  const size_t rank = shape.size();
  const Tiling t = tile(shape, block_budget(backend));
  KernelStep step;
  step.ins = ins;
  step.outs = outs;
  std::vector<BlockSpec> in_specs, out_specs;
  for (int v : ins) {
    Shape view(rank - p.type(v).shape.size(), 1);
    for (int64_t d : p.type(v).shape) view.push_back(d);
    step.in_views.push_back(view);
    std::vector<bool> broadcast(rank);
    for (size_t d = 0; d < rank; ++d) broadcast[d] = view[d] == 1 && shape[d] != 1;
    in_specs.push_back(grid_spec(t, broadcast));
  }
  std::vector<ShapeDtype> out_types;
  for (int v : outs) {
    out_types.emplace_back(shape, p.type(v).dtype);
    out_specs.push_back(grid_spec(t, std::vector<bool>(rank, false)));
  }
  std::vector<Eqn> body;
  for (const Eqn* e : eqns) body.push_back(*e);
  std::string name = "fused";
  for (const Eqn& e : body) name += std::string("_") + prim_name(e.prim);
  if (name.size() > 48) name = name.substr(0, 48);
  const Shape block = t.block;
  auto kernel = [body, ins, outs, block, rank](Refs refs) {
    std::map<int, Value> env;
    for (size_t i = 0; i < ins.size(); ++i) env[ins[i]] = refs[i][all];
    for (const Eqn& e : body) {
      std::vector<Value> a;
      for (int v : e.ins) a.push_back(env.at(v));
      env[e.outs[0]] = apply_elementwise(e, a, block, rank);
    }
    for (size_t o = 0; o < outs.size(); ++o) {
      const Ref& r = refs[ins.size() + o];
      Value v = env.at(outs[o]);
      if (v.shape() != r.shape()) v = jnp::broadcast_to(v, r.shape());
      store(r, v);
    }
  };
  step.call = make_kernel(name, kernel, out_types, t.grid, std::move(in_specs), std::move(out_specs), backend);
  return step;
}

}  // namespace palladium::program
