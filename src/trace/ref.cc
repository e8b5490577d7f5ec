// Refs: resolving Pallas-style indices against a ref (and its views) into IR loads and stores.
#include "palladium/ref.h"

#include "trace/context.h"

namespace palladium {

using trace::as_value;
using trace::builder;
using trace::wrap;

namespace {

const ir::RefParam& param_of(const Ref& r, const char* op) {
  ir::Kernel& k = trace::Context::current(op).kernel();
  if (r.is_none()) builder(op).fail(op, "the ref is None (its input was not given)");
  return k.refs.at(static_cast<size_t>(r.param()));
}

struct Access {
  std::vector<ir::IndexEntry> entries;
  std::vector<ir::ValueId> starts;
  Shape shape;  // of the selected part
};

// One resolved dimension of an index: relative to the ref as the user sees it.
struct Dim {
  bool scalar = false;
  Value start;
  int64_t size = 1, stride = 1;
  bool gather = false;  // start is an integer tile: each lane's own index
};

std::vector<Dim> expand(const Ref& ref, const Indexer& index, const char* op) {
  const std::string name = param_of(ref, op).name;  // first: outside a kernel this names the op
  const Shape& shape = ref.shape();
  size_t explicit_dims = 0;
  bool has_ellipsis = false;
  for (const IndexArg& a : index.args) {
    if (std::holds_alternative<EllipsisTag>(a.v)) {
      if (has_ellipsis) builder(op).fail(op, "more than one pl::all (...) indexing ref " + name);
      has_ellipsis = true;
    } else if (std::holds_alternative<NoneTag>(a.v)) {
      builder(op).fail(op, "pl::None (a new axis) cannot index ref " + name + "; reshape the loaded Value instead");
    } else {
      ++explicit_dims;
    }
  }
  if (explicit_dims > shape.size())
    builder(op).fail(op, "too many indices (" + std::to_string(explicit_dims) + ") for ref " + name + " of shape " +
                             shape_str(shape));
  std::vector<Dim> dims;
  auto full = [&](size_t d) { dims.push_back({false, Value(0), shape[d], 1}); };
  for (const IndexArg& a : index.args) {
    const size_t d = dims.size();
    if (std::holds_alternative<EllipsisTag>(a.v)) {
      for (size_t i = 0; i < shape.size() - explicit_dims; ++i) full(dims.size());
    } else if (const int64_t* k = std::get_if<int64_t>(&a.v)) {
      int64_t i = *k < 0 ? *k + shape[d] : *k;
      if (i < 0 || i >= shape[d])
        builder(op).fail(op, "index " + std::to_string(*k) + " is out of bounds for dimension " + std::to_string(d) +
                                 " of ref " + name + " with shape " + shape_str(shape));
      dims.push_back({true, Value(i), 1, 1});
    } else if (const Value* v = std::get_if<Value>(&a.v)) {
      if (!is_integer(v->dtype()))
        builder(op).fail(op, "index " + std::to_string(d) + " of ref " + name + " must be an integer scalar or tile, got " +
                                 dtype_name(v->dtype()) + shape_str(v->shape()));
      dims.push_back({v->shape().empty(), *v, 1, 1, !v->shape().empty()});
    } else if (const Slice* s = std::get_if<Slice>(&a.v)) {
      const int64_t n = shape[d];
      if (s->step < 1) builder(op).fail(op, "slice step must be positive, got " + std::to_string(s->step));
      int64_t start = s->start < 0 ? std::max<int64_t>(s->start + n, 0) : std::min(s->start, n);
      int64_t stop = s->stop == INT64_MAX ? n : (s->stop < 0 ? std::max<int64_t>(s->stop + n, 0) : std::min(s->stop, n));
      int64_t size = stop > start ? (stop - start + s->step - 1) / s->step : 0;
      dims.push_back({false, Value(start), size, s->step});
    } else if (const DSlice* ds = std::get_if<DSlice>(&a.v)) {
      if (ds->size < 0 || ds->stride < 1)
        builder(op).fail(op, "pl::ds size must be >= 0 and stride >= 1, got size " + std::to_string(ds->size) +
                                 " stride " + std::to_string(ds->stride));
      if (!ds->start.is_literal() && (!ds->start.shape().empty() || !is_integer(ds->start.dtype())))
        builder(op).fail(op, "pl::ds start must be an integer scalar");
      dims.push_back({false, ds->start, ds->size, ds->stride});
    }
  }
  while (dims.size() < shape.size()) full(dims.size());
  return dims;
}

// Compose the user's dims (relative to the view) with the view onto the param's block.
Access resolve(const Ref& ref, const Indexer& index, const char* op) {
  std::vector<Dim> dims = expand(ref, index, op);
  if (!ref.view().empty()) {
    std::vector<Dim> composed;
    size_t u = 0;
    for (const Ref::ViewDim& v : ref.view()) {
      if (v.scalar) {
        composed.push_back({true, v.start, 1, 1});
        continue;
      }
      const Dim& d = dims[u++];
      Value start = (d.start.is_literal() && d.start.literal_value() == 0) ? v.start : v.start + d.start * v.stride;
      composed.push_back({d.scalar, start, d.scalar ? 1 : d.size, d.stride * v.stride, d.gather});
    }
    dims = std::move(composed);
  }
  // Gathers: the index tiles broadcast together; the access has their shape (no slices beside).
  std::optional<Shape> gather_shape;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!dims[i].gather) continue;
    gather_shape = gather_shape ? trace::broadcast_shapes(*gather_shape, dims[i].start.shape(), op) : dims[i].start.shape();
  }
  Access acc;
  for (size_t i = 0; i < dims.size(); ++i) {
    const Dim& d = dims[i];
    if (gather_shape && !d.scalar && !d.gather)
      builder(op).fail(op, "dimension " + std::to_string(i) + " of ref " + param_of(ref, op).name +
                               " is a slice beside integer-tile indices; index every non-scalar dimension with a tile "
                               "(broadcast iotas select a rectangle)");
    if (d.gather) {
      acc.entries.push_back({false, 1, 1, true});
      acc.starts.push_back(as_value(d.start, d.start.dtype(), *gather_shape, op));
      continue;
    }
    acc.entries.push_back({d.scalar, d.scalar ? 1 : d.size, d.stride});
    acc.starts.push_back(as_value(d.start, d.start.is_literal() ? DType::int32 : d.start.dtype(), {}, op));
    if (!d.scalar) acc.shape.push_back(d.size);
  }
  if (gather_shape) acc.shape = *gather_shape;
  return acc;
}

ir::ValueId mask_value(const std::optional<Value>& mask, const Shape& shape, const char* op) {
  if (!mask) return -1;
  if (mask->dtype() != DType::bool_ && !mask->is_literal())
    builder(op).fail(op, std::string("mask must be bool, not ") + dtype_name(mask->dtype()));
  return as_value(*mask, DType::bool_, shape, op);
}

ir::ValueId stored_value(const Ref& ref, const Value& v, const Shape& shape, const char* op) {
  if (!v.is_literal() && v.dtype() != ref.dtype())
    builder(op).fail(op, std::string("value of dtype ") + dtype_name(v.dtype()) + " does not match ref " +
                             param_of(ref, op).name + " of dtype " + dtype_name(ref.dtype()) + "; use astype");
  return as_value(v, ref.dtype(), shape, op);
}

Value rmw(ir::Op op, const Ref& ref, const Indexer& index, const Value& value, const std::optional<Value>& mask) {
  const char* name = ir::op_name(op);
  Access a = resolve(ref, index, name);
  ir::ValueId v = stored_value(ref, value, a.shape, name);
  return wrap(builder(name).atomic(op, ref.param(), a.entries, a.starts, v, mask_value(mask, a.shape, name)));
}

}  // namespace

const Shape& Ref::shape() const {
  if (is_none()) builder("Ref::shape").fail("shape", "the ref is None (its input was not given)");
  return shape_;
}

DType Ref::dtype() const {
  if (is_none()) builder("Ref::dtype").fail("dtype", "the ref is None (its input was not given)");
  return dtype_;
}

RefProxy Ref::operator[](const IndexArg& i) const { return RefProxy(*this, Indexer{i}); }
RefProxy Ref::operator[](const Indexer& i) const { return RefProxy(*this, i); }

Ref make_view(const Ref& ref, const Indexer& index) {
  std::vector<Dim> dims = expand(ref, index, "at");
  for (const Dim& d : dims)
    if (d.gather) builder("at").fail("at", "a view of a ref takes scalars and slices, not an integer tile");
  Ref out = ref;
  // Compose with the existing view exactly as an access would.
  std::vector<Ref::ViewDim> view;
  size_t u = 0;
  if (ref.view_.empty()) {
    for (const Dim& d : dims) view.push_back({d.scalar, d.start, d.size, d.stride});
  } else {
    for (const Ref::ViewDim& v : ref.view_) {
      if (v.scalar) { view.push_back(v); continue; }
      const Dim& d = dims[u++];
      view.push_back({d.scalar, v.start + d.start * v.stride, d.scalar ? 1 : d.size, d.stride * v.stride});
    }
  }
  out.view_ = std::move(view);
  out.shape_.clear();
  for (const Ref::ViewDim& v : out.view_)
    if (!v.scalar) out.shape_.push_back(v.size);
  return out;
}

Ref Ref::at(const Indexer& i) const { return make_view(*this, i); }

Value load(const Ref& ref, const Indexer& index, std::optional<Value> mask, std::optional<Value> other) {
  Access a = resolve(ref, index, "load");
  ir::ValueId m = mask_value(mask, a.shape, "load");
  ir::ValueId o = -1;
  if (other) {
    if (!mask) builder("load").fail("load", "`other` needs a mask");
    o = stored_value(ref, *other, a.shape, "load");
  }
  return wrap(builder("load").load(ref.param(), a.entries, a.starts, m, o));
}

void store(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask) {
  Access a = resolve(ref, index, "store");
  ir::ValueId v = stored_value(ref, value, a.shape, "store");
  builder("store").store(ref.param(), a.entries, a.starts, v, mask_value(mask, a.shape, "store"));
}

void store(const Ref& ref, const Value& value) { store(ref, Indexer{all}, value); }

Value swap(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask) {
  Value old = load(ref, index, mask);
  store(ref, index, value, mask);
  return old;
}

Value atomic_add(const Ref& r, const Indexer& i, const Value& v, std::optional<Value> m) { return rmw(ir::Op::AtomicAdd, r, i, v, m); }
Value atomic_max(const Ref& r, const Indexer& i, const Value& v, std::optional<Value> m) { return rmw(ir::Op::AtomicMax, r, i, v, m); }
Value atomic_min(const Ref& r, const Indexer& i, const Value& v, std::optional<Value> m) { return rmw(ir::Op::AtomicMin, r, i, v, m); }
Value atomic_xchg(const Ref& r, const Indexer& i, const Value& v, std::optional<Value> m) { return rmw(ir::Op::AtomicXchg, r, i, v, m); }
Value atomic_and(const Ref& r, const Indexer& i, const Value& v, std::optional<Value> m) { return rmw(ir::Op::AtomicAnd, r, i, v, m); }
Value atomic_or(const Ref& r, const Indexer& i, const Value& v, std::optional<Value> m) { return rmw(ir::Op::AtomicOr, r, i, v, m); }
Value atomic_xor(const Ref& r, const Indexer& i, const Value& v, std::optional<Value> m) { return rmw(ir::Op::AtomicXor, r, i, v, m); }
Value atomic_cas(const Ref& r, const Indexer& i, const Value& cmp, const Value& v) {
  Access a = resolve(r, i, "atomic_cas");
  const ir::ValueId c = stored_value(r, cmp, a.shape, "atomic_cas");
  return wrap(builder("atomic_cas").atomic_cas(r.param(), a.entries, a.starts, c, stored_value(r, v, a.shape, "atomic_cas")));
}

Value RefProxy::get() const { return load(ref_, index_); }
RefProxy& RefProxy::operator=(const Value& v) {
  store(ref_, index_, v);
  return *this;
}
RefProxy& RefProxy::operator+=(const Value& v) { return *this = get() + v; }
RefProxy& RefProxy::operator-=(const Value& v) { return *this = get() - v; }
RefProxy& RefProxy::operator*=(const Value& v) { return *this = get() * v; }
RefProxy& RefProxy::operator/=(const Value& v) { return *this = get() / v; }

}  // namespace palladium
