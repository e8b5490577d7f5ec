// Bit ops on integers for the code generators (cpu and cuda emit the same C++ expressions): shifts
// with XLA's rules for out-of-range amounts and population count / leading zeros on the value's
// own width. The interpreter's definitions are in interp/eval_elementwise.cc.
#pragma once
#include <string>

#include "ir/ir.h"

namespace palladium::backend {

// The expression for `op` (ShiftLeft, ShiftRightLogical, ShiftRightArithmetic, PopulationCount,
// Clz) on operands `a` (and `b`) of an integer dtype of `bits` bits, cast to `T`. `popcount64` and
// `clz64` name the target's 64-bit intrinsics (clz64(0) may be undefined: it is never called so).
inline std::string int_bit_expr(ir::Op op, int bits, const std::string& T, const std::string& a, const std::string& b,
                                const std::string& popcount64, const std::string& clz64) {
  const std::string N = std::to_string(bits);
  const std::string mask = bits == 64 ? "0xffffffffffffffffull" : "((1ull << " + N + ") - 1ull)";
  const std::string ua = "((unsigned long long)(" + a + ") & " + mask + ")";
  const std::string sa = bits == 64 ? "((long long)(" + a + "))"
                                    : "((long long)(" + ua + " << (64 - " + N + ")) >> (64 - " + N + "))";
  const std::string ub = "((unsigned long long)(long long)(" + b + "))";  // negative amounts are huge
  switch (op) {
    case ir::Op::ShiftLeft: return "((" + T + ")(" + ub + " >= " + N + "ull ? 0ull : (" + ua + " << " + ub + ")))";
    case ir::Op::ShiftRightLogical:
      return "((" + T + ")(" + ub + " >= " + N + "ull ? 0ull : (" + ua + " >> " + ub + ")))";
    case ir::Op::ShiftRightArithmetic:
      return "((" + T + ")(" + ub + " >= " + N + "ull ? (" + sa + " < 0 ? -1ll : 0ll) : (" + sa + " >> " + ub + ")))";
    case ir::Op::PopulationCount: return "((" + T + ")" + popcount64 + "(" + ua + "))";
    case ir::Op::Clz:
      return "((" + T + ")(" + ua + " == 0ull ? " + N + " : " + clz64 + "(" + ua + ") - (64 - " + N + ")))";
    default: return "";
  }
}

}  // namespace palladium::backend
