// The kernel language's operations on Values. Pallas spells them pl.*, jnp.* and lax.*; so do we:
// palladium::program_id, palladium::jnp::exp, palladium::lax::fori_loop.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "palladium/value.h"

namespace palladium {

Value program_id(int axis);
Value num_programs(int axis);
// Ceiling division for Values (traced) and for plain integers (static).
Value cdiv(const Value& a, const Value& b);
// Static form: floor((a + b - 1) / b), as Pallas's pl.cdiv.
constexpr int64_t cdiv(int64_t a, int64_t b) {
  const int64_t n = a + b - 1, q = n / b;
  return (n % b != 0 && ((n < 0) != (b < 0))) ? q - 1 : q;
}
// pl.dot: matrix product of rank-2 tiles, accumulating in float32 for 16/32-bit floats (result
// float32) and in int32 for 8/16/32-bit integers.
Value dot(const Value& a, const Value& b, bool trans_a = false, bool trans_b = false);

// pl.multiple_of / pl.max_contiguous: the user's promise that the integer x is a multiple of n
// (or that runs of n consecutive values are contiguous). Hints: they return x unchanged; no
// backend relies on them yet, so a broken promise changes nothing.
Value multiple_of(const Value& x, int64_t n);
Value max_contiguous(const Value& x, int64_t n);

// Printing from inside a kernel: "{}" placeholders take the values in order; one line per program.
void debug_print(const std::string& format, const std::vector<Value>& values = {});
template <class... V> void debug_print(const std::string& format, const Value& v0, const V&... vs) {
  debug_print(format, std::vector<Value>{v0, Value(vs)...});
}

namespace jnp {
Value neg(const Value& x);
Value abs(const Value& x);
Value exp(const Value& x);
Value exp2(const Value& x);
Value log(const Value& x);
Value log2(const Value& x);
Value log1p(const Value& x);
Value sqrt(const Value& x);
Value rsqrt(const Value& x);
Value sin(const Value& x);
Value cos(const Value& x);
Value tanh(const Value& x);
Value logistic(const Value& x);   // 1 / (1 + exp(-x)), jax.nn.sigmoid
Value erf(const Value& x);
Value floor(const Value& x);
Value ceil(const Value& x);
Value expm1(const Value& x);
Value tan(const Value& x);
Value arcsin(const Value& x);
Value arccos(const Value& x);
Value arctan(const Value& x);
Value sinh(const Value& x);
Value cosh(const Value& x);
Value round(const Value& x);   // ties to even, as jnp.round (integers are returned as they are)
Value sign(const Value& x);    // -1, 0 or 1 (any numeric dtype); a float zero or NaN is returned as it is
Value arctan2(const Value& y, const Value& x);  // the angle of the point (x, y), in (-pi, pi]
Value square(const Value& x);  // x * x
Value isfinite(const Value& x);  // bool: neither infinite nor NaN (integers: all true)
Value left_shift(const Value& a, const Value& b);   // integers: lax::shift_left
Value right_shift(const Value& a, const Value& b);  // integers: arithmetic if signed, logical if unsigned (NumPy)
Value pow(const Value& x, const Value& y);
Value maximum(const Value& a, const Value& b);
Value minimum(const Value& a, const Value& b);
Value where(const Value& cond, const Value& a, const Value& b);
Value logical_and(const Value& a, const Value& b);
Value logical_or(const Value& a, const Value& b);
Value logical_not(const Value& a);
Value equal(const Value& a, const Value& b);
Value floor_divide(const Value& a, const Value& b);  // Python's //
Value astype(const Value& x, DType t);
Value reshape(const Value& x, Shape shape);
Value transpose(const Value& x, std::vector<int64_t> perm = {});
Value broadcast_to(const Value& x, Shape shape);
Value expand_dims(const Value& x, int64_t axis);
Value sum(const Value& x, std::optional<int64_t> axis = std::nullopt);
Value max(const Value& x, std::optional<int64_t> axis = std::nullopt);
Value min(const Value& x, std::optional<int64_t> axis = std::nullopt);
Value argmax(const Value& x, std::optional<int64_t> axis = std::nullopt);
Value argmin(const Value& x, std::optional<int64_t> axis = std::nullopt);
Value cumsum(const Value& x, int64_t axis = -1);
Value arange(int64_t n, DType dtype = DType::int32);
Value iota(DType dtype, Shape shape, int64_t dimension);
Value zeros(Shape shape, DType dtype = DType::float32);
Value ones(Shape shape, DType dtype = DType::float32);
Value full(Shape shape, double value, DType dtype = DType::float32);
Value dot(const Value& a, const Value& b);          // a @ b
Value matmul(const Value& a, const Value& b);
}  // namespace jnp

namespace nn {
Value relu(const Value& x);
Value sigmoid(const Value& x);
Value gelu(const Value& x);        // tanh approximation, as jax.nn.gelu's default
Value silu(const Value& x);
}  // namespace nn

namespace lax {
Value div(const Value& a, const Value& b);   // truncating for integers
Value rem(const Value& a, const Value& b);
Value clamp(const Value& lo, const Value& x, const Value& hi);  // min(max(x, lo), hi)
Value integer_pow(const Value& x, int n);  // x ** n by repeated squaring (n < 0: floats only, 1 / x ** -n)
// Integer bit ops on the value's own width; a shift amount outside [0, bits) gives 0 (logical and
// left) or all sign bits (arithmetic), as XLA defines them.
Value shift_left(const Value& a, const Value& b);
Value shift_right_logical(const Value& a, const Value& b);
Value shift_right_arithmetic(const Value& a, const Value& b);
Value population_count(const Value& x);
Value clz(const Value& x);  // leading zero bits
Value erf_inv(const Value& x);  // the inverse of erf (integers compute in float32)
// The same bits read as another dtype of the same size (float32 <-> int32/uint32, float16 or
// bfloat16 <-> int16, float64 <-> int64, int8 <-> uint8, ...); bool is refused.
Value bitcast_convert_type(const Value& x, DType dtype);
// The next representable value after a toward b; float32 and float64 only.
Value nextafter(const Value& a, const Value& b);
}  // namespace lax

}  // namespace palladium
