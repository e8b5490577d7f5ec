// Value: literals, arithmetic with NumPy broadcasting and JAX promotion, layout methods.

#include "palladium/lang.h"
#include "palladium/value.h"
#include "trace/context.h"

namespace palladium {

using trace::as_value;
using trace::builder;
using trace::wrap;

Value::Value(const Array& captured) {
  const std::string what = "array of shape " + shape_str(captured.shape()) + " and dtype " +
                           (captured.defined() ? dtype_name(captured.dtype()) : "none");
  if (trace::Context::active())
    builder("kernel").fail("capture", "the kernel captures an " + what +
                                          "; kernels cannot close over Arrays: pass it to the call as an input");
  throw Error("an Array (" + what + ") cannot become a kernel Value outside a kernel");
}

Value Value::from_id(int32_t id) {
  Value v;
  v.kind_ = Kind::Traced;
  v.id_ = id;
  v.generation_ = trace::Context::current("Value").generation();
  return v;
}

int32_t Value::id() const {
  switch (kind_) {
    case Kind::None: builder("Value").fail("value", "got an empty Value (default-constructed, never assigned)");
    case Kind::Literal: return builder("Value").constant(lit_dtype_, {}, lit_);
    case Kind::Traced: break;
  }
  trace::Context& ctx = trace::Context::current("Value");
  if (generation_ != ctx.generation())
    ctx.builder().fail("value", "uses a Value from another kernel's trace (Values cannot be kept between kernels)");
  return id_;
}

Shape Value::shape() const {
  if (kind_ != Kind::Traced) return {};
  return builder("Value::shape").type(id()).shape;
}

DType Value::dtype() const {
  if (kind_ == Kind::Literal) return lit_dtype_;
  if (kind_ == Kind::None) return DType::float32;
  return builder("Value::dtype").type(id()).dtype;
}

static int64_t norm_axis(int64_t axis, int64_t rank, const char* op) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    builder(op).fail(op, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return a;
}

Value Value::astype(DType t) const { return wrap(builder("astype").cast(as_value(*this, "astype"), t)); }

Value Value::T() const {
  std::vector<int64_t> perm(static_cast<size_t>(ndim()));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(perm.size() - 1 - i);
  return transpose(perm);
}

Value Value::transpose(std::vector<int64_t> perm) const {
  return wrap(builder("transpose").transpose(as_value(*this, "transpose"), std::move(perm)));
}

Value Value::reshape(Shape s) const {
  ir::ValueId id = as_value(*this, "reshape");
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) builder("reshape").fail("reshape", "more than one -1 in " + shape_str(s));
      infer = static_cast<int64_t>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0 && known > 0) s[static_cast<size_t>(infer)] = numel(builder("reshape").type(id).shape) / known;
  return wrap(builder("reshape").reshape(id, std::move(s)));
}

Value Value::broadcast_to(Shape s) const {
  builder("broadcast_to").check_shape("broadcast_to", s);
  if (is_literal()) return wrap(builder("broadcast_to").constant(dtype(), s, lit_));
  return wrap(as_value(*this, dtype(), s, "broadcast_to"));
}

Value Value::expand_dims(int64_t axis) const {
  Shape s = shape();
  int64_t a = norm_axis(axis, static_cast<int64_t>(s.size()) + 1, "expand_dims");
  s.insert(s.begin() + a, 1);
  return reshape(s);
}

#define PL_REDUCE_METHOD(method, OP)                                                                 \
  Value Value::method(std::optional<int64_t> axis) const {                                            \
    ir::ValueId id = as_value(*this, #method);                                                        \
    const Shape s = builder(#method).type(id).shape;                                                 \
    if (!axis) { /* every axis: reduce the flattened tile */                                          \
      id = builder(#method).reshape(id, {numel(s)});                                                  \
      return wrap(builder(#method).reduce(ir::Op::OP, id, 0));                                        \
    }                                                                                                  \
    int64_t a = norm_axis(*axis, static_cast<int64_t>(s.size()), #method);                            \
    return wrap(builder(#method).reduce(ir::Op::OP, id, static_cast<int>(a)));                        \
  }
PL_REDUCE_METHOD(sum, ReduceSum)
PL_REDUCE_METHOD(max, ReduceMax)
PL_REDUCE_METHOD(min, ReduceMin)
PL_REDUCE_METHOD(argmax, ArgMax)
PL_REDUCE_METHOD(argmin, ArgMin)
#undef PL_REDUCE_METHOD

Value Value::index(const std::vector<IndexArg>& args) const {
  // Static indexing of a tile supports the layout idioms: `...`, full slices and new axes.
  const Shape s = shape();
  Shape out;
  size_t dim = 0;
  size_t consumed = 0;
  for (const IndexArg& a : args)
    if (!std::holds_alternative<NoneTag>(a.v) && !std::holds_alternative<EllipsisTag>(a.v)) ++consumed;
  if (consumed > s.size())
    builder("index").fail("index", "too many indices (" + std::to_string(consumed) + ") for a Value of shape " + shape_str(s));
  for (const IndexArg& a : args) {
    if (std::holds_alternative<NoneTag>(a.v)) {
      out.push_back(1);
    } else if (std::holds_alternative<EllipsisTag>(a.v)) {
      size_t n = s.size() - consumed;
      for (size_t i = 0; i < n; ++i) out.push_back(s[dim++]);
      consumed = s.size();
    } else if (const Slice* sl = std::get_if<Slice>(&a.v); sl && sl->start == 0 && sl->stop == INT64_MAX && sl->step == 1) {
      out.push_back(s[dim++]);
    } else {
      builder("index").fail("index", "a Value can be indexed only with pl::all, full slices and pl::None; "
                                     "load the part you need from the Ref instead");
    }
  }
  while (dim < s.size()) out.push_back(s[dim++]);
  return reshape(out);
}

namespace trace {

Value binary_op(ir::Op op, const Value& a, const Value& b, const char* name) {
  DType t = trace::result_dtype(a, b);
  Shape s = trace::broadcast_shapes(a.shape(), b.shape(), name);
  ir::ValueId ia = as_value(a, t, s, name), ib = as_value(b, t, s, name);
  ir::Builder& bld = builder(name);
  return wrap(ir::op_family(op) == ir::Family::Compare ? bld.compare(op, ia, ib) : bld.binary(op, ia, ib));
}

}  // namespace trace

Value operator+(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Add, a, b, "add"); }
Value operator-(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Sub, a, b, "sub"); }
Value operator*(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Mul, a, b, "mul"); }
Value operator/(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Div, a, b, "div"); }
Value operator%(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Rem, a, b, "rem"); }
Value operator==(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Eq, a, b, "eq"); }
Value operator!=(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Ne, a, b, "ne"); }
Value operator<(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Lt, a, b, "lt"); }
Value operator<=(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Le, a, b, "le"); }
Value operator>(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Gt, a, b, "gt"); }
Value operator>=(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Ge, a, b, "ge"); }
Value operator&(const Value& a, const Value& b) { return trace::binary_op(ir::Op::And, a, b, "and"); }
Value operator|(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Or, a, b, "or"); }
Value operator^(const Value& a, const Value& b) { return trace::binary_op(ir::Op::Xor, a, b, "xor"); }
Value operator-(const Value& a) { return jnp::neg(a); }
Value operator!(const Value& a) { return jnp::logical_not(a); }
Value operator~(const Value& a) {
  return wrap(builder("not").unary(ir::Op::Not, as_value(a, "not")));
}
Value& operator+=(Value& a, const Value& b) { return a = a + b; }
Value& operator-=(Value& a, const Value& b) { return a = a - b; }
Value& operator*=(Value& a, const Value& b) { return a = a * b; }
Value& operator/=(Value& a, const Value& b) { return a = a / b; }


}  // namespace palladium
