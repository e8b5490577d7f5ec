// cpu codegen: reshape (an alias, no copy), transpose, reductions and cumsum, after the
// interpreter's eval_layout.cc. Broadcast is emitted inside fused elementwise loops.
#include <cmath>

#include "backends/cpu/emitter.h"
#include "palladium/error.h"

namespace palladium::cpu {

namespace {

// Views a tile as [outer, len, inner] around `axis`.
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
};
AxisSplit split_at(const Shape& s, int64_t axis) {
  AxisSplit a;
  for (size_t d = 0; d < s.size(); ++d) {
    const int64_t n = s[d];
    if (static_cast<int64_t>(d) < axis) a.outer *= n;
    else if (static_cast<int64_t>(d) == axis) a.len = n;
    else a.inner *= n;
  }
  return a;
}

std::string extreme(DType t, bool largest) {
  if (is_float(t)) return literal(t, largest ? INFINITY : -INFINITY, 0);
  switch (t) {
    case DType::bool_: return largest ? "true" : "false";
    case DType::int8: return literal(t, 0, largest ? INT8_MAX : INT8_MIN);
    case DType::int16: return literal(t, 0, largest ? INT16_MAX : INT16_MIN);
    case DType::int32: return literal(t, 0, largest ? INT32_MAX : INT32_MIN);
    case DType::int64: return literal(t, 0, largest ? INT64_MAX : INT64_MIN);
    case DType::uint8: return literal(t, 0, largest ? UINT8_MAX : 0);
    case DType::uint32: return literal(t, 0, largest ? static_cast<int64_t>(UINT32_MAX) : 0);
    default: break;
  }
  throw InternalError("cpu codegen: no extreme value for a dtype");
}

}  // namespace

void Emitter::emit_reshape(const ir::Inst& in) {
  const ir::ValueId src = in.operands[0], r = in.results[0];
  const std::string ct = compute_type(type(r).dtype);
  if (kind(r) == ValueKind::Scalar) {
    line("const " + ct + " " + name(r) + " = " + name(src) + (kind(src) == ValueKind::Scalar ? ";" : "[0];"));
  } else if (kind(src) == ValueKind::Scalar) {
    declare_tile(r);
    line(name(r) + "[0] = " + name(src) + ";");
  } else {
    // Row-major data does not move: the result is another name for the operand's array.
    line(ct + "* const " + name(r) + " = " + name(src) + ";");
    alias_root_[r] = root(src);
  }
}

void Emitter::emit_transpose(const ir::Inst& in) {
  const ir::ValueId src = in.operands[0], r = in.results[0];
  const Shape& in_shape = type(src).shape;
  const Shape& out_shape = type(r).shape;
  const std::vector<int64_t> in_strides = row_major_strides(in_shape);
  declare_tile(r);
  std::string dst = "0", from = "0";
  for (size_t d = 0; d < out_shape.size(); ++d) {
    const std::string id = "i" + std::to_string(d);
    open("for (int64_t " + id + " = 0; " + id + " < " + std::to_string(out_shape[d]) + "; ++" + id + ")");
    dst = "(" + dst + ") * " + std::to_string(out_shape[d]) + " + " + id;
    from += " + " + id + " * " + std::to_string(in_strides[static_cast<size_t>(in.ints[d])]);
  }
  line(name(r) + "[" + dst + "] = " + name(src) + "[" + from + "];");
  for (size_t d = 0; d < out_shape.size(); ++d) close();
}

void Emitter::emit_reduce(const ir::Inst& in) {
  const ir::ValueId src = in.operands[0], r = in.results[0];
  const DType st = type(src).dtype, rt = type(r).dtype;
  const AxisSplit a = split_at(type(src).shape, in.i0);
  const int64_t n = numel(type(r).shape);
  std::string out;
  if (kind(r) == ValueKind::Scalar) {
    line(std::string(compute_type(rt)) + " " + name(r) + ";");
    out = "(&" + name(r) + ")";
  } else {
    declare_tile(r);
    out = name(r);
  }
  const std::string sizes = std::to_string(a.outer) + ", " + std::to_string(a.len) + ", " + std::to_string(a.inner);
  if (in.op == ir::Op::ArgMax || in.op == ir::Op::ArgMin) {
    line(std::string("pl_cpu::arg_reduce_axis<") + (in.op == ir::Op::ArgMax ? "true" : "false") + ">(" + name(src) + ", " +
         out + ", " + sizes + ");");
    return;
  }
  if (a.len == 0) {  // an empty sum is 0 (the Builder rejects empty max/min/argmax/argmin axes)
    line("pl_cpu::fill(" + out + ", " + std::to_string(n) + ", " + literal(st, 0, 0) + ");");
    return;
  }
  const char* op = in.op == ir::Op::ReduceSum ? "SumOp" : in.op == ir::Op::ReduceMax ? "MaxOp" : "MinOp";
  const std::string init = in.op == ir::Op::ReduceSum ? literal(st, 0, 0) : extreme(st, in.op == ir::Op::ReduceMin);
  line(std::string("pl_cpu::reduce_axis<") + compute_type(st) + ">(" + name(src) + ", " + out + ", " + sizes + ", " + init +
       ", pl_cpu::" + op + "{});");
  if (rt == DType::float16 || rt == DType::bfloat16) {
    const std::string ptr = kind(r) == ValueKind::Scalar ? out : name(r);
    line("for (int64_t i = 0; i < " + std::to_string(n) + "; ++i) " + ptr + "[i] = " + rounded(rt, ptr + "[i]") + ";");
  }
}

void Emitter::emit_cumsum(const ir::Inst& in) {
  const ir::ValueId src = in.operands[0], r = in.results[0];
  const DType t = type(r).dtype;
  const std::string ct = compute_type(t);
  const AxisSplit a = split_at(type(src).shape, in.i0);
  declare_tile(r);
  line("pl_cpu::cumsum_axis<" + ct + ">(" + name(src) + ", " + name(r) + ", " + std::to_string(a.outer) + ", " +
       std::to_string(a.len) + ", " + std::to_string(a.inner) + ", [](" + ct + " s) { return " + rounded(t, "s") + "; });");
}

}  // namespace palladium::cpu
