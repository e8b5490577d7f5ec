// Ops that are one C math function of their operands, by name ("expm1", "atan2", ...): the cpu
// backend calls __builtin_<name>[f], the cuda backend <name>[f]. An op is added here once for both.
#pragma once

#include "ir/ir.h"

namespace palladium::backend {

// The function's name, or nullptr where the op is not one such call.
inline const char* libm_function(ir::Op op) {
  switch (op) {
    case ir::Op::Expm1: return "expm1";
    case ir::Op::Tan: return "tan";
    case ir::Op::Asin: return "asin";
    case ir::Op::Acos: return "acos";
    case ir::Op::Atan: return "atan";
    case ir::Op::Sinh: return "sinh";
    case ir::Op::Cosh: return "cosh";
    case ir::Op::Round: return "rint";  // the default rounding mode: ties to even
    case ir::Op::Atan2: return "atan2";
    case ir::Op::NextAfter: return "nextafter";
    default: return nullptr;
  }
}

}  // namespace palladium::backend
