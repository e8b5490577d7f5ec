// Interpreter: leaves, elementwise ops, selection and casts.
#include <cmath>

#include "backends/interp/tile.h"
#include "device/cpu/erf_inv.h"

namespace palladium::interp {

Tile Tile::make(DType t, Shape s) {
  Tile r;
  r.dtype = t;
  r.shape = std::move(s);
  if (is_float(t)) r.f.resize(static_cast<size_t>(r.size()));
  else r.i.resize(static_cast<size_t>(r.size()));
  return r;
}

bool Tile::any_poison() const {
  for (uint8_t p : poison)
    if (p) return true;
  return false;
}

void Tile::set_poison(int64_t k) {
  if (poison.empty()) poison.assign(static_cast<size_t>(size()), 0);
  poison[static_cast<size_t>(k)] = 1;
}

Array Tile::to_array() const {
  Array a(shape, dtype);
  for (int64_t k = 0; k < size(); ++k) {
    if (floating()) a.set(k, poisoned(k) ? NAN : f[static_cast<size_t>(k)]);
    else store_from_int64(dtype, static_cast<char*>(a.data()) + k * itemsize(dtype), poisoned(k) ? 0 : i[static_cast<size_t>(k)]);
  }
  return a;
}

namespace {

void merge_poison(Tile& r, const Tile& a) {
  if (a.poison.empty()) return;
  if (r.poison.empty()) r.poison.assign(static_cast<size_t>(r.size()), 0);
  for (size_t k = 0; k < r.poison.size(); ++k) r.poison[k] |= a.poison[k];
}

double unary_f(ir::Op op, double x) {
  switch (op) {
    case ir::Op::Neg: return -x;
    case ir::Op::Abs: return std::fabs(x);
    case ir::Op::Exp: return std::exp(x);
    case ir::Op::Exp2: return std::exp2(x);
    case ir::Op::Log: return std::log(x);
    case ir::Op::Log2: return std::log2(x);
    case ir::Op::Log1p: return std::log1p(x);
    case ir::Op::Sqrt: return std::sqrt(x);
    case ir::Op::Rsqrt: return 1.0 / std::sqrt(x);
    case ir::Op::Sin: return std::sin(x);
    case ir::Op::Cos: return std::cos(x);
    case ir::Op::Tanh: return std::tanh(x);
    case ir::Op::Logistic: return 1.0 / (1.0 + std::exp(-x));
    case ir::Op::Erf: return std::erf(x);
    case ir::Op::Floor: return std::floor(x);
    case ir::Op::Ceil: return std::ceil(x);
    case ir::Op::Expm1: return std::expm1(x);
    case ir::Op::Tan: return std::tan(x);
    case ir::Op::Asin: return std::asin(x);
    case ir::Op::Acos: return std::acos(x);
    case ir::Op::Atan: return std::atan(x);
    case ir::Op::Sinh: return std::sinh(x);
    case ir::Op::Cosh: return std::cosh(x);
    case ir::Op::Round: return std::nearbyint(x);  // the default rounding mode: ties to even
    case ir::Op::Sign: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;
    case ir::Op::ErfInv: return pl_cpu::erf_inv(x);
    default: return NAN;
  }
}

double binary_f(ir::Op op, double a, double b) {
  switch (op) {
    case ir::Op::Add: return a + b;
    case ir::Op::Sub: return a - b;
    case ir::Op::Mul: return a * b;
    case ir::Op::Div: return a / b;
    case ir::Op::Rem: return std::fmod(a, b);
    case ir::Op::Pow: return std::pow(a, b);
    case ir::Op::Atan2: return std::atan2(a, b);
    case ir::Op::Max: return (std::isnan(a) || std::isnan(b)) ? NAN : (a > b ? a : b);
    case ir::Op::Min: return (std::isnan(a) || std::isnan(b)) ? NAN : (a < b ? a : b);
    default: return NAN;
  }
}

// Float to integer: truncate toward zero and clamp to the type's range; NaN becomes 0.
int64_t saturating_float_to_int(DType t, double x) {
  if (std::isnan(x)) return 0;
  double lo = 0, hi = 0;
  switch (t) {
    case DType::int8: lo = -128; hi = 127; break;
    case DType::int16: lo = -32768; hi = 32767; break;
    case DType::int32: lo = -2147483648.0; hi = 2147483647.0; break;
    case DType::int64: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
    case DType::uint8: lo = 0; hi = 255; break;
    case DType::uint32: lo = 0; hi = 4294967295.0; break;
    default: return x != 0;
  }
  x = std::trunc(x);
  if (x <= lo) return t == DType::int64 ? INT64_MIN : static_cast<int64_t>(lo);
  if (x >= hi) return t == DType::int64 ? INT64_MAX : static_cast<int64_t>(hi);
  return static_cast<int64_t>(x);
}

}  // namespace

Tile eval_leaf(const ir::Inst& in, const ir::Type& result, const std::vector<int64_t>& program, const Shape& grid) {
  Tile r = Tile::make(result.dtype, result.shape);
  const int64_t n = r.size();
  switch (in.op) {
    case ir::Op::Const:
      if (r.floating()) r.f.assign(static_cast<size_t>(n), in.f);
      else r.i.assign(static_cast<size_t>(n), in.i0);
      break;
    case ir::Op::ProgramId: r.i[0] = program[static_cast<size_t>(in.i0)]; break;
    case ir::Op::NumPrograms: r.i[0] = grid[static_cast<size_t>(in.i0)]; break;
    case ir::Op::Iota: {
      int64_t inner = 1;
      for (size_t d = static_cast<size_t>(in.i0) + 1; d < result.shape.size(); ++d) inner *= result.shape[d];
      const int64_t len = result.shape[static_cast<size_t>(in.i0)];
      for (int64_t k = 0; k < n; ++k) {
        int64_t v = (k / inner) % len;
        if (r.floating()) r.f[static_cast<size_t>(k)] = round_to(r.dtype, static_cast<double>(v));
        else r.i[static_cast<size_t>(k)] = wrap_int(r.dtype, v);
      }
      break;
    }
    default: break;
  }
  return r;
}

// Integer bit ops on the value's own width (the definitions; backends/common/int_bits.h emits them).
uint64_t bits_of(DType t, int64_t v) {
  const int n = static_cast<int>(itemsize(t) * 8);
  return n == 64 ? static_cast<uint64_t>(v) : static_cast<uint64_t>(v) & ((uint64_t{1} << n) - 1);
}
int64_t count_bits(ir::Op op, DType t, int64_t v) {
  const int n = static_cast<int>(itemsize(t) * 8);
  const uint64_t u = bits_of(t, v);
  if (op == ir::Op::PopulationCount) return __builtin_popcountll(u);
  return u == 0 ? n : __builtin_clzll(u) - (64 - n);
}
int64_t shift(ir::Op op, DType t, int64_t x, int64_t amount) {
  const int n = static_cast<int>(itemsize(t) * 8);
  const uint64_t u = bits_of(t, x);
  const int64_t s = n == 64 ? x : static_cast<int64_t>(u << (64 - n)) >> (64 - n);  // sign-extended
  const uint64_t by = static_cast<uint64_t>(amount);  // negative amounts are out of range
  switch (op) {
    case ir::Op::ShiftLeft: return by >= static_cast<uint64_t>(n) ? 0 : static_cast<int64_t>(u << by);
    case ir::Op::ShiftRightLogical: return by >= static_cast<uint64_t>(n) ? 0 : static_cast<int64_t>(u >> by);
    default: return by >= static_cast<uint64_t>(n) ? (s < 0 ? -1 : 0) : s >> by;
  }
}

Tile eval_unary(ir::Op op, const Tile& x) {
  Tile r = Tile::make(x.dtype, x.shape);
  r.poison = x.poison;
  const size_t n = static_cast<size_t>(x.size());
  if (x.floating()) {
    for (size_t k = 0; k < n; ++k) r.f[k] = round_to(x.dtype, unary_f(op, x.f[k]));
  } else if (op == ir::Op::Not) {
    for (size_t k = 0; k < n; ++k) r.i[k] = is_bool(x.dtype) ? !x.i[k] : wrap_int(x.dtype, ~x.i[k]);
  } else {
    for (size_t k = 0; k < n; ++k) {
      int64_t v = x.i[k];
      if (op == ir::Op::Sign) r.i[k] = (v > 0) - (v < 0);
      else if (op == ir::Op::PopulationCount || op == ir::Op::Clz) r.i[k] = count_bits(op, x.dtype, v);
      else r.i[k] = wrap_int(x.dtype, op == ir::Op::Neg ? -v : (v < 0 ? -v : v));
    }
  }
  return r;
}

Tile eval_binary(ir::Op op, const Tile& a, const Tile& b, const Fail& fail) {
  Tile r = Tile::make(a.dtype, a.shape);
  merge_poison(r, a);
  merge_poison(r, b);
  const size_t n = static_cast<size_t>(a.size());
  if (a.floating()) {
    const DType t = a.dtype;
    if (op == ir::Op::NextAfter) {  // in the operands' own format (float32 or float64)
      for (size_t k = 0; k < n; ++k)
        r.f[k] = t == DType::float32 ? static_cast<double>(std::nextafter(static_cast<float>(a.f[k]), static_cast<float>(b.f[k])))
                                     : std::nextafter(a.f[k], b.f[k]);
      return r;
    }
    switch (op) {  // the common ops get tight loops; the rest go through binary_f
      case ir::Op::Add: for (size_t k = 0; k < n; ++k) r.f[k] = round_to(t, a.f[k] + b.f[k]); break;
      case ir::Op::Sub: for (size_t k = 0; k < n; ++k) r.f[k] = round_to(t, a.f[k] - b.f[k]); break;
      case ir::Op::Mul: for (size_t k = 0; k < n; ++k) r.f[k] = round_to(t, a.f[k] * b.f[k]); break;
      default: for (size_t k = 0; k < n; ++k) r.f[k] = round_to(t, binary_f(op, a.f[k], b.f[k]));
    }
    return r;
  }
  for (size_t k = 0; k < n; ++k) {
    const int64_t x = a.i[k], y = b.i[k];
    int64_t v = 0;
    switch (op) {
      case ir::Op::Add: v = static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y)); break;
      case ir::Op::Sub: v = static_cast<int64_t>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y)); break;
      case ir::Op::Mul: v = static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y)); break;
      case ir::Op::Div:
      case ir::Op::Rem:
        if (y == 0) {
          if (!r.poisoned(static_cast<int64_t>(k))) fail("integer division by zero");
          v = 0;
        } else {
          // y == -1 is special-cased: INT64_MIN / -1 traps on x86.
          v = y == -1 ? (op == ir::Op::Div ? static_cast<int64_t>(0 - static_cast<uint64_t>(x)) : 0)
                      : (op == ir::Op::Div ? x / y : x % y);
        }
        break;
      case ir::Op::Max: v = x > y ? x : y; break;
      case ir::Op::Min: v = x < y ? x : y; break;
      case ir::Op::And: v = x & y; break;
      case ir::Op::Or: v = x | y; break;
      case ir::Op::Xor: v = x ^ y; break;
      case ir::Op::ShiftLeft: case ir::Op::ShiftRightLogical: case ir::Op::ShiftRightArithmetic:
        v = shift(op, a.dtype, x, y);
        break;
      default: fail(std::string("no integer rule for ") + ir::op_name(op));
    }
    r.i[k] = wrap_int(a.dtype, v);
  }
  return r;
}

Tile eval_compare(ir::Op op, const Tile& a, const Tile& b) {
  Tile r = Tile::make(DType::bool_, a.shape);
  merge_poison(r, a);
  merge_poison(r, b);
  const size_t n = static_cast<size_t>(a.size());
  auto cmp = [op](auto x, auto y) -> int64_t {
    switch (op) {
      case ir::Op::Eq: return x == y;
      case ir::Op::Ne: return x != y;
      case ir::Op::Lt: return x < y;
      case ir::Op::Le: return x <= y;
      case ir::Op::Gt: return x > y;
      default: return x >= y;
    }
  };
  if (a.floating()) for (size_t k = 0; k < n; ++k) r.i[k] = cmp(a.f[k], b.f[k]);
  else for (size_t k = 0; k < n; ++k) r.i[k] = cmp(a.i[k], b.i[k]);
  return r;
}

Tile eval_select(const Tile& p, const Tile& a, const Tile& b) {
  Tile r = Tile::make(a.dtype, a.shape);
  const size_t n = static_cast<size_t>(a.size());
  const bool any = !p.poison.empty() || !a.poison.empty() || !b.poison.empty();
  for (size_t k = 0; k < n; ++k) {
    const Tile& src = p.i[k] ? a : b;
    if (r.floating()) r.f[k] = src.f[k];
    else r.i[k] = src.i[k];
    if (any && (p.poisoned(static_cast<int64_t>(k)) || src.poisoned(static_cast<int64_t>(k)))) r.set_poison(static_cast<int64_t>(k));
  }
  return r;
}

Tile eval_bitcast(const Tile& x, DType t) {
  Tile r = Tile::make(t, x.shape);
  r.poison = x.poison;
  unsigned char bytes[8];
  for (size_t k = 0; k < static_cast<size_t>(x.size()); ++k) {  // through the storage bytes
    if (x.floating()) store_from_double(x.dtype, bytes, x.f[k]);
    else store_from_int64(x.dtype, bytes, x.i[k]);
    if (r.floating()) r.f[k] = load_as_double(t, bytes);
    else r.i[k] = load_as_int64(t, bytes);
  }
  return r;
}

Tile eval_cast(const Tile& x, DType t) {
  Tile r = Tile::make(t, x.shape);
  r.poison = x.poison;
  const size_t n = static_cast<size_t>(x.size());
  for (size_t k = 0; k < n; ++k) {
    if (r.floating()) {
      r.f[k] = round_to(t, x.floating() ? x.f[k] : static_cast<double>(x.i[k]));
    } else if (is_bool(t)) {
      r.i[k] = x.floating() ? (x.f[k] != 0.0) : (x.i[k] != 0);
    } else if (x.floating()) {
      r.i[k] = saturating_float_to_int(t, x.f[k]);
    } else {
      r.i[k] = wrap_int(t, x.i[k]);
    }
  }
  return r;
}

}  // namespace palladium::interp
