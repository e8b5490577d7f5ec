// Reference array operations on host Arrays. Values are computed in float64 and rounded to the
// result dtype; when the result and both operands are integers (or bool) the arithmetic is done in
// int64 instead, so that large integers stay exact, and wraps to the result width as NumPy does.
#include "palladium/host_ops.h"

#include "core/host_threads.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace palladium {

namespace {

void check_host(const char* op, const Array& a) {
  PL_CHECK(a.defined(), op, ": an operand is undefined (none)");
  PL_CHECK(a.device().kind == Device::cpu, op, ": an operand is on ", a.device().str(),
           "; these reference ops run on host arrays");
}

int64_t normalize_axis(const char* op, int64_t axis, int64_t rank) {
  PL_CHECK(axis >= -rank && axis < rank, op, ": axis ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

// NumPy broadcasting of two shapes: the result shape and, for each operand, the element stride
// along each result axis (0 where the operand is broadcast).
struct Broadcast {
  Shape shape;
  std::vector<int64_t> a_strides, b_strides;
};

Broadcast broadcast(const char* op, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Broadcast out;
  out.shape.assign(rank, 1);
  out.a_strides.assign(rank, 0);
  out.b_strides.assign(rank, 0);
  const std::vector<int64_t> a_strides = row_major_strides(a), b_strides = row_major_strides(b);
  for (size_t i = 0; i < rank; ++i) {
    // Align trailing axes; missing leading axes have size 1.
    const size_t a_axis = i + a.size(), b_axis = i + b.size();
    const int64_t a_dim = a_axis >= rank ? a[a_axis - rank] : 1;
    const int64_t b_dim = b_axis >= rank ? b[b_axis - rank] : 1;
    PL_CHECK(a_dim == b_dim || a_dim == 1 || b_dim == 1, op, ": operands could not be broadcast together with shapes ",
             shape_str(a), " and ", shape_str(b));
    out.shape[i] = a_dim == 1 ? b_dim : a_dim;
    if (a_dim != 1) out.a_strides[i] = a_strides[a_axis - rank];
    if (b_dim != 1) out.b_strides[i] = b_strides[b_axis - rank];
  }
  return out;
}

// Calls fn(out_index, a_index, b_index) for every element of the broadcast result, in order.
void for_each_broadcast(const Broadcast& bc, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  const int64_t n = numel(bc.shape);
  std::vector<int64_t> counter(bc.shape.size(), 0);
  int64_t a_index = 0, b_index = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, a_index, b_index);
    for (size_t axis = bc.shape.size(); axis-- > 0;) {
      if (++counter[axis] < bc.shape[axis]) {
        a_index += bc.a_strides[axis];
        b_index += bc.b_strides[axis];
        break;
      }
      a_index -= bc.a_strides[axis] * (bc.shape[axis] - 1);
      b_index -= bc.b_strides[axis] * (bc.shape[axis] - 1);
      counter[axis] = 0;
    }
  }
}

template <class FloatOp, class IntOp>
Array elementwise(const char* op, const Array& a, const Array& b, FloatOp float_op, IntOp int_op) {
  check_host(op, a);
  check_host(op, b);
  const Broadcast bc = broadcast(op, a.shape(), b.shape());
  const DType t = a.dtype();
  Array out(bc.shape, t);
  const char* pa = static_cast<const char*>(a.data());
  const char* pb = static_cast<const char*>(b.data());
  char* po = static_cast<char*>(out.data());
  const int sa = itemsize(a.dtype()), sb = itemsize(b.dtype()), so = itemsize(t);
  const bool integral = !is_float(t) && !is_float(b.dtype());
  if (a.shape() == b.shape()) {  // no broadcasting: element i of each, spread over threads
    parallel_chunks(out.size(), int64_t{1} << 18, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        if (integral)
          store_from_int64(t, po + i * so, int_op(load_as_int64(a.dtype(), pa + i * sa), load_as_int64(b.dtype(), pb + i * sb)));
        else
          store_from_double(t, po + i * so, float_op(load_as_double(a.dtype(), pa + i * sa), load_as_double(b.dtype(), pb + i * sb)));
    });
    return out;
  }
  if (integral) {
    for_each_broadcast(bc, [&](int64_t o, int64_t i, int64_t j) {
      store_from_int64(t, po + o * so, int_op(load_as_int64(a.dtype(), pa + i * sa), load_as_int64(b.dtype(), pb + j * sb)));
    });
  } else {
    for_each_broadcast(bc, [&](int64_t o, int64_t i, int64_t j) {
      store_from_double(t, po + o * so, float_op(load_as_double(a.dtype(), pa + i * sa), load_as_double(b.dtype(), pb + j * sb)));
    });
  }
  return out;
}

// Two's-complement arithmetic without signed overflow.
int64_t wrapping(uint64_t v) { return static_cast<int64_t>(v); }
uint64_t as_unsigned(int64_t v) { return static_cast<uint64_t>(v); }

double nan_max(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::quiet_NaN();
  return x < y ? y : x;
}

void check_same_shape(const char* op, const Array& a, const Array& b) {
  check_host(op, a);
  check_host(op, b);
  PL_CHECK(a.shape() == b.shape(), op, ": shapes differ: ", shape_str(a.shape()), " and ", shape_str(b.shape()));
}

}  // namespace

Array add(const Array& a, const Array& b) {
  return elementwise("add", a, b, [](double x, double y) { return x + y; },
                     [](int64_t x, int64_t y) { return wrapping(as_unsigned(x) + as_unsigned(y)); });
}

Array subtract(const Array& a, const Array& b) {
  return elementwise("subtract", a, b, [](double x, double y) { return x - y; },
                     [](int64_t x, int64_t y) { return wrapping(as_unsigned(x) - as_unsigned(y)); });
}

Array multiply(const Array& a, const Array& b) {
  return elementwise("multiply", a, b, [](double x, double y) { return x * y; },
                     [](int64_t x, int64_t y) { return wrapping(as_unsigned(x) * as_unsigned(y)); });
}

Array maximum(const Array& a, const Array& b) {
  return elementwise("maximum", a, b, nan_max, [](int64_t x, int64_t y) { return std::max(x, y); });
}

Array relu(const Array& a) {
  check_host("relu", a);
  Array zero = zeros({}, a.dtype());
  return maximum(a, zero);
}

Array matmul(const Array& a, const Array& b) {
  check_host("matmul", a);
  check_host("matmul", b);
  PL_CHECK(a.ndim() >= 1 && b.ndim() >= 1, "matmul: operands must have rank >= 1, got shapes ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  // As NumPy: a vector operand gains a unit axis (rows for a, columns for b) that the result drops.
  Shape as = a.shape(), bs = b.shape();
  if (a.ndim() == 1) as.insert(as.begin(), 1);
  if (b.ndim() == 1) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  PL_CHECK(bs[bs.size() - 2] == k, "matmul: contracting dimensions differ: shapes ", shape_str(a.shape()), " and ",
           shape_str(b.shape()));
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const Broadcast bc = broadcast("matmul", a_batch, b_batch);
  std::vector<std::array<int64_t, 3>> batches;  // (out, a, b) matrix indices
  for_each_broadcast(bc, [&](int64_t o, int64_t i, int64_t j) { batches.push_back({o, i, j}); });

  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  std::vector<double> z(batches.size() * static_cast<size_t>(m * n), 0.0);
  // Rows of all batches are independent; spread them over threads for large products.
  const int64_t rows = static_cast<int64_t>(batches.size()) * m;
  auto compute_rows = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const auto& [o, i, j] = batches[static_cast<size_t>(row / m)];
      const int64_t r = row % m;
      const double* xr = x.data() + (i * m + r) * k;
      const double* yb = y.data() + j * k * n;
      double* zr = z.data() + (o * m + r) * n;
      for (int64_t p = 0; p < k; ++p) {
        const double xv = xr[p];
        const double* yr = yb + p * n;
        for (int64_t c = 0; c < n; ++c) zr[c] += xv * yr[c];
      }
    }
  };
  // A chunk of rows is worth a thread from about 2^21 multiply-adds on.
  const int64_t row_work = std::max<int64_t>(k * n, 1);
  parallel_chunks(rows, ((int64_t{1} << 21) + row_work - 1) / row_work, compute_rows);

  Shape out_shape = bc.shape;
  if (a.ndim() > 1) out_shape.push_back(m);
  if (b.ndim() > 1) out_shape.push_back(n);
  Array out(out_shape, a.dtype());
  char* po = static_cast<char*>(out.data());
  for (size_t i = 0; i < z.size(); ++i) store_from_double(out.dtype(), po + i * static_cast<size_t>(itemsize(out.dtype())), z[i]);
  return out;
}

Array transpose(const Array& a, std::vector<int64_t> perm) {
  check_host("transpose", a);
  const int64_t rank = a.ndim();
  if (perm.empty() && rank > 0) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  PL_CHECK(static_cast<int64_t>(perm.size()) == rank, "transpose: permutation of length ", perm.size(),
           " for an array of shape ", shape_str(a.shape()));
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (auto& p : perm) {
    p = normalize_axis("transpose", p, rank);
    PL_CHECK(!seen[static_cast<size_t>(p)], "transpose: axis ", p, " repeats in the permutation");
    seen[static_cast<size_t>(p)] = true;
  }
  const std::vector<int64_t> in_strides = row_major_strides(a.shape());
  Broadcast walk;  // reuse the strided walk: "a" is the input, read through permuted strides
  for (int64_t p : perm) {
    walk.shape.push_back(a.shape()[static_cast<size_t>(p)]);
    walk.a_strides.push_back(in_strides[static_cast<size_t>(p)]);
    walk.b_strides.push_back(0);
  }
  Array out(walk.shape, a.dtype());
  const size_t size = static_cast<size_t>(itemsize(a.dtype()));
  const char* src = static_cast<const char*>(a.data());
  char* dst = static_cast<char*>(out.data());
  for_each_broadcast(walk, [&](int64_t o, int64_t i, int64_t) {
    std::memcpy(dst + static_cast<size_t>(o) * size, src + static_cast<size_t>(i) * size, size);
  });
  return out;
}

Array stack(const std::vector<Array>& parts, int64_t axis) {
  PL_CHECK(!parts.empty(), "stack: needs at least one array");
  for (const Array& p : parts) {
    check_host("stack", p);
    PL_CHECK(p.shape() == parts[0].shape() && p.dtype() == parts[0].dtype(),
             "stack: all arrays must have the same shape and dtype, got ", shape_str(parts[0].shape()), " ",
             dtype_name(parts[0].dtype()), " and ", shape_str(p.shape()), " ", dtype_name(p.dtype()));
  }
  const Shape& shape = parts[0].shape();
  axis = normalize_axis("stack", axis, static_cast<int64_t>(shape.size()) + 1);
  Shape out_shape = shape;
  out_shape.insert(out_shape.begin() + axis, static_cast<int64_t>(parts.size()));
  Array out(out_shape, parts[0].dtype());
  const int64_t outer = numel(Shape(shape.begin(), shape.begin() + axis));
  const size_t inner = static_cast<size_t>(numel(Shape(shape.begin() + axis, shape.end()))) *
                       static_cast<size_t>(itemsize(out.dtype()));
  char* dst = static_cast<char*>(out.data());
  for (int64_t o = 0; o < outer; ++o)
    for (size_t p = 0; p < parts.size(); ++p)
      std::memcpy(dst + (static_cast<size_t>(o) * parts.size() + p) * inner,
                  static_cast<const char*>(parts[p].data()) + static_cast<size_t>(o) * inner, inner);
  return out;
}

Array take(const Array& a, int64_t index, int64_t axis) {
  check_host("take", a);
  PL_CHECK(a.ndim() >= 1, "take: needs an array of rank >= 1, got shape ", shape_str(a.shape()));
  axis = normalize_axis("take", axis, a.ndim());
  const int64_t dim = a.shape()[static_cast<size_t>(axis)];
  PL_CHECK(index >= -dim && index < dim, "take: index ", index, " is out of range for axis ", axis, " of shape ",
           shape_str(a.shape()));
  if (index < 0) index += dim;
  Shape out_shape = a.shape();
  out_shape.erase(out_shape.begin() + axis);
  Array out(out_shape, a.dtype());
  const int64_t outer = numel(Shape(a.shape().begin(), a.shape().begin() + axis));
  const size_t inner = static_cast<size_t>(numel(Shape(a.shape().begin() + axis + 1, a.shape().end()))) *
                       static_cast<size_t>(itemsize(a.dtype()));
  const char* src = static_cast<const char*>(a.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + static_cast<size_t>(o) * inner, src + static_cast<size_t>(o * dim + index) * inner, inner);
  return out;
}

double rel_error(const Array& a, const Array& ref) {
  check_same_shape("rel_error", a, ref);
  double diff2 = 0, ref2 = 0;
  const char* pa = static_cast<const char*>(a.data());
  const char* pr = static_cast<const char*>(ref.data());
  const int sa = itemsize(a.dtype()), sr = itemsize(ref.dtype());
  for (int64_t i = 0; i < a.size(); ++i) {
    const double x = load_as_double(a.dtype(), pa + i * sa), r = load_as_double(ref.dtype(), pr + i * sr);
    const double d = x == r ? 0.0 : x - r;  // equal infinities count as equal
    diff2 += d * d;
    ref2 += r * r;
  }
  if (ref2 == 0) return diff2 == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff2) / std::sqrt(ref2);
}

double max_abs_diff(const Array& a, const Array& b) {
  check_same_shape("max_abs_diff", a, b);
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (x == y) continue;
    const double d = std::fabs(x - y);
    if (std::isnan(d)) return d;  // NaN anywhere makes the difference NaN, as np.max does
    worst = std::max(worst, d);
  }
  return worst;
}

bool array_equal(const Array& a, const Array& b) {
  check_host("array_equal", a);
  check_host("array_equal", b);
  if (a.shape() != b.shape()) return false;
  const bool exact_ints = !is_float(a.dtype()) && !is_float(b.dtype());
  for (int64_t i = 0; i < a.size(); ++i) {
    if (exact_ints ? a.get_int(i) != b.get_int(i) : !(a.get(i) == b.get(i))) return false;
  }
  return true;
}

}  // namespace palladium
