// The public Array ops (palladium/numpy.h): each promotes, broadcasts or rewrites its operands as
// jax.numpy does and binds primitives; composite ops (mean, logsumexp, softmax, stack, ...) are
// written with other ops, so every transformation handles them with no rule of their own.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "palladium/call.h"
#include "palladium/numpy.h"
#include "program/families.h"
#include "program/trace.h"

namespace palladium {

namespace {

using program::bind1;
using program::Params;
using program::Prim;

Array unary(Prim p, const Array& x) { return bind1(p, {}, {x}); }

Array cast(const Array& x, DType t) {
  if (x.dtype() == t) return x;
  Params q;
  q.dtype = t;
  return bind1(Prim::convert, q, {x});
}

Array binary(Prim p, const Array& a, const Array& b) {
  const DType t = program::promote_types(a.dtype(), b.dtype());
  return bind1(p, {}, {cast(a, t), cast(b, t)});
}

Array float_operand(const Array& x) { return is_float(x.dtype()) ? x : cast(x, DType::float32); }

std::vector<int64_t> all_axes(const Array& x) {
  std::vector<int64_t> axes(static_cast<size_t>(x.ndim()));
  std::iota(axes.begin(), axes.end(), 0);
  return axes;
}

std::vector<int64_t> normalise(std::vector<int64_t> axes, int64_t rank, const char* op) {
  for (int64_t& a : axes) {
    PL_CHECK(a >= -rank && a < rank, op, ": axis ", a, " is out of range for rank ", rank, program::trace_location());
    if (a < 0) a += rank;
  }
  return axes;
}

Array reduce(Prim p, const Array& x, std::vector<int64_t> axes, bool keepdims) {
  if (axes.empty()) axes = all_axes(x);
  axes = normalise(std::move(axes), x.ndim(), program::prim_name(p));
  Params q;
  q.axes = axes;
  Array r = bind1(p, q, {x});
  if (!keepdims) return r;
  Shape kept = x.shape();
  for (int64_t a : axes) kept[static_cast<size_t>(a)] = 1;
  return jnp::reshape(r, kept);
}

Array arg_reduce(Prim p, const Array& x, std::optional<int64_t> axis) {
  if (!axis) return arg_reduce(p, jnp::reshape(x, {-1}), 0);
  Params q;
  q.axes = normalise({*axis}, x.ndim(), program::prim_name(p));
  return bind1(p, q, {x});
}

thread_local std::string backend_override;

}  // namespace

BackendScope::BackendScope(std::string backend) : previous_(backend_override) { backend_override = std::move(backend); }
BackendScope::~BackendScope() { backend_override = previous_; }

std::string array_backend(Device d) {
  if (d.kind == Device::cuda) return "cuda";
  if (!backend_override.empty()) return backend_override;
  const std::string def = default_backend();
  if (def == "interpret" || def == "cpu") return def;
  const std::vector<std::string> avail = available_backends();
  return std::find(avail.begin(), avail.end(), "cpu") != avail.end() ? "cpu" : "interpret";
}

Array scalar_like(const Array& like, Scalar s) {
  DType t = like.dtype();
  if (s.is_bool) return lax::full({}, s.value, t);
  if (!s.is_int && !is_float(t)) t = DType::float32;  // int array * 2.5: float32, as JAX
  else if (t == DType::bool_) t = DType::int32;     // bool array + 1: int32
  return lax::full({}, s.value, t);
}

namespace jnp {
Array neg(const Array& x) { return unary(Prim::neg, x); }
Array abs(const Array& x) { return unary(Prim::abs, x); }
Array exp(const Array& x) { return unary(Prim::exp, float_operand(x)); }
Array exp2(const Array& x) { return unary(Prim::exp2, float_operand(x)); }
Array log(const Array& x) { return unary(Prim::log, float_operand(x)); }
Array log2(const Array& x) { return unary(Prim::log2, float_operand(x)); }
Array log1p(const Array& x) { return unary(Prim::log1p, float_operand(x)); }
Array sqrt(const Array& x) { return unary(Prim::sqrt, float_operand(x)); }
Array rsqrt(const Array& x) { return unary(Prim::rsqrt, float_operand(x)); }
Array sin(const Array& x) { return unary(Prim::sin, float_operand(x)); }
Array cos(const Array& x) { return unary(Prim::cos, float_operand(x)); }
Array tanh(const Array& x) { return unary(Prim::tanh, float_operand(x)); }
Array erf(const Array& x) { return unary(Prim::erf, float_operand(x)); }
Array floor(const Array& x) { return is_float(x.dtype()) ? unary(Prim::floor, x) : x; }
Array ceil(const Array& x) { return is_float(x.dtype()) ? unary(Prim::ceil, x) : x; }
Array square(const Array& x) { return x * x; }
Array logical_not(const Array& x) { return unary(Prim::logical_not, x); }

Array add(const Array& a, const Array& b) { return binary(Prim::add, a, b); }
Array subtract(const Array& a, const Array& b) { return binary(Prim::sub, a, b); }
Array multiply(const Array& a, const Array& b) { return binary(Prim::mul, a, b); }
Array divide(const Array& a, const Array& b) { return binary(Prim::div, float_operand(a), float_operand(b)); }
Array remainder(const Array& a, const Array& b) { return binary(Prim::rem, a, b); }
Array power(const Array& a, const Array& b) { return binary(Prim::pow, float_operand(a), float_operand(b)); }
Array maximum(const Array& a, const Array& b) { return binary(Prim::max, a, b); }
Array minimum(const Array& a, const Array& b) { return binary(Prim::min, a, b); }
#define PL_JNP_BINARY_SCALAR(fn)                                                      \
  Array fn(const Array& a, Scalar b) { return fn(a, scalar_like(a, b)); }             \
  Array fn(Scalar a, const Array& b) { return fn(scalar_like(b, a), b); }
PL_JNP_BINARY_SCALAR(add) PL_JNP_BINARY_SCALAR(subtract) PL_JNP_BINARY_SCALAR(multiply)
PL_JNP_BINARY_SCALAR(divide) PL_JNP_BINARY_SCALAR(power) PL_JNP_BINARY_SCALAR(maximum)
PL_JNP_BINARY_SCALAR(minimum)
#undef PL_JNP_BINARY_SCALAR
Array equal(const Array& a, const Array& b) { return binary(Prim::eq, a, b); }
Array not_equal(const Array& a, const Array& b) { return binary(Prim::ne, a, b); }
Array less(const Array& a, const Array& b) { return binary(Prim::lt, a, b); }
Array less_equal(const Array& a, const Array& b) { return binary(Prim::le, a, b); }
Array greater(const Array& a, const Array& b) { return binary(Prim::gt, a, b); }
Array greater_equal(const Array& a, const Array& b) { return binary(Prim::ge, a, b); }
Array logical_and(const Array& a, const Array& b) { return binary(Prim::bit_and, cast(a, bool_), cast(b, bool_)); }
Array logical_or(const Array& a, const Array& b) { return binary(Prim::bit_or, cast(a, bool_), cast(b, bool_)); }
Array where(const Array& c, const Array& a, const Array& b) {
  const DType t = program::promote_types(a.dtype(), b.dtype());
  return program::bind1(Prim::select, {}, {cast(c, bool_), cast(a, t), cast(b, t)});
}
Array where(const Array& c, const Array& a, Scalar b) { return where(c, a, scalar_like(a, b)); }
Array where(const Array& c, Scalar a, const Array& b) { return where(c, scalar_like(b, a), b); }
Array astype(const Array& x, DType t) { return cast(x, t); }

Array sum(const Array& x, std::vector<int64_t> axes, bool keepdims) {
  return reduce(Prim::reduce_sum, x.dtype() == bool_ ? cast(x, i32) : x, std::move(axes), keepdims);
}
Array max(const Array& x, std::vector<int64_t> axes, bool keepdims) { return reduce(Prim::reduce_max, x, std::move(axes), keepdims); }
Array min(const Array& x, std::vector<int64_t> axes, bool keepdims) { return reduce(Prim::reduce_min, x, std::move(axes), keepdims); }
Array mean(const Array& x, std::vector<int64_t> axes, bool keepdims) {
  if (axes.empty()) axes = all_axes(x);
  axes = normalise(std::move(axes), x.ndim(), "mean");
  int64_t n = 1;
  for (int64_t a : axes) n *= x.shape()[static_cast<size_t>(a)];
  return sum(float_operand(x), axes, keepdims) / static_cast<double>(n);
}
Array logsumexp(const Array& x, std::vector<int64_t> axes, bool keepdims) {
  const Array xf = float_operand(x);
  const Array m = lax::stop_gradient(max(xf, axes, true));
  Array r = log(sum(exp(xf - m), axes, true)) + m;
  if (keepdims) return r;
  if (axes.empty()) axes = all_axes(x);
  return squeeze(r, normalise(std::move(axes), x.ndim(), "logsumexp"));
}
Array argmax(const Array& x, std::optional<int64_t> axis) { return arg_reduce(Prim::argmax, x, axis); }
Array argmin(const Array& x, std::optional<int64_t> axis) { return arg_reduce(Prim::argmin, x, axis); }

Array matmul(const Array& a0, const Array& b0) {
  PL_CHECK(a0.ndim() >= 1 && b0.ndim() >= 1, "matmul: operands must have rank >= 1, got ", shape_str(a0.shape()), " and ",
           shape_str(b0.shape()), program::trace_location());
  const bool vec_a = a0.ndim() == 1, vec_b = b0.ndim() == 1;
  Array a = vec_a ? reshape(a0, {1, a0.shape()[0]}) : a0;
  Array b = vec_b ? reshape(b0, {b0.shape()[0], 1}) : b0;
  const DType t = program::promote_types(a.dtype(), b.dtype());
  a = cast(a, t == bool_ ? i32 : t);
  b = cast(b, t == bool_ ? i32 : t);
  // Over an empty contraction the product is zeros (there is no block of k for a kernel to run).
  auto product = [](const Array& x, const Array& y) {
    if (x.shape().back() != 0) return program::bind1(Prim::matmul, {}, {x, y});
    Shape s(x.shape().begin(), x.shape().end() - 1);
    s.push_back(y.shape().back());
    return lax::full(s, 0.0, x.dtype());
  };
  Array r;
  Shape out;
  if (a.ndim() > 2 && b.ndim() == 2) {
    // (..., m, k) x (k, n): the leading dimensions fold into the rows, so that this is one GEMM and
    // b's gradient one contraction over all of them (accumulated in float32), not a batch of
    // products of b's copies summed afterwards.
    out.assign(a.shape().begin(), a.shape().end() - 1);
    r = product(reshape(a, {numel(out), a.shape().back()}), b);
    out.push_back(b.shape()[1]);
  } else {
    Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
    const Shape batch = program::broadcast_shapes(ba, bb, "matmul");
    auto with_batch = [&](const Array& x) {
      Shape s = batch;
      s.push_back(x.shape()[x.shape().size() - 2]);
      s.push_back(x.shape().back());
      return x.shape() == s ? x : broadcast_to(x, s);
    };
    r = product(with_batch(a), with_batch(b));
    out = r.shape();
  }
  if (vec_b) out.erase(out.end() - 1);
  if (vec_a) out.erase(out.end() - (vec_b ? 1 : 2));
  return out == r.shape() ? r : reshape(r, out);
}
Array dot(const Array& a, const Array& b) { return matmul(a, b); }

Array reshape(const Array& x, Shape shape) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      PL_CHECK(infer < 0, "reshape: only one dimension can be -1, got ", shape_str(shape), program::trace_location());
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    PL_CHECK(known != 0 && x.size() % known == 0, "reshape: cannot reshape ", shape_str(x.shape()), " into ",
             shape_str(shape), program::trace_location());
    shape[static_cast<size_t>(infer)] = x.size() / known;
  }
  if (shape == x.shape()) return x;
  Params q;
  q.shape = std::move(shape);
  return program::bind1(Prim::reshape, q, {x});
}
Array transpose(const Array& x, std::vector<int64_t> perm) {
  if (perm.empty())
    for (int64_t d = x.ndim() - 1; d >= 0; --d) perm.push_back(d);
  perm = normalise(std::move(perm), x.ndim(), "transpose");
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity && static_cast<int64_t>(perm.size()) == x.ndim()) return x;
  Params q;
  q.axes = std::move(perm);
  return program::bind1(Prim::transpose, q, {x});
}
Array broadcast_to(const Array& x, Shape shape) {
  if (x.shape() == shape) return x;
  Params q;
  q.shape = std::move(shape);
  return program::bind1(Prim::broadcast, q, {x});
}
Array concatenate(const std::vector<Array>& xs, int64_t axis) {
  PL_CHECK(!xs.empty(), "concatenate: needs at least one array", program::trace_location());
  if (xs.size() == 1) return xs[0];
  constexpr size_t kChunk = program::kMaxConcatOperands;
  if (xs.size() > kChunk) {
    std::vector<Array> parts;
    for (size_t i = 0; i < xs.size(); i += kChunk)
      parts.push_back(concatenate(std::vector<Array>(xs.begin() + static_cast<std::ptrdiff_t>(i),
                                                     xs.begin() + static_cast<std::ptrdiff_t>(std::min(xs.size(), i + kChunk))),
                                  axis));
    return concatenate(parts, axis);
  }
  DType t = xs[0].dtype();
  for (const Array& x : xs) t = program::promote_types(t, x.dtype());
  std::vector<Array> cs;
  for (const Array& x : xs) cs.push_back(cast(x, t));
  Params q;
  q.axis = normalise({axis}, xs[0].ndim(), "concatenate")[0];
  return program::bind1(Prim::concatenate, q, cs);
}
Array stack(const std::vector<Array>& xs, int64_t axis) {
  PL_CHECK(!xs.empty(), "stack: needs at least one array", program::trace_location());
  const int64_t a = normalise({axis}, xs[0].ndim() + 1, "stack")[0];
  std::vector<Array> parts;
  for (const Array& x : xs) {
    PL_CHECK(x.shape() == xs[0].shape(), "stack: arrays have different shapes ", shape_str(xs[0].shape()), " and ",
             shape_str(x.shape()), program::trace_location());
    parts.push_back(expand_dims(x, a));
  }
  return concatenate(parts, a);
}
Array squeeze(const Array& x, std::vector<int64_t> axes) {
  if (axes.empty())
    for (int64_t d = 0; d < x.ndim(); ++d)
      if (x.shape()[static_cast<size_t>(d)] == 1) axes.push_back(d);
  axes = normalise(std::move(axes), x.ndim(), "squeeze");
  Shape out;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    const bool drop = std::find(axes.begin(), axes.end(), d) != axes.end();
    PL_CHECK(!drop || x.shape()[static_cast<size_t>(d)] == 1, "squeeze: axis ", d, " of ", shape_str(x.shape()),
             " does not have size 1", program::trace_location());
    if (!drop) out.push_back(x.shape()[static_cast<size_t>(d)]);
  }
  return reshape(x, out);
}
Array expand_dims(const Array& x, int64_t axis) {
  const int64_t a = normalise({axis}, x.ndim() + 1, "expand_dims")[0];
  Shape s = x.shape();
  s.insert(s.begin() + a, 1);
  return reshape(x, s);
}
Array pad(const Array& x, const std::vector<std::pair<int64_t, int64_t>>& widths, double value) {
  PL_CHECK(static_cast<int64_t>(widths.size()) == x.ndim(), "pad: ", widths.size(), " (low, high) pairs for an array of rank ",
           x.ndim(), program::trace_location());
  Params q;
  bool none = true;  // a pad of nothing is x itself (slice's gradient pads one dimension at a time)
  for (auto [l, h] : widths) {
    q.lo.push_back(l);
    q.hi.push_back(h);
    none = none && l == 0 && h == 0;
  }
  if (none) return x;
  q.scalar = value;
  return program::bind1(Prim::pad, q, {x});
}
// `value` of x's shape (and of `dtype`, else x's), where x lives: traced with x, or on x's device
// when x is an eager device array (a host array of x's size would be copied in by the first op
// reading it). An undefined (none) x is an Error naming `op`.
static Array filled_like(const char* op, const Array& x, double value, std::optional<DType> dtype) {
  PL_CHECK(x.defined(), op, ": its argument is an undefined (none) Array", program::trace_location());
  Array scalar = lax::full({}, value, dtype.value_or(x.dtype()));
  if (!x.is_tracer() && !x.is_sharded() && x.device().kind != Device::cpu)
    scalar = program::uploaded_scalar(scalar, x.device());
  return broadcast_to(scalar, x.shape());
}
Array full_like(const Array& x, double value, DType dtype) { return filled_like("full_like", x, value, dtype); }
Array full_like(const Array& x, double value) { return filled_like("full_like", x, value, std::nullopt); }
Array zeros_like(const Array& x) { return filled_like("zeros_like", x, 0.0, std::nullopt); }
Array ones_like(const Array& x) { return filled_like("ones_like", x, 1.0, std::nullopt); }
}  // namespace jnp

namespace lax {
Array slice(const Array& x, std::vector<int64_t> start, std::vector<int64_t> limit, std::vector<int64_t> strides) {
  if (strides.empty()) strides.assign(start.size(), 1);
  Params q;
  q.lo = std::move(start);
  q.hi = std::move(limit);
  q.step = std::move(strides);
  return program::bind1(Prim::slice, q, {x});
}
Array index(const Array& x, int64_t i) {
  PL_CHECK(x.ndim() >= 1, "index: a scalar cannot be indexed", program::trace_location());
  const int64_t n = x.shape()[0];
  PL_CHECK(i >= -n && i < n, "index: index ", i, " is out of range for axis 0 of ", shape_str(x.shape()),
           program::trace_location());
  if (i < 0) i += n;
  std::vector<int64_t> lo(static_cast<size_t>(x.ndim()), 0), hi(x.shape().begin(), x.shape().end());
  lo[0] = i;
  hi[0] = i + 1;
  Shape out(x.shape().begin() + 1, x.shape().end());
  return jnp::reshape(slice(x, lo, hi), out);
}
Array dynamic_slice(const Array& x, const std::vector<Array>& starts, Shape sizes) {
  PL_CHECK(static_cast<int64_t>(starts.size()) == x.ndim(), "dynamic_slice: ", starts.size(),
           " start indices for an array of rank ", x.ndim(), program::trace_location());
  std::vector<Array> ins{x};
  for (const Array& s : starts) ins.push_back(cast(s, i32));
  Params q;
  q.shape = std::move(sizes);
  return program::bind1(Prim::dynamic_slice, q, ins);
}
Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& starts) {
  PL_CHECK(static_cast<int64_t>(starts.size()) == x.ndim(), "dynamic_update_slice: ", starts.size(),
           " start indices for an array of rank ", x.ndim(), program::trace_location());
  std::vector<Array> ins{x, cast(update, x.dtype())};
  for (const Array& s : starts) ins.push_back(cast(s, i32));
  return program::bind1(Prim::dynamic_update_slice, {}, ins);
}
Array dynamic_index(const Array& x, const Array& i) {
  PL_CHECK(x.ndim() >= 1, "dynamic_index: a scalar cannot be indexed", program::trace_location());
  std::vector<Array> starts{i};
  Shape sizes = x.shape();
  sizes[0] = 1;
  for (int64_t d = 1; d < x.ndim(); ++d) starts.push_back(lax::full(Shape{}, 0.0, i32));
  return jnp::reshape(dynamic_slice(x, starts, sizes), Shape(x.shape().begin() + 1, x.shape().end()));
}
Array stop_gradient(const Array& x) { return unary(Prim::stop_gradient, x); }
Array iota(DType dtype, Shape shape, int64_t dimension) {
  Params q;
  q.dtype = dtype;
  q.shape = std::move(shape);
  q.axis = dimension;
  return program::bind1(Prim::iota, q, {});
}
Array full(Shape shape, double value, DType dtype) {
  Params q;
  q.dtype = dtype;
  q.shape = std::move(shape);
  q.scalar = value;
  return program::bind1(Prim::full, q, {});
}
Array logistic(const Array& x) { return unary(Prim::logistic, float_operand(x)); }
}  // namespace lax

namespace nn {
Array relu(const Array& x) { return jnp::maximum(x, 0); }
Array sigmoid(const Array& x) { return lax::logistic(x); }
Array silu(const Array& x) { return x * lax::logistic(x); }
Array gelu(const Array& x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + jnp::tanh(c * (x + 0.044715 * x * x * x)));
}
Array softmax(const Array& x, int64_t axis) {
  const Array e = jnp::exp(x - lax::stop_gradient(jnp::max(x, {axis}, true)));
  return e / jnp::sum(e, {axis}, true);
}
Array log_softmax(const Array& x, int64_t axis) {
  const Array s = x - lax::stop_gradient(jnp::max(x, {axis}, true));
  return s - jnp::log(jnp::sum(jnp::exp(s), {axis}, true));
}
}  // namespace nn

Array operator+(const Array& a, const Array& b) { return jnp::add(a, b); }
Array operator-(const Array& a, const Array& b) { return jnp::subtract(a, b); }
Array operator*(const Array& a, const Array& b) { return jnp::multiply(a, b); }
Array operator/(const Array& a, const Array& b) { return jnp::divide(a, b); }
Array operator%(const Array& a, const Array& b) { return jnp::remainder(a, b); }
Array operator-(const Array& a) { return jnp::neg(a); }
Array operator<(const Array& a, const Array& b) { return jnp::less(a, b); }
Array operator<=(const Array& a, const Array& b) { return jnp::less_equal(a, b); }
Array operator>(const Array& a, const Array& b) { return jnp::greater(a, b); }
Array operator>=(const Array& a, const Array& b) { return jnp::greater_equal(a, b); }
Array operator==(const Array& a, const Array& b) { return jnp::equal(a, b); }
Array operator!=(const Array& a, const Array& b) { return jnp::not_equal(a, b); }
Array operator&(const Array& a, const Array& b) { return binary(Prim::bit_and, a, b); }
Array operator|(const Array& a, const Array& b) { return binary(Prim::bit_or, a, b); }
Array operator!(const Array& a) { return jnp::logical_not(a); }
Array& operator+=(Array& a, const Array& b) { return a = a + b; }
Array& operator-=(Array& a, const Array& b) { return a = a - b; }
Array& operator*=(Array& a, const Array& b) { return a = a * b; }

}  // namespace palladium
