// cpu codegen: dtypes and literals, elementwise expressions (the interpreter's eval_elementwise.cc
// rules, in C++ of the compute types), scalar ops, and fused elementwise loops.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backends/common/int_bits.h"
#include "backends/common/libm_ops.h"
#include "backends/cpu/emitter.h"
#include "palladium/error.h"

namespace palladium::cpu {

const char* compute_type(DType t) {
  switch (t) {
    case DType::bool_: return "bool";
    case DType::int8: return "int8_t";
    case DType::int16: return "int16_t";
    case DType::int32: return "int32_t";
    case DType::int64: return "int64_t";
    case DType::uint8: return "uint8_t";
    case DType::uint32: return "uint32_t";
    case DType::float16: case DType::bfloat16: case DType::float32: return "float";
    case DType::float64: return "double";
  }
  throw InternalError("compute_type: unknown dtype");
}

const char* storage_type(DType t) {
  switch (t) {
    case DType::bool_: return "pl_cpu::Bool8";
    case DType::float16: return "pl_cpu::Half";
    case DType::bfloat16: return "pl_cpu::BFloat16";
    default: return compute_type(t);
  }
}

std::string literal(DType t, double f, int64_t i) {
  if (is_float(t)) {
    const bool single = t != DType::float64;
    if (std::isnan(f)) return single ? "__builtin_nanf(\"\")" : "__builtin_nan(\"\")";
    if (std::isinf(f)) return std::string(f < 0 ? "(-" : "(") + (single ? "__builtin_inff()" : "__builtin_inf()") + ")";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", single ? static_cast<double>(static_cast<float>(f)) : f);
    return std::string("(") + buf + (single ? "f" : "") + ")";  // hex: exact
  }
  if (t == DType::bool_) return i ? "true" : "false";
  if (t == DType::int64) {
    if (i == INT64_MIN) return "(-INT64_C(9223372036854775807) - 1)";
    return "INT64_C(" + std::to_string(i) + ")";
  }
  if (t == DType::uint32) return std::to_string(static_cast<uint32_t>(i)) + "u";
  return std::string("static_cast<") + compute_type(t) + ">(" + std::to_string(i) + ")";
}

std::string rounded(DType t, const std::string& expr) {
  switch (t) {
    case DType::float16: return "pl_cpu::round_half(" + expr + ")";
    case DType::bfloat16: return "pl_cpu::round_bf16(" + expr + ")";
    case DType::float32: case DType::float64: return "(" + expr + ")";
    default: return std::string("static_cast<") + compute_type(t) + ">(" + expr + ")";  // integers wrap
  }
}

std::string Emitter::cast_expr(DType from, DType to, const std::string& x) const {
  if (from == to) return x;
  if (to == DType::bool_) return "(" + x + " != 0)";
  if (is_float(to)) {
    if (!is_float(from)) {
      // Through double, as the interpreter: exact for every integer up to 2^53, then one rounding.
      const std::string d = "static_cast<double>(" + x + ")";
      return to == DType::float64 ? d : to == DType::float32 ? "static_cast<float>(" + d + ")" : rounded(to, d);
    }
    if (to == DType::float64) return "static_cast<double>(" + x + ")";
    if (to == DType::float32) return from == DType::float64 ? "static_cast<float>(" + x + ")" : x;
    return rounded(to, x);  // float16/bfloat16 from float or double: one rounding
  }
  if (is_float(from)) return std::string("pl_cpu::float_to_int<") + compute_type(to) + ">(" + x + ")";
  return std::string("static_cast<") + compute_type(to) + ">(" + x + ")";
}

std::string Emitter::elementwise_expr(const ir::Inst& in, const std::vector<std::string>& a) const {
  const DType rt = type(in.results[0]).dtype;
  const DType ot = in.operands.empty() ? rt : type(in.operands.back()).dtype;  // operand dtype
  const bool fl = is_float(ot);
  const bool dbl = ot == DType::float64;
  const std::string ct = compute_type(ot);
  auto call = [&](const char* fn) { return rounded(rt, std::string("pl_cpu::") + fn + "(" + a[0] + ")"); };
  auto builtin = [&](const char* fn) { return rounded(rt, std::string("__builtin_") + fn + (dbl ? "" : "f") + "(" + a[0] + ")"); };
  auto bin = [&](const char* op) { return rounded(rt, a[0] + " " + op + " " + a[1]); };
  auto cmp = [&](const char* op) { return "(" + a[0] + " " + op + " " + a[1] + ")"; };
  if (const char* fn = backend::libm_function(in.op)) {
    std::string args = a[0];
    for (size_t i = 1; i < a.size(); ++i) args += ", " + a[i];
    return rounded(rt, std::string("__builtin_") + fn + (dbl ? "" : "f") + "(" + args + ")");
  }
  switch (in.op) {
    case ir::Op::Const: return literal(rt, in.f, in.i0);
    case ir::Op::Neg: return fl ? "(-" + a[0] + ")" : rounded(rt, "-" + a[0]);
    case ir::Op::Abs:
      if (fl) return std::string(dbl ? "__builtin_fabs(" : "__builtin_fabsf(") + a[0] + ")";
      if (is_unsigned(ot)) return a[0];
      return rounded(rt, a[0] + " < 0 ? -" + a[0] + " : " + a[0]);
    case ir::Op::Exp: return call("exp");
    case ir::Op::Exp2: return call("exp2");
    case ir::Op::Log: return call("log");
    case ir::Op::Log2: return call("log2");
    case ir::Op::Log1p: return call("log1p");
    case ir::Op::Sqrt: return builtin("sqrt");
    case ir::Op::Rsqrt: return call("rsqrt");
    case ir::Op::Sin: return call("sin");
    case ir::Op::Cos: return call("cos");
    case ir::Op::Tanh: return call("tanh");
    case ir::Op::Logistic: return call("logistic");
    case ir::Op::Erf: return call("erf");
    case ir::Op::ErfInv: return call("erf_inv");
    case ir::Op::Floor: return builtin("floor");
    case ir::Op::Ceil: return builtin("ceil");
    case ir::Op::Sign:
      if (fl) return rounded(rt, "(" + a[0] + " > 0 ? " + ct + "(1) : " + a[0] + " < 0 ? " + ct + "(-1) : " + a[0] + ")");
      return rounded(rt, "(" + a[0] + " > 0) - (" + a[0] + " < 0)");
    case ir::Op::Not: return is_bool(ot) ? "(!" + a[0] + ")" : rounded(rt, "~" + a[0]);
    case ir::Op::Add: return bin("+");
    case ir::Op::Sub: return bin("-");
    case ir::Op::Mul: return bin("*");
    case ir::Op::Div: return fl ? bin("/") : "pl_cpu::int_div<" + ct + ">(" + a[0] + ", " + a[1] + ")";
    case ir::Op::Rem:
      if (fl) return rounded(rt, std::string(dbl ? "__builtin_fmod(" : "__builtin_fmodf(") + a[0] + ", " + a[1] + ")");
      return "pl_cpu::int_rem<" + ct + ">(" + a[0] + ", " + a[1] + ")";
    case ir::Op::Pow: return rounded(rt, "pl_cpu::pow(" + a[0] + ", " + a[1] + ")");
    case ir::Op::ShiftLeft: case ir::Op::ShiftRightLogical: case ir::Op::ShiftRightArithmetic:
    case ir::Op::PopulationCount: case ir::Op::Clz:
      return backend::int_bit_expr(in.op, static_cast<int>(itemsize(ot) * 8), ct, a[0], a.size() > 1 ? a[1] : "",
                                   "__builtin_popcountll", "__builtin_clzll");
    case ir::Op::Max:
      return fl ? "pl_cpu::float_max(" + a[0] + ", " + a[1] + ")" : "(" + a[0] + " > " + a[1] + " ? " + a[0] + " : " + a[1] + ")";
    case ir::Op::Min:
      return fl ? "pl_cpu::float_min(" + a[0] + ", " + a[1] + ")" : "(" + a[0] + " < " + a[1] + " ? " + a[0] + " : " + a[1] + ")";
    case ir::Op::And: return rounded(rt, a[0] + " & " + a[1]);
    case ir::Op::Or: return rounded(rt, a[0] + " | " + a[1]);
    case ir::Op::Xor: return rounded(rt, a[0] + " ^ " + a[1]);
    case ir::Op::Eq: return cmp("==");
    case ir::Op::Ne: return cmp("!=");
    case ir::Op::Lt: return cmp("<");
    case ir::Op::Le: return cmp("<=");
    case ir::Op::Gt: return cmp(">");
    case ir::Op::Ge: return cmp(">=");
    case ir::Op::Select: return "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")";
    case ir::Op::Cast: return cast_expr(type(in.operands[0]).dtype, rt, a[0]);
    case ir::Op::BitcastConvert:  // through the storage representations (16-bit floats compute as float)
      return std::string(compute_type(rt)) + "(pl_cpu::to_compute(__builtin_bit_cast(" + storage_type(rt) + ", pl_cpu::to_storage<" +
             storage_type(ot) + ">(" + a[0] + "))))";
    default: break;
  }
  throw InternalError(std::string("cpu codegen: no elementwise rule for ") + ir::op_name(in.op));
}

// Rank-0 values: one statement each.
void Emitter::emit_scalar_op(const ir::Inst& in) {
  const ir::ValueId r = in.results[0];
  const DType rt = type(r).dtype;
  std::string expr;
  if (in.op == ir::Op::ProgramId) {
    expr = "static_cast<int32_t>(program[" + std::to_string(in.i0) + "])";
  } else if (in.op == ir::Op::NumPrograms) {
    expr = literal(DType::int32, 0, kernel_.grid[static_cast<size_t>(in.i0)]);
  } else {
    std::vector<std::string> args;
    for (ir::ValueId v : in.operands) args.push_back(name(v));
    expr = elementwise_expr(in, args);
  }
  line(std::string("const ") + compute_type(rt) + " " + name(r) + " = " + expr + ";");
}

// One loop over the group's shape; members compute scalars tN, and values used outside the
// group are stored to their tiles vN as they are produced.
void Emitter::emit_group(const FusionGroup& g) {
  const Shape& shape = g.shape;
  const size_t rank = shape.size();
  for (const ir::Inst* m : g.members) {
    const ir::ValueId r = m->results[0];
    if (kind(r) != ValueKind::Tile) continue;
    if (auto carry = in_place_.find(r); carry != in_place_.end()) {
      line(std::string(compute_type(type(r).dtype)) + "* const " + name(r) + " = " + name(carry->second) +
           ";  // computed into the loop-carried buffer");
      alias_root_[r] = root(carry->second);
    } else {
      declare_tile(r);
    }
  }
  if (!g.needs_indices) {
    line("PL_NO_ALIAS_LOOP");
    open("for (int64_t i = 0; i < " + std::to_string(numel(shape)) + "; ++i)");
  } else {
    std::string flat;
    for (size_t d = 0; d < rank; ++d) {
      const std::string id = "i" + std::to_string(d);
      if (d + 1 == rank) line("PL_NO_ALIAS_LOOP");
      open("for (int64_t " + id + " = 0; " + id + " < " + std::to_string(shape[d]) + "; ++" + id + ")");
      flat = d == 0 ? id : "(" + flat + ") * " + std::to_string(shape[d]) + " + " + id;
    }
    line("const int64_t i = " + flat + ";");
  }
  emit_group_body(g, true);
  for (size_t d = 0; d < (g.needs_indices ? rank : 1); ++d) close();
}

bool Emitter::in_group(ir::ValueId u, const FusionGroup& g) const {
  const ir::Inst* d = def_[static_cast<size_t>(u)];
  if (!d) return false;
  auto it = group_of_.find(d);
  return it != group_of_.end() && it->second == group_of_.at(g.members.front());
}

// The group's inputs read at the element's own index, name[i] below (not through a broadcast).
std::vector<ir::ValueId> Emitter::indexed_inputs(const FusionGroup& g) {
  std::vector<ir::ValueId> inputs;
  for (const ir::Inst* m : g.members) {
    if (m->op == ir::Op::Iota || m->op == ir::Op::Broadcast) continue;
    for (ir::ValueId u : m->operands)
      if (!in_group(u, g) && kind(u) != ValueKind::Scalar && std::find(inputs.begin(), inputs.end(), u) == inputs.end())
        inputs.push_back(u);
  }
  return inputs;
}

void Emitter::emit_group_body(const FusionGroup& g, bool materialize) {
  auto operand = [&](ir::ValueId u) -> std::string {
    if (in_group(u, g)) return temp(u);
    if (kind(u) == ValueKind::Scalar) return name(u);
    return name(u) + "[i]";
  };
  for (const ir::Inst* m : g.members) {
    const ir::ValueId r = m->results[0];
    const DType rt = type(r).dtype;
    std::string expr;
    if (m->op == ir::Op::Iota) {
      const std::string index = "i" + std::to_string(m->i0);
      expr = is_float(rt) ? cast_expr(DType::int64, rt, index) : std::string("static_cast<") + compute_type(rt) + ">(" + index + ")";
    } else if (m->op == ir::Op::Broadcast) {
      const ir::ValueId src = m->operands[0];
      const Shape& ss = type(src).shape;
      if (ss.empty()) {
        expr = operand(src);
      } else {
        // Source dimension d follows result dimension ints[d] unless it has size 1.
        std::string index = "0";
        const std::vector<int64_t> strides = row_major_strides(ss);
        for (size_t d = 0; d < ss.size(); ++d)
          if (ss[d] != 1) index += " + i" + std::to_string(m->ints[d]) + " * " + std::to_string(strides[d]);
        expr = name(src) + "[" + index + "]";
      }
    } else {
      std::vector<std::string> args;
      for (ir::ValueId u : m->operands) args.push_back(operand(u));
      expr = elementwise_expr(*m, args);
    }
    line(std::string("const ") + compute_type(rt) + " " + temp(r) + " = " + expr + ";");
    if (materialize && kind(r) == ValueKind::Tile) line(name(r) + "[i] = " + temp(r) + ";");
  }
}

}  // namespace palladium::cpu
