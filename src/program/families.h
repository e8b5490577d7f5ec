// Op families: the shape/dtype rule of every primitive (shape_rules.cc) and the payloads that
// call-like primitives carry in their params (custom_vjp's functions).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "program/program.h"

namespace palladium::program {

enum class Family : uint8_t {
  unary, binary, compare, select, convert, broadcast, full, iota, reduce, argreduce, matmul, reshape,
  transpose, concatenate, slice, pad, dynamic_slice, dynamic_update_slice, pallas_call, custom_vjp,
  scan, while_loop, cond, constraint, collective
};
Family family_of(Prim p);
// A generated kernel takes at most 24 refs: a concatenate of more operands runs as a tree.
constexpr size_t kMaxConcatOperands = 16;

// Fusible into one generated elementwise kernel.
bool is_elementwise(Prim p);

// The result types of `prim` on operands of these types; a user Error naming the op otherwise.
std::vector<Type> infer_types(Prim prim, const Params& params, const std::vector<Type>& ins);

// NumPy's broadcast of two shapes; an Error naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// JAX's promotion of two dtypes (the kernel language's rule).
DType promote_types(DType a, DType b);

using ArrayFn = std::function<std::vector<Array>(const std::vector<Array>&)>;

// custom_vjp's payload: fwd (outputs then residuals) and bwd (residuals, output cotangents) ->
// input cotangents. regions[0] of the equation is the primal, traced on the operands' types.
struct CustomVjp {
  std::string name;
  ArrayFn fwd;
  std::function<std::vector<Array>(const std::vector<Array>& residuals, const std::vector<Array>& cts)> bwd;
};

}  // namespace palladium::program
