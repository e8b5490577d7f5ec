#include "ir/builder.h"

#include <algorithm>

#include "palladium/error.h"

namespace palladium::ir {
namespace {

bool is_numeric(DType t) { return !is_bool(t); }

std::string dims_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

Builder::Builder(Kernel& kernel) : kernel_(kernel) {
  open_.push_back({Region{}, next_serial_++});
}

void Builder::fail(const std::string& op, const std::string& message) const {
  throw Error("pallas_call '" + kernel_.name + "', op '" + op + "': " + message);
}

void Builder::check_visible(ValueId v, const std::string& op) const {
  if (v < 0 || static_cast<size_t>(v) >= value_region_.size())
    fail(op, "uses a Value that does not belong to this kernel's trace");
  int serial = value_region_[static_cast<size_t>(v)];
  for (const Open& o : open_)
    if (o.serial == serial) return;
  fail(op, "uses a Value (%" + std::to_string(v) +
               ") made inside a loop or cond body after that body ended; return it from the body instead");
}

ValueId Builder::new_value(Type t) {
  kernel_.types.push_back(std::move(t));
  value_region_.push_back(open_.back().serial);
  return static_cast<ValueId>(kernel_.types.size() - 1);
}

void Builder::at_top_level(const std::function<void()>& emit_values) {
  std::vector<Open> inner(std::make_move_iterator(open_.begin() + 1), std::make_move_iterator(open_.end()));
  open_.resize(1);
  struct Restore {
    std::vector<Open>& open;
    std::vector<Open>& inner;
    ~Restore() {
      for (Open& o : inner) open.push_back(std::move(o));
    }
  } restore{open_, inner};
  emit_values();
}

Inst& Builder::emit(Inst inst) {
  if (op_family(inst.op) == Family::Memory)
    for (const IndexEntry& e : inst.index)
      if (e.gather) inst.i1 |= kGather;
  for (ValueId v : inst.operands) check_visible(v, op_name(inst.op));
  open_.back().region.body.push_back(std::move(inst));
  return open_.back().region.body.back();
}

void Builder::check_shape(const std::string& op, const Shape& shape) const {
  constexpr int64_t kMaxTileElements = int64_t{1} << 31;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail(op, "shape " + shape_str(shape) + " has a negative dimension");
    n = (d != 0 && n > kMaxTileElements / d) ? kMaxTileElements + 1 : n * d;
  }
  if (n > kMaxTileElements) fail(op, "a tile of shape " + shape_str(shape) + " is too large (more than 2^31 elements)");
}

ValueId Builder::constant(DType dtype, Shape shape, double value) {
  check_shape("full", shape);
  Inst in{.op = Op::Const};
  if (is_float(dtype)) {
    in.f = round_to(dtype, value);
  } else {
    in.i0 = wrap_int(dtype, static_cast<int64_t>(value));
  }
  ValueId r = new_value({dtype, std::move(shape)});
  in.results = {r};
  emit(std::move(in));
  return r;
}

ValueId Builder::program_id(int axis) {
  if (axis < 0 || axis >= static_cast<int>(kernel_.grid.size()))
    fail("program_id", "axis " + std::to_string(axis) + " is outside the grid of rank " +
                           std::to_string(kernel_.grid.size()));
  ValueId r = new_value({DType::int32, {}});
  emit(Inst{.op = Op::ProgramId, .results = {r}, .i0 = axis});
  return r;
}

ValueId Builder::num_programs(int axis) {
  if (axis < 0 || axis >= static_cast<int>(kernel_.grid.size()))
    fail("num_programs", "axis " + std::to_string(axis) + " is outside the grid of rank " +
                             std::to_string(kernel_.grid.size()));
  ValueId r = new_value({DType::int32, {}});
  emit(Inst{.op = Op::NumPrograms, .results = {r}, .i0 = axis});
  return r;
}

ValueId Builder::iota(DType dtype, Shape shape, int dimension) {
  check_shape("iota", shape);
  if (dimension < 0 || dimension >= static_cast<int>(shape.size()))
    fail("iota", "dimension " + std::to_string(dimension) + " is outside shape " + shape_str(shape));
  if (!is_integer(dtype) && !is_float(dtype)) fail("iota", std::string("takes a numeric dtype, not ") + dtype_name(dtype));
  ValueId r = new_value({dtype, std::move(shape)});
  emit(Inst{.op = Op::Iota, .results = {r}, .i0 = dimension});
  return r;
}

ValueId Builder::unary(Op op, ValueId x) {
  const Type t = type(x);
  const Family fam = op_family(op);
  PL_ASSERT(fam == Family::Unary);
  switch (op) {
    case Op::Neg: case Op::Abs: case Op::Sign:
      if (!is_numeric(t.dtype)) fail(op_name(op), std::string("takes a numeric operand, not ") + dtype_name(t.dtype));
      break;
    case Op::Not:
      if (is_float(t.dtype)) fail(op_name(op), std::string("takes a bool or integer operand, not ") + dtype_name(t.dtype));
      break;
    case Op::PopulationCount: case Op::Clz:
      if (!is_integer(t.dtype)) fail(op_name(op), std::string("takes an integer operand, not ") + dtype_name(t.dtype));
      break;
    default:
      if (!is_float(t.dtype))
        fail(op_name(op), std::string("takes a floating-point operand, not ") + dtype_name(t.dtype) +
                              "; use astype(f32) first");
  }
  ValueId r = new_value(t);
  emit(Inst{.op = op, .results = {r}, .operands = {x}});
  return r;
}

ValueId Builder::binary(Op op, ValueId a, ValueId b) {
  const Type ta = type(a), tb = type(b);
  if (ta.shape != tb.shape) fail(op_name(op), "shapes " + shape_str(ta.shape) + " and " + shape_str(tb.shape) + " differ");
  if (ta.dtype != tb.dtype)
    fail(op_name(op), std::string("dtypes ") + dtype_name(ta.dtype) + " and " + dtype_name(tb.dtype) + " differ");
  switch (op) {
    case Op::ShiftLeft: case Op::ShiftRightLogical: case Op::ShiftRightArithmetic:
      if (!is_integer(ta.dtype)) fail(op_name(op), std::string("takes integer operands, not ") + dtype_name(ta.dtype));
      break;
    case Op::And: case Op::Or: case Op::Xor:
      if (is_float(ta.dtype)) fail(op_name(op), std::string("takes bool or integer operands, not ") + dtype_name(ta.dtype));
      break;
    case Op::Pow: case Op::Atan2:
      if (!is_float(ta.dtype)) fail(op_name(op), std::string("takes floating-point operands, not ") + dtype_name(ta.dtype));
      break;
    case Op::NextAfter:  // the neighbours of a 16-bit float are not those of its float32 compute type
      if (ta.dtype != DType::float32 && ta.dtype != DType::float64)
        fail(op_name(op), std::string("takes float32 or float64 operands, not ") + dtype_name(ta.dtype) +
                              "; use astype(f32) first");
      break;
    default:
      if (!is_numeric(ta.dtype)) fail(op_name(op), std::string("takes numeric operands, not ") + dtype_name(ta.dtype));
  }
  ValueId r = new_value(ta);
  emit(Inst{.op = op, .results = {r}, .operands = {a, b}});
  return r;
}

ValueId Builder::compare(Op op, ValueId a, ValueId b) {
  const Type ta = type(a), tb = type(b);
  if (ta.shape != tb.shape) fail(op_name(op), "shapes " + shape_str(ta.shape) + " and " + shape_str(tb.shape) + " differ");
  if (ta.dtype != tb.dtype)
    fail(op_name(op), std::string("dtypes ") + dtype_name(ta.dtype) + " and " + dtype_name(tb.dtype) + " differ");
  ValueId r = new_value({DType::bool_, ta.shape});
  emit(Inst{.op = op, .results = {r}, .operands = {a, b}});
  return r;
}

ValueId Builder::select(ValueId pred, ValueId on_true, ValueId on_false) {
  const Type tp = type(pred), tt = type(on_true), tf = type(on_false);
  if (tp.dtype != DType::bool_) fail("select", std::string("condition must be bool, not ") + dtype_name(tp.dtype));
  if (tp.shape != tt.shape || tt.shape != tf.shape)
    fail("select", "shapes " + shape_str(tp.shape) + ", " + shape_str(tt.shape) + ", " + shape_str(tf.shape) + " differ");
  if (tt.dtype != tf.dtype)
    fail("select", std::string("branch dtypes ") + dtype_name(tt.dtype) + " and " + dtype_name(tf.dtype) + " differ");
  ValueId r = new_value(tt);
  emit(Inst{.op = Op::Select, .results = {r}, .operands = {pred, on_true, on_false}});
  return r;
}

ValueId Builder::cast(ValueId x, DType dtype) {
  if (type(x).dtype == dtype) return x;
  ValueId r = new_value({dtype, type(x).shape});
  emit(Inst{.op = Op::Cast, .results = {r}, .operands = {x}});
  return r;
}

ValueId Builder::bitcast(ValueId x, DType dtype) {
  const DType from = type(x).dtype;
  if (is_bool(from) || is_bool(dtype))
    fail("bitcast_convert", std::string("does not take bool (its bits are not a number's): ") + dtype_name(from) + " to " +
                                dtype_name(dtype));
  if (itemsize(from) != itemsize(dtype))
    fail("bitcast_convert", std::string(dtype_name(from)) + " (" + std::to_string(itemsize(from)) + " bytes) and " +
                                dtype_name(dtype) + " (" + std::to_string(itemsize(dtype)) + " bytes) differ in size");
  if (from == dtype) return x;
  ValueId r = new_value({dtype, type(x).shape});
  emit(Inst{.op = Op::BitcastConvert, .results = {r}, .operands = {x}});
  return r;
}

ValueId Builder::broadcast(ValueId x, Shape shape, std::vector<int64_t> dims) {
  check_shape("broadcast", shape);
  const Type t = type(x);
  if (dims.size() != t.shape.size())
    fail("broadcast", "needs one target dimension per operand dimension: " + dims_str(dims) + " for " + shape_str(t.shape));
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] < 0 || dims[d] >= static_cast<int64_t>(shape.size()) || (d > 0 && dims[d] <= dims[d - 1]))
      fail("broadcast", "dimension map " + dims_str(dims) + " is not increasing within rank " + std::to_string(shape.size()));
    int64_t n = shape[static_cast<size_t>(dims[d])];
    if (t.shape[d] != 1 && t.shape[d] != n)
      fail("broadcast", "cannot broadcast shape " + shape_str(t.shape) + " to " + shape_str(shape));
  }
  if (shape == t.shape) return x;
  ValueId r = new_value({t.dtype, std::move(shape)});
  emit(Inst{.op = Op::Broadcast, .results = {r}, .operands = {x}, .ints = std::move(dims)});
  return r;
}

ValueId Builder::reshape(ValueId x, Shape shape) {
  check_shape("reshape", shape);
  const Type t = type(x);
  if (numel(shape) != numel(t.shape))
    fail("reshape", "cannot reshape " + shape_str(t.shape) + " to " + shape_str(shape) + " (element counts differ)");
  if (shape == t.shape) return x;
  ValueId r = new_value({t.dtype, std::move(shape)});
  emit(Inst{.op = Op::Reshape, .results = {r}, .operands = {x}});
  return r;
}

ValueId Builder::transpose(ValueId x, std::vector<int64_t> perm) {
  const Type t = type(x);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool ok = perm.size() == t.shape.size();
  for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == static_cast<int64_t>(i);
  if (!ok) fail("transpose", "permutation " + dims_str(perm) + " does not fit rank " + std::to_string(t.shape.size()));
  bool identity = true;
  Shape out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    out[i] = t.shape[static_cast<size_t>(perm[i])];
    identity = identity && perm[i] == static_cast<int64_t>(i);
  }
  if (identity) return x;
  ValueId r = new_value({t.dtype, std::move(out)});
  emit(Inst{.op = Op::Transpose, .results = {r}, .operands = {x}, .ints = std::move(perm)});
  return r;
}

ValueId Builder::reduce(Op op, ValueId x, int axis) {
  const Type t = type(x);
  if (axis < 0 || axis >= static_cast<int>(t.shape.size()))
    fail(op_name(op), "axis " + std::to_string(axis) + " is outside shape " + shape_str(t.shape));
  if (op == Op::ReduceSum && is_bool(t.dtype)) fail(op_name(op), "takes a numeric operand, not bool; use astype first");
  if (op != Op::ReduceSum && t.shape[static_cast<size_t>(axis)] == 0)
    fail(op_name(op), "reduces an empty axis of shape " + shape_str(t.shape) + ", which has no identity");
  Shape out = t.shape;
  out.erase(out.begin() + axis);
  DType dt = (op == Op::ArgMax || op == Op::ArgMin) ? DType::int32 : t.dtype;
  ValueId r = new_value({dt, std::move(out)});
  emit(Inst{.op = op, .results = {r}, .operands = {x}, .i0 = axis});
  return r;
}

ValueId Builder::cumsum(ValueId x, int axis) {
  const Type t = type(x);
  if (axis < 0 || axis >= static_cast<int>(t.shape.size()))
    fail("cumsum", "axis " + std::to_string(axis) + " is outside shape " + shape_str(t.shape));
  if (is_bool(t.dtype)) fail("cumsum", "takes a numeric operand, not bool");
  ValueId r = new_value(t);
  emit(Inst{.op = Op::Cumsum, .results = {r}, .operands = {x}, .i0 = axis});
  return r;
}

DType Builder::dot_result_dtype(DType t) {
  switch (t) {
    case DType::float16: case DType::bfloat16: case DType::float32: return DType::float32;
    case DType::float64: return DType::float64;
    case DType::int64: return DType::int64;
    default: return DType::int32;
  }
}

ValueId Builder::dot(ValueId a, ValueId b, bool trans_a, bool trans_b) {
  const Type ta = type(a), tb = type(b);
  if (ta.shape.size() != 2 || tb.shape.size() != 2)
    fail("dot", "takes rank-2 operands, got " + shape_str(ta.shape) + " and " + shape_str(tb.shape));
  if (ta.dtype != tb.dtype)
    fail("dot", std::string("operand dtypes ") + dtype_name(ta.dtype) + " and " + dtype_name(tb.dtype) + " differ");
  if (is_bool(ta.dtype) || ta.dtype == DType::uint32) fail("dot", std::string("does not take ") + dtype_name(ta.dtype) + " operands");
  int64_t m = trans_a ? ta.shape[1] : ta.shape[0], ka = trans_a ? ta.shape[0] : ta.shape[1];
  int64_t kb = trans_b ? tb.shape[1] : tb.shape[0], n = trans_b ? tb.shape[0] : tb.shape[1];
  if (ka != kb)
    fail("dot", "contracting dimensions differ: " + shape_str(ta.shape) + (trans_a ? "^T" : "") + " @ " +
                    shape_str(tb.shape) + (trans_b ? "^T" : ""));
  ValueId r = new_value({dot_result_dtype(ta.dtype), {m, n}});
  emit(Inst{.op = Op::Dot, .results = {r}, .operands = {a, b}, .i0 = trans_a, .i1 = trans_b});
  return r;
}

Type Builder::ref_access_type(const std::string& op, int ref, const std::vector<IndexEntry>& index,
                              const std::vector<ValueId>& starts) const {
  if (ref < 0 || ref >= static_cast<int>(kernel_.refs.size())) fail(op, "refers to no ref parameter");
  const RefParam& p = kernel_.refs[static_cast<size_t>(ref)];
  if (index.size() != p.ref_shape.size() || starts.size() != index.size())
    fail(op, "ref " + p.name + " of shape " + shape_str(p.ref_shape) + " is indexed with " +
                 std::to_string(index.size()) + " indices");
  Shape out;
  bool gathers = false;
  for (size_t d = 0; d < index.size(); ++d) {
    const Type& st = type(starts[d]);
    if (index[d].gather) {
      if (st.shape.empty() || !is_integer(st.dtype))
        fail(op, "index " + std::to_string(d) + " of ref " + p.name + " gathers with an integer tile, got " + type_str(st));
      if (gathers && st.shape != out)
        fail(op, "the index tiles of ref " + p.name + " have shapes " + shape_str(out) + " and " + shape_str(st.shape));
      if (!gathers && !out.empty()) fail(op, "ref " + p.name + " is indexed with both slices and integer tiles");
      gathers = true;
      out = st.shape;
      continue;
    }
    if (gathers && !index[d].scalar) fail(op, "ref " + p.name + " is indexed with both slices and integer tiles");
    if (!st.shape.empty() || !is_integer(st.dtype))
      fail(op, "index " + std::to_string(d) + " of ref " + p.name + " must be an integer scalar, got " + type_str(st));
    if (!index[d].scalar) {
      if (index[d].size < 0 || index[d].stride < 1)
        fail(op, "slice " + std::to_string(d) + " of ref " + p.name + " has size " + std::to_string(index[d].size) +
                     " and stride " + std::to_string(index[d].stride));
      out.push_back(index[d].size);
    }
  }
  return {p.dtype, out};
}

void Builder::check_writable(const std::string& op, int ref) const {
  const RefParam& p = kernel_.refs[static_cast<size_t>(ref)];
  if (!p.is_output)
    fail(op, "writes to input ref " + p.name +
                 "; inputs are read-only (to update an array in place, alias it to an output with "
                 "input_output_aliases and write the output's ref)");
}

void Builder::check_mask(const std::string& op, ValueId mask, const Shape& shape) const {
  if (mask < 0) return;
  const Type& t = type(mask);
  if (t.dtype != DType::bool_ || t.shape != shape)
    fail(op, "mask must be bool of shape " + shape_str(shape) + ", got " + type_str(t));
}

ValueId Builder::load(int ref, std::vector<IndexEntry> index, std::vector<ValueId> starts, ValueId mask,
                      ValueId other) {
  Type t = ref_access_type("load", ref, index, starts);
  check_mask("load", mask, t.shape);
  if (other >= 0 && type(other) != t) fail("load", "other must be " + type_str(t) + ", got " + type_str(type(other)));
  Inst in{.op = Op::Load, .operands = std::move(starts), .i0 = ref, .index = std::move(index)};
  if (mask >= 0) { in.operands.push_back(mask); in.i1 |= kHasMask; }
  if (other >= 0) { in.operands.push_back(other); in.i1 |= kHasOther; }
  ValueId r = new_value(t);
  in.results = {r};
  emit(std::move(in));
  return r;
}

void Builder::store(int ref, std::vector<IndexEntry> index, std::vector<ValueId> starts, ValueId value,
                    ValueId mask) {
  Type t = ref_access_type("store", ref, index, starts);
  check_writable("store", ref);
  if (type(value) != t)
    fail("store", "value " + type_str(type(value)) + " does not match the indexed ref slot " + type_str(t));
  check_mask("store", mask, t.shape);
  Inst in{.op = Op::Store, .operands = std::move(starts), .i0 = ref, .index = std::move(index)};
  in.operands.push_back(value);
  if (mask >= 0) { in.operands.push_back(mask); in.i1 |= kHasMask; }
  emit(std::move(in));
}

ValueId Builder::atomic(Op op, int ref, std::vector<IndexEntry> index, std::vector<ValueId> starts, ValueId value,
                        ValueId mask) {
  Type t = ref_access_type(op_name(op), ref, index, starts);
  check_writable(op_name(op), ref);
  if (type(value) != t)
    fail(op_name(op), "value " + type_str(type(value)) + " does not match the indexed ref slot " + type_str(t));
  if (is_bool(t.dtype) || t.dtype == DType::float16 || t.dtype == DType::bfloat16 || itemsize(t.dtype) < 4)
    fail(op_name(op), std::string("does not take ") + dtype_name(t.dtype) + " refs (32- and 64-bit types only)");
  if ((op == Op::AtomicAnd || op == Op::AtomicOr || op == Op::AtomicXor) && !is_integer(t.dtype))
    fail(op_name(op), std::string("takes integer refs, not ") + dtype_name(t.dtype));
  check_mask(op_name(op), mask, t.shape);
  Inst in{.op = op, .operands = std::move(starts), .i0 = ref, .index = std::move(index)};
  in.operands.push_back(value);
  if (mask >= 0) { in.operands.push_back(mask); in.i1 |= kHasMask; }
  ValueId r = new_value(t);
  in.results = {r};
  emit(std::move(in));
  return r;
}

ValueId Builder::atomic_cas(int ref, std::vector<IndexEntry> index, std::vector<ValueId> starts, ValueId cmp,
                            ValueId value) {
  Type t = ref_access_type("atomic_cas", ref, index, starts);
  check_writable("atomic_cas", ref);
  if (type(cmp) != t || type(value) != t)
    fail("atomic_cas", "cmp " + type_str(type(cmp)) + " and value " + type_str(type(value)) +
                           " must both match the indexed ref slot " + type_str(t));
  // Floats would compare bits here but values in the interpreter (-0.0, NaN): integers only.
  if (!is_integer(t.dtype) || itemsize(t.dtype) < 4)
    fail("atomic_cas", std::string("takes 32- and 64-bit integer refs, not ") + dtype_name(t.dtype));
  Inst in{.op = Op::AtomicCas, .operands = std::move(starts), .i0 = ref, .index = std::move(index)};
  in.operands.push_back(cmp);
  in.operands.push_back(value);
  ValueId r = new_value(t);
  in.results = {r};
  emit(std::move(in));
  return r;
}

void Builder::debug_print(std::string format, std::vector<ValueId> values) {
  emit(Inst{.op = Op::DebugPrint, .operands = std::move(values), .text = std::move(format)});
}

std::vector<ValueId> Builder::open_region(const std::vector<Type>& arg_types) {
  open_.push_back({Region{}, next_serial_++});
  for (const Type& t : arg_types) open_.back().region.args.push_back(new_value(t));
  return open_.back().region.args;
}

void Builder::finish() {
  PL_ASSERT(open_.size() == 1, "finish with an open region");
  kernel_.body = std::move(open_[0].region);
}

Region Builder::close_region(const std::vector<ValueId>& yielded) {
  PL_ASSERT(open_.size() > 1, "close_region without open_region");
  emit(Inst{.op = Op::Yield, .operands = yielded});
  Region r = std::move(open_.back().region);
  open_.pop_back();
  return r;
}

static std::vector<Type> yield_types(const Builder& b, const Region& r) {
  std::vector<Type> ts;
  for (ValueId v : r.body.back().operands) ts.push_back(b.type(v));
  return ts;
}

std::vector<ValueId> Builder::emit_for(ValueId lo, ValueId hi, const std::vector<ValueId>& init, Region body) {
  const Type tl = type(lo), th = type(hi);
  if (!tl.shape.empty() || !th.shape.empty() || !is_integer(tl.dtype) || tl.dtype != th.dtype)
    fail("fori_loop", "bounds must be integer scalars of one dtype, got " + type_str(tl) + " and " + type_str(th));
  std::vector<Type> carry_types;
  for (ValueId v : init) carry_types.push_back(type(v));
  std::vector<Type> yielded = yield_types(*this, body);
  if (yielded != carry_types) {
    std::string want, got;
    for (auto& t : carry_types) want += type_str(t) + " ";
    for (auto& t : yielded) got += type_str(t) + " ";
    fail("fori_loop", "body must return the carry's types (" + want + ") but returned (" + got + ")");
  }
  Inst in{.op = Op::For, .operands = {lo, hi}};
  in.operands.insert(in.operands.end(), init.begin(), init.end());
  for (const Type& t : carry_types) in.results.push_back(new_value(t));
  in.regions.push_back(std::move(body));
  std::vector<ValueId> results = in.results;
  emit(std::move(in));
  return results;
}

std::vector<ValueId> Builder::emit_while(const std::vector<ValueId>& init, Region cond, Region body) {
  std::vector<Type> carry_types;
  for (ValueId v : init) carry_types.push_back(type(v));
  std::vector<Type> c = yield_types(*this, cond);
  if (c.size() != 1 || c[0] != Type{DType::bool_, {}}) fail("while_loop", "cond_fun must return one bool scalar");
  if (yield_types(*this, body) != carry_types) fail("while_loop", "body_fun must return the carry's types");
  Inst in{.op = Op::While, .operands = init};
  for (const Type& t : carry_types) in.results.push_back(new_value(t));
  in.regions.push_back(std::move(cond));
  in.regions.push_back(std::move(body));
  std::vector<ValueId> results = in.results;
  emit(std::move(in));
  return results;
}

std::vector<ValueId> Builder::emit_if(ValueId pred, Region then_region, Region else_region) {
  if (type(pred) != Type{DType::bool_, {}}) fail("cond", "predicate must be a bool scalar, got " + type_str(type(pred)));
  std::vector<Type> tt = yield_types(*this, then_region), te = yield_types(*this, else_region);
  if (tt != te) fail("cond", "both branches must return values of the same types");
  Inst in{.op = Op::If, .operands = {pred}};
  for (const Type& t : tt) in.results.push_back(new_value(t));
  in.regions.push_back(std::move(then_region));
  in.regions.push_back(std::move(else_region));
  std::vector<ValueId> results = in.results;
  emit(std::move(in));
  return results;
}

}  // namespace palladium::ir
