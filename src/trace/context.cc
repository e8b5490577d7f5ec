#include "trace/context.h"

#include <atomic>
#include <cmath>

#include "palladium/error.h"

namespace palladium::trace {
namespace {
thread_local Context* g_current = nullptr;
std::atomic<uint32_t> g_generation{1};
}  // namespace

Context::Context(std::string kernel_name, Shape grid, int program_id_offset)
    : builder_(kernel_), generation_(g_generation.fetch_add(1)), program_id_offset_(program_id_offset),
      previous_(g_current) {
  kernel_.name = std::move(kernel_name);
  kernel_.grid = std::move(grid);
  g_current = this;
}

void free_pending(std::vector<PendingControl*>& pending);

Context::~Context() {
  free_pending(pending_);
  g_current = previous_;
}

Context& Context::current(const char* what) {
  if (!g_current)
    throw Error(std::string(what) + " was called outside a kernel: kernel operations only run while pallas_call traces a kernel");
  return *g_current;
}

bool Context::active() { return g_current != nullptr; }

ir::Builder& builder(const char* what) { return Context::current(what).builder(); }

Value wrap(ir::ValueId id) { return Value::from_id(id); }

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (is_bool(a)) return b;
  if (is_bool(b)) return a;
  const bool fa = is_float(a), fb = is_float(b);
  if (fa && fb) {
    if ((a == DType::float16 && b == DType::bfloat16) || (a == DType::bfloat16 && b == DType::float16)) return DType::float32;
    return itemsize(a) >= itemsize(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  const bool ua = is_unsigned(a), ub = is_unsigned(b);
  if (ua == ub) return itemsize(a) >= itemsize(b) ? a : b;
  const DType u = ua ? a : b, s = ua ? b : a;
  if (itemsize(s) > itemsize(u)) return s;
  switch (itemsize(u)) {
    case 1: return DType::int16;
    case 2: return DType::int32;
    default: return DType::int64;
  }
}

DType result_dtype(const Value& a, const Value& b) {
  const bool la = a.is_literal(), lb = b.is_literal();
  if (la == lb) return promote(a.dtype(), b.dtype());
  const Value& lit = la ? a : b;
  const Value& typed = la ? b : a;
  // A weak float meeting an integer or bool tile makes float32, as Python floats do in JAX.
  if (is_float(lit.dtype()) && !is_float(typed.dtype())) return DType::float32;
  // A weak int meeting a bool tile makes int32 (JAX: True + 1 == 2).
  if (is_integer(lit.dtype()) && is_bool(typed.dtype())) return lit.dtype();
  return typed.dtype();
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      builder(op).fail(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " are not broadcast-compatible");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

ir::ValueId as_value(const Value& v, const char* op) {
  ir::Builder& b = builder(op);  // outside a kernel, this names the op
  if (!v.valid()) b.fail(op, "got an empty Value (default-constructed, never assigned)");
  return v.id();
}

ir::ValueId as_value(const Value& v, DType t, const Shape& shape, const char* op) {
  ir::Builder& b = builder(op);
  if (!v.valid()) b.fail(op, "got an empty Value (default-constructed, never assigned)");
  if (v.is_literal()) {
    const double x = v.literal_value();
    if (is_integer(t) && (x != std::trunc(x) || round_to(t, x) != x))
      b.fail(op, "the literal " + detail::cat(x) + " does not fit " + dtype_name(t) + "; use astype to convert explicitly");
    return b.constant(t, shape, x);
  }
  ir::ValueId id = b.cast(v.id(), t);
  const Shape& s = b.type(id).shape;
  if (s == shape) return id;
  if (s.size() > shape.size()) b.fail(op, "cannot broadcast shape " + shape_str(s) + " to " + shape_str(shape));
  std::vector<int64_t> dims;
  const size_t off = shape.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d) {
    if (s[d] != 1 && s[d] != shape[off + d]) b.fail(op, "cannot broadcast shape " + shape_str(s) + " to " + shape_str(shape));
    dims.push_back(static_cast<int64_t>(off + d));
  }
  return b.broadcast(id, shape, dims);
}

}  // namespace palladium::trace
