// Array operations where the Arrays live (jax.numpy / jax.lax / jax.nn on Arrays). Every op binds
// one primitive of the program IR: eagerly it runs a cached generated kernel on the inputs' device
// (host: the cpu backend or the interpreter; GPU: cuda); under jit, grad or vmap it is traced.
// Broadcasting is NumPy's and promotion JAX's (the kernel language's rules); C++ numbers are weakly
// typed and take the dtype of the Array they meet.
#pragma once
#include <optional>
#include <type_traits>
#include <vector>

#include "palladium/array.h"
#include "palladium/value.h"

namespace palladium {

// A C++ number as an operand: weakly typed, as a Python scalar in JAX.
struct Scalar {
  double value = 0.0;
  bool is_int = false;
  bool is_bool = false;
  template <class T>
    requires std::is_arithmetic_v<T>
  Scalar(T v) : value(static_cast<double>(v)), is_int(std::is_integral_v<T>), is_bool(std::is_same_v<T, bool>) {}  // NOLINT
};

// The program-level array backend for host Arrays ("interpret" or "cpu"; "" = $PALLADIUM_BACKEND,
// else cpu when a host compiler exists, else interpret) while the scope lives on this thread.
class BackendScope {
 public:
  explicit BackendScope(std::string backend);
  ~BackendScope();
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;

 private:
  std::string previous_;
};
// The backend that program-level ops on Arrays of this device use now.
std::string array_backend(Device d);

namespace jnp {
Array neg(const Array& x);
Array abs(const Array& x);
Array exp(const Array& x);
Array exp2(const Array& x);
Array log(const Array& x);
Array log2(const Array& x);
Array log1p(const Array& x);
Array sqrt(const Array& x);
Array rsqrt(const Array& x);
Array sin(const Array& x);
Array cos(const Array& x);
Array tanh(const Array& x);
Array erf(const Array& x);
Array floor(const Array& x);
Array ceil(const Array& x);
Array square(const Array& x);
Array logical_not(const Array& x);

Array add(const Array& a, const Array& b);
Array subtract(const Array& a, const Array& b);
Array multiply(const Array& a, const Array& b);
Array divide(const Array& a, const Array& b);     // true division (ints promote to float32)
Array remainder(const Array& a, const Array& b);  // lax.rem: the sign of a
Array power(const Array& a, const Array& b);
Array maximum(const Array& a, const Array& b);
Array minimum(const Array& a, const Array& b);
Array equal(const Array& a, const Array& b);
Array not_equal(const Array& a, const Array& b);
Array less(const Array& a, const Array& b);
Array less_equal(const Array& a, const Array& b);
Array greater(const Array& a, const Array& b);
Array greater_equal(const Array& a, const Array& b);
Array logical_and(const Array& a, const Array& b);
Array logical_or(const Array& a, const Array& b);
// Each binary function also takes a weakly typed C++ number on either side.
#define PL_JNP_BINARY_SCALAR(fn) Array fn(const Array& a, Scalar b); Array fn(Scalar a, const Array& b);
PL_JNP_BINARY_SCALAR(add) PL_JNP_BINARY_SCALAR(subtract) PL_JNP_BINARY_SCALAR(multiply)
PL_JNP_BINARY_SCALAR(divide) PL_JNP_BINARY_SCALAR(power) PL_JNP_BINARY_SCALAR(maximum)
PL_JNP_BINARY_SCALAR(minimum)
#undef PL_JNP_BINARY_SCALAR
Array where(const Array& cond, const Array& a, const Array& b);
Array where(const Array& cond, const Array& a, Scalar b);
Array where(const Array& cond, Scalar a, const Array& b);
Array astype(const Array& x, DType t);

// Reductions over `axes` (all axes when empty), as jnp.sum(x, axis=axes, keepdims=keepdims).
Array sum(const Array& x, std::vector<int64_t> axes = {}, bool keepdims = false);
Array max(const Array& x, std::vector<int64_t> axes = {}, bool keepdims = false);
Array min(const Array& x, std::vector<int64_t> axes = {}, bool keepdims = false);
Array mean(const Array& x, std::vector<int64_t> axes = {}, bool keepdims = false);
Array logsumexp(const Array& x, std::vector<int64_t> axes = {}, bool keepdims = false);
// Index of the first maximum (minimum) along `axis`; over the flattened array when none.
Array argmax(const Array& x, std::optional<int64_t> axis = std::nullopt);
Array argmin(const Array& x, std::optional<int64_t> axis = std::nullopt);

// jnp.matmul: (..., m, k) @ (..., k, n) with broadcast batch dimensions; rank-1 operands are
// promoted to matrices and the added dimension removed, as NumPy does.
Array matmul(const Array& a, const Array& b);
Array dot(const Array& a, const Array& b);

Array reshape(const Array& x, Shape shape);  // one -1 infers a dimension
Array transpose(const Array& x, std::vector<int64_t> perm = {});  // default reverses the axes
Array broadcast_to(const Array& x, Shape shape);
Array concatenate(const std::vector<Array>& xs, int64_t axis = 0);
Array stack(const std::vector<Array>& xs, int64_t axis = 0);
Array squeeze(const Array& x, std::vector<int64_t> axes = {});  // default: every size-1 axis
Array expand_dims(const Array& x, int64_t axis);
// Static constant padding: (low, high) per dimension.
Array pad(const Array& x, const std::vector<std::pair<int64_t, int64_t>>& widths, double value = 0.0);
// Of x's shape, where x lives (its trace, or its device when x is an eager device array).
Array zeros_like(const Array& x);
Array ones_like(const Array& x);
Array full_like(const Array& x, double value);
Array full_like(const Array& x, double value, DType dtype);  // of another dtype
}  // namespace jnp

namespace lax {
// x[start:limit:stride] per dimension (static).
Array slice(const Array& x, std::vector<int64_t> start, std::vector<int64_t> limit, std::vector<int64_t> strides = {});
// x[i] along axis 0 at a static index, dropping that axis.
Array index(const Array& x, int64_t i);
// `sizes` elements from traced starts (integer scalar Arrays); starts are clamped into range, as
// lax.dynamic_slice does.
Array dynamic_slice(const Array& x, const std::vector<Array>& starts, Shape sizes);
Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& starts);
// x[i] along axis 0 at a traced integer scalar index, dropping that axis.
Array dynamic_index(const Array& x, const Array& i);
Array stop_gradient(const Array& x);
Array iota(DType dtype, Shape shape, int64_t dimension = 0);
Array full(Shape shape, double value, DType dtype = f32);  // a traced constant (no host buffer)
Array logistic(const Array& x);
}  // namespace lax

namespace nn {
Array relu(const Array& x);
Array sigmoid(const Array& x);
Array silu(const Array& x);
Array gelu(const Array& x);  // tanh approximation, as jax.nn.gelu's default
Array softmax(const Array& x, int64_t axis = -1);
Array log_softmax(const Array& x, int64_t axis = -1);
}  // namespace nn

// Operators on Arrays (and weakly typed C++ numbers), as on jax.Arrays.
Array operator+(const Array& a, const Array& b);
Array operator-(const Array& a, const Array& b);
Array operator*(const Array& a, const Array& b);
Array operator/(const Array& a, const Array& b);
Array operator%(const Array& a, const Array& b);
Array operator-(const Array& a);
Array operator<(const Array& a, const Array& b);
Array operator<=(const Array& a, const Array& b);
Array operator>(const Array& a, const Array& b);
Array operator>=(const Array& a, const Array& b);
Array operator==(const Array& a, const Array& b);
Array operator!=(const Array& a, const Array& b);
Array operator&(const Array& a, const Array& b);
Array operator|(const Array& a, const Array& b);
Array operator!(const Array& a);
// A scalar operand as an Array of the other operand's dtype (JAX's weak typing).
Array scalar_like(const Array& like, Scalar s);

#define PL_ARRAY_SCALAR_OPERATOR(op)                                                                  \
  template <class T> requires std::is_arithmetic_v<T> Array operator op(const Array& a, T b) {         \
    return a op scalar_like(a, Scalar(b));                                                             \
  }                                                                                                    \
  template <class T> requires std::is_arithmetic_v<T> Array operator op(T a, const Array& b) {         \
    return scalar_like(b, Scalar(a)) op b;                                                             \
  }
PL_ARRAY_SCALAR_OPERATOR(+)
PL_ARRAY_SCALAR_OPERATOR(-)
PL_ARRAY_SCALAR_OPERATOR(*)
PL_ARRAY_SCALAR_OPERATOR(/)
PL_ARRAY_SCALAR_OPERATOR(<)
PL_ARRAY_SCALAR_OPERATOR(<=)
PL_ARRAY_SCALAR_OPERATOR(>)
PL_ARRAY_SCALAR_OPERATOR(>=)
PL_ARRAY_SCALAR_OPERATOR(==)
PL_ARRAY_SCALAR_OPERATOR(!=)
#undef PL_ARRAY_SCALAR_OPERATOR
Array& operator+=(Array& a, const Array& b);
Array& operator-=(Array& a, const Array& b);
Array& operator*=(Array& a, const Array& b);

}  // namespace palladium
