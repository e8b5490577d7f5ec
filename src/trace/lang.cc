// The kernel language's free functions: pl.*, jnp.*, jax.nn.* and lax.* on traced Values.
#include "palladium/lang.h"

#include <cmath>

#include "trace/context.h"

namespace palladium {


using trace::as_value;
using trace::builder;
using trace::wrap;

// The kernel sees its own grid; vmap's batch axes come first in the IR's grid and stay hidden.
static int grid_axis(trace::Context& ctx, int axis, const char* op) {
  const int rank = static_cast<int>(ctx.kernel().grid.size()) - ctx.program_id_offset();
  if (axis < 0 || axis >= rank)
    ctx.builder().fail(op, "axis " + std::to_string(axis) + " is outside the grid of rank " + std::to_string(rank));
  return axis + ctx.program_id_offset();
}

Value program_id(int axis) {
  trace::Context& ctx = trace::Context::current("program_id");
  return wrap(ctx.builder().program_id(grid_axis(ctx, axis, "program_id")));
}

Value num_programs(int axis) {
  trace::Context& ctx = trace::Context::current("num_programs");
  return wrap(ctx.builder().num_programs(grid_axis(ctx, axis, "num_programs")));
}

static Value hint(const Value& x, int64_t n, const char* op) {
  if (n <= 0) builder(op).fail(op, "n must be positive, got " + std::to_string(n));
  if (!is_integer(x.dtype())) builder(op).fail(op, std::string("takes an integer Value, got ") + dtype_name(x.dtype()));
  return x;
}
Value multiple_of(const Value& x, int64_t n) { return hint(x, n, "multiple_of"); }
Value max_contiguous(const Value& x, int64_t n) { return hint(x, n, "max_contiguous"); }

Value cdiv(const Value& a, const Value& b) {
  if (is_float(a.dtype()) || is_float(b.dtype())) builder("cdiv").fail("cdiv", "takes integer operands");
  return jnp::floor_divide(a + b - 1, b);
}

Value dot(const Value& a, const Value& b, bool trans_a, bool trans_b) {
  DType t = trace::result_dtype(a, b);
  ir::ValueId ia = as_value(a, "dot"), ib = as_value(b, "dot");
  ir::Builder& bld = builder("dot");
  ia = bld.cast(ia, t);
  ib = bld.cast(ib, t);
  return wrap(bld.dot(ia, ib, trans_a, trans_b));
}

void debug_print(const std::string& format, const std::vector<Value>& values) {
  std::vector<ir::ValueId> ids;
  for (const Value& v : values) ids.push_back(as_value(v, "debug_print"));
  size_t holes = 0;
  for (size_t p = format.find("{}"); p != std::string::npos; p = format.find("{}", p + 2)) ++holes;
  if (holes != values.size())
    builder("debug_print").fail("debug_print", "format has " + std::to_string(holes) + " {} placeholders for " +
                                                   std::to_string(values.size()) + " values");
  builder("debug_print").debug_print(format, ids);
}

namespace jnp {

static Value unary(ir::Op op, const Value& x, const char* name) {
  ir::ValueId id = as_value(x, name);
  // Transcendentals of integer Values compute in float32, as jnp does.
  if (ir::op_family(op) == ir::Family::Unary && op != ir::Op::Neg && op != ir::Op::Abs && op != ir::Op::Not &&
      op != ir::Op::Sign &&
      !is_float(builder(name).type(id).dtype))
    id = builder(name).cast(id, DType::float32);
  return wrap(builder(name).unary(op, id));
}

Value neg(const Value& x) { return unary(ir::Op::Neg, x, "neg"); }
Value abs(const Value& x) { return unary(ir::Op::Abs, x, "abs"); }
Value exp(const Value& x) { return unary(ir::Op::Exp, x, "exp"); }
Value exp2(const Value& x) { return unary(ir::Op::Exp2, x, "exp2"); }
Value log(const Value& x) { return unary(ir::Op::Log, x, "log"); }
Value log2(const Value& x) { return unary(ir::Op::Log2, x, "log2"); }
Value log1p(const Value& x) { return unary(ir::Op::Log1p, x, "log1p"); }
Value sqrt(const Value& x) { return unary(ir::Op::Sqrt, x, "sqrt"); }
Value rsqrt(const Value& x) { return unary(ir::Op::Rsqrt, x, "rsqrt"); }
Value sin(const Value& x) { return unary(ir::Op::Sin, x, "sin"); }
Value cos(const Value& x) { return unary(ir::Op::Cos, x, "cos"); }
Value tanh(const Value& x) { return unary(ir::Op::Tanh, x, "tanh"); }
Value logistic(const Value& x) { return unary(ir::Op::Logistic, x, "logistic"); }
Value erf(const Value& x) { return unary(ir::Op::Erf, x, "erf"); }
Value floor(const Value& x) { return unary(ir::Op::Floor, x, "floor"); }
Value ceil(const Value& x) { return unary(ir::Op::Ceil, x, "ceil"); }
Value expm1(const Value& x) { return unary(ir::Op::Expm1, x, "expm1"); }
Value tan(const Value& x) { return unary(ir::Op::Tan, x, "tan"); }
Value arcsin(const Value& x) { return unary(ir::Op::Asin, x, "arcsin"); }
Value arccos(const Value& x) { return unary(ir::Op::Acos, x, "arccos"); }
Value arctan(const Value& x) { return unary(ir::Op::Atan, x, "arctan"); }
Value sinh(const Value& x) { return unary(ir::Op::Sinh, x, "sinh"); }
Value cosh(const Value& x) { return unary(ir::Op::Cosh, x, "cosh"); }
Value round(const Value& x) {  // integers are already round (and keep their dtype, as in jnp)
  if (!is_float(x.dtype())) return x;
  return unary(ir::Op::Round, x, "round");
}
Value sign(const Value& x) { return unary(ir::Op::Sign, x, "sign"); }
Value square(const Value& x) { return x * x; }
Value isfinite(const Value& x) {
  if (!is_float(x.dtype())) return x == x;
  double largest = 0;
  switch (x.dtype()) {
    case DType::float16: largest = 65504.0; break;
    case DType::bfloat16: largest = 3.3895313892515355e38; break;
    case DType::float32: largest = 3.4028234663852886e38; break;
    default: largest = 1.7976931348623157e308; break;
  }
  return abs(x) <= largest;  // false for NaN and both infinities
}
Value left_shift(const Value& a, const Value& b) { return lax::shift_left(a, b); }
Value right_shift(const Value& a, const Value& b) {
  const DType t = trace::result_dtype(a, b);
  return t == DType::uint8 || t == DType::uint32 ? lax::shift_right_logical(a, b) : lax::shift_right_arithmetic(a, b);
}
Value arctan2(const Value& y, const Value& x) {
  DType t = trace::result_dtype(y, x);
  if (!is_float(t)) t = DType::float32;
  Shape s = trace::broadcast_shapes(y.shape(), x.shape(), "arctan2");
  return wrap(builder("arctan2").binary(ir::Op::Atan2, as_value(y, t, s, "arctan2"), as_value(x, t, s, "arctan2")));
}

Value pow(const Value& x, const Value& y) {
  DType t = trace::result_dtype(x, y);
  if (!is_float(t)) t = DType::float32;
  Shape s = trace::broadcast_shapes(x.shape(), y.shape(), "pow");
  return wrap(builder("pow").binary(ir::Op::Pow, as_value(x, t, s, "pow"), as_value(y, t, s, "pow")));
}
Value maximum(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Max, a, b, "max"); }
Value minimum(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Min, a, b, "min"); }
// The logical ops take any dtype, non-zero meaning true, and return bool (jnp.logical_*).
static Value truth(const Value& x) { return is_bool(x.dtype()) ? x : x != 0; }
Value logical_not(const Value& x) { return wrap(builder("not").unary(ir::Op::Not, as_value(truth(x), "not"))); }
Value logical_and(const Value& a, const Value& b) { return trace::binary_op(ir::Op::And, truth(a), truth(b), "and"); }
Value logical_or(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Or, truth(a), truth(b), "or"); }
Value equal(const Value& a, const Value& b) { return a == b; }

Value floor_divide(const Value& a, const Value& b) {
  DType t = trace::result_dtype(a, b);
  if (is_float(t)) return floor(a / b);
  // Python's // rounds toward negative infinity; lax.div truncates: fix up where signs differ.
  Value q = a / b, r = a % b;
  Value adjust = (r != 0) & ((r < 0) != (b < 0));
  return where(adjust, q - 1, q);
}

Value where(const Value& c, const Value& a, const Value& b) {
  DType t = trace::result_dtype(a, b);
  Shape s = trace::broadcast_shapes(trace::broadcast_shapes(c.shape(), a.shape(), "select"), b.shape(), "select");
  ir::ValueId ic = as_value(c, "select");
  if (builder("select").type(ic).dtype != DType::bool_)
    builder("select").fail("select", std::string("condition must be bool, not ") + dtype_name(builder("select").type(ic).dtype));
  ic = as_value(c, DType::bool_, s, "select");
  return wrap(builder("select").select(ic, as_value(a, t, s, "select"), as_value(b, t, s, "select")));
}

Value astype(const Value& x, DType t) { return x.astype(t); }
Value reshape(const Value& x, Shape shape) { return x.reshape(std::move(shape)); }
Value transpose(const Value& x, std::vector<int64_t> perm) { return perm.empty() ? x.T() : x.transpose(std::move(perm)); }
Value broadcast_to(const Value& x, Shape shape) { return x.broadcast_to(std::move(shape)); }
Value expand_dims(const Value& x, int64_t axis) { return x.expand_dims(axis); }
Value sum(const Value& x, std::optional<int64_t> axis) { return x.sum(axis); }
Value max(const Value& x, std::optional<int64_t> axis) { return x.max(axis); }
Value min(const Value& x, std::optional<int64_t> axis) { return x.min(axis); }
Value argmax(const Value& x, std::optional<int64_t> axis) { return x.argmax(axis); }
Value argmin(const Value& x, std::optional<int64_t> axis) { return x.argmin(axis); }

Value cumsum(const Value& x, int64_t axis) {
  ir::ValueId id = as_value(x, "cumsum");
  int64_t rank = static_cast<int64_t>(builder("cumsum").type(id).shape.size());
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) builder("cumsum").fail("cumsum", "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return wrap(builder("cumsum").cumsum(id, static_cast<int>(a)));
}

Value arange(int64_t n, DType dtype) { return iota(dtype, {n}, 0); }
Value iota(DType dtype, Shape shape, int64_t dimension) {
  return wrap(builder("iota").iota(dtype, std::move(shape), static_cast<int>(dimension)));
}
Value zeros(Shape shape, DType dtype) { return jnp::full(std::move(shape), 0.0, dtype); }
Value ones(Shape shape, DType dtype) { return jnp::full(std::move(shape), 1.0, dtype); }
Value full(Shape shape, double value, DType dtype) { return wrap(builder("full").constant(dtype, std::move(shape), value)); }
Value dot(const Value& a, const Value& b) { return palladium::dot(a, b); }
Value matmul(const Value& a, const Value& b) { return palladium::dot(a, b); }

}  // namespace jnp

namespace nn {
Value relu(const Value& x) { return jnp::maximum(x, 0); }
Value sigmoid(const Value& x) { return jnp::logistic(x); }
Value gelu(const Value& x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + jnp::tanh(c * (x + 0.044715 * x * x * x)));
}
Value silu(const Value& x) { return x * jnp::logistic(x); }
}  // namespace nn

namespace lax {
Value div(const Value& a, const Value& b) { return a / b; }
Value rem(const Value& a, const Value& b) { return a % b; }
Value clamp(const Value& lo, const Value& x, const Value& hi) { return jnp::minimum(jnp::maximum(x, lo), hi); }
Value integer_pow(const Value& x, int n) {
  if (n < 0) {
    if (!is_float(x.dtype()))
      builder("integer_pow").fail("integer_pow", "a negative exponent (" + std::to_string(n) + ") needs a float operand");
    return 1.0 / integer_pow(x, -n);
  }
  Value result = jnp::full(x.shape(), 1.0, x.dtype());
  Value base = x;
  for (unsigned e = static_cast<unsigned>(n); e > 0; e >>= 1) {
    if (e & 1u) result = result * base;
    if (e > 1) base = base * base;
  }
  return result;
}
Value shift_left(const Value& a, const Value& b) { return trace::binary_op(ir::Op::ShiftLeft, a, b, "shift_left"); }
Value shift_right_logical(const Value& a, const Value& b) {
  return trace::binary_op(ir::Op::ShiftRightLogical, a, b, "shift_right_logical");
}
Value shift_right_arithmetic(const Value& a, const Value& b) {
  return trace::binary_op(ir::Op::ShiftRightArithmetic, a, b, "shift_right_arithmetic");
}
Value population_count(const Value& x) {
  return wrap(builder("population_count").unary(ir::Op::PopulationCount, as_value(x, "population_count")));
}
Value clz(const Value& x) { return wrap(builder("clz").unary(ir::Op::Clz, as_value(x, "clz"))); }
Value erf_inv(const Value& x) {
  ir::ValueId id = as_value(x, "erf_inv");
  if (!is_float(builder("erf_inv").type(id).dtype)) id = builder("erf_inv").cast(id, DType::float32);
  return wrap(builder("erf_inv").unary(ir::Op::ErfInv, id));
}
Value bitcast_convert_type(const Value& x, DType dtype) {
  return wrap(builder("bitcast_convert").bitcast(as_value(x, "bitcast_convert"), dtype));
}
Value nextafter(const Value& a, const Value& b) { return trace::binary_op(ir::Op::NextAfter, a, b, "nextafter"); }
}  // namespace lax

}  // namespace palladium
