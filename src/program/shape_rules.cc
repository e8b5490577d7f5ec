// The shape/dtype rule of every primitive, by family. Each rule checks its operands and throws a
// user Error that names the op, what was wrong and where the trace stood.
#include <algorithm>
#include <sstream>

#include "palladium/sharding.h"
#include "program/families.h"
#include "program/trace.h"
#include "trace/context.h"

namespace palladium::program {

namespace {

const Family kFamily[] = {
#define PL_PRIM(name, family, vjp, batch, shard) Family::family,
#include "program/prims.def"
#undef PL_PRIM
};

[[noreturn]] void fail(Prim p, const std::string& msg) {
  throw Error(std::string(prim_name(p)) + ": " + msg + trace_location());
}

std::string types_str(const std::vector<Type>& ts) {
  std::string s;
  for (const Type& t : ts) s += (s.empty() ? "" : ", ") + type_str(t);
  return s;
}

void expect_arity(Prim p, const std::vector<Type>& ins, size_t n) {
  if (ins.size() != n)
    fail(p, "takes " + std::to_string(n) + " operands, got " + std::to_string(ins.size()) + " (" + types_str(ins) + ")");
}

// Axes in [-rank, rank) normalised and checked for repeats.
std::vector<int64_t> check_axes(Prim p, std::vector<int64_t> axes, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  for (int64_t& a : axes) {
    if (a < -r || a >= r) fail(p, "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(r));
    if (a < 0) a += r;
  }
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) fail(p, "repeated axis");
  return axes;
}

std::vector<Type> elementwise(Prim p, const std::vector<Type>& ins, DType out_dtype) {
  Shape s = ins.at(0).shape;
  for (size_t i = 1; i < ins.size(); ++i) s = broadcast_shapes(s, ins[i].shape, prim_name(p));
  return {{s, out_dtype}};
}

// Collectives: params.callee is the Mesh, params.axes its axes the group spans (sharding/).
std::vector<Type> collective_types(Prim p, const Params& q, const std::vector<Type>& ins) {
  const auto* mesh = static_cast<const Mesh*>(q.callee.get());
  if (mesh == nullptr) fail(p, "has no mesh (a collective is bound inside shard_map or by the partitioner)");
  int64_t group = 1;
  for (int64_t a : q.axes) group *= mesh->shape().at(static_cast<size_t>(a));
  if (p == Prim::axis_index) {
    expect_arity(p, ins, 0);
    return {{{}, DType::int32}};
  }
  expect_arity(p, ins, 1);
  Type t = ins[0];
  const int64_t rank = static_cast<int64_t>(t.shape.size());
  auto dim = [&](int64_t axis, int64_t limit) {
    if (axis < 0 || axis >= limit) fail(p, "dimension " + std::to_string(axis) + " is out of range for " + type_str(ins[0]));
    return static_cast<size_t>(axis);
  };
  auto divide = [&](size_t d) {
    if (t.shape[d] % group != 0)
      fail(p, "dimension " + std::to_string(d) + " of " + type_str(ins[0]) + " is not divisible by the " +
                  std::to_string(group) + " devices of the group");
    t.shape[d] /= group;
  };
  switch (p) {
    case Prim::all_gather:
      if (q.flag) t.shape[dim(q.axis, rank)] *= group;
      else t.shape.insert(t.shape.begin() + static_cast<std::ptrdiff_t>(dim(q.axis, rank + 1)), group);
      return {t};
    case Prim::reduce_scatter:
      if (q.flag) {
        divide(dim(q.axis, rank));
      } else {
        const size_t d = dim(q.axis, rank);
        if (t.shape[d] != group)
          fail(p, "dimension " + std::to_string(d) + " of " + type_str(ins[0]) + " must equal the group size " +
                      std::to_string(group) + " (tiled=false)");
        t.shape.erase(t.shape.begin() + static_cast<std::ptrdiff_t>(d));
      }
      return {t};
    case Prim::all_to_all:
      divide(dim(q.axis, rank));
      t.shape[dim(q.count, rank)] *= group;
      return {t};
    case Prim::shard_slice:
      divide(dim(q.axis, rank));
      return {t};
    default:  // all_reduce, ppermute
      return {t};
  }
}

}  // namespace

Family family_of(Prim p) { return kFamily[static_cast<size_t>(p)]; }

bool is_elementwise(Prim p) {
  switch (family_of(p)) {
    case Family::unary: case Family::binary: case Family::compare: case Family::select:
    case Family::convert: case Family::broadcast: case Family::full: case Family::iota:
      return true;
    default:
      return false;
  }
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast" +
                  trace_location());
    out[i] = da == 1 ? db : da;
  }
  return out;
}

DType promote_types(DType a, DType b) { return trace::promote(a, b); }

std::vector<Type> infer_types(Prim p, const Params& q, const std::vector<Type>& ins) {
  switch (family_of(p)) {
    case Family::unary: {
      expect_arity(p, ins, 1);
      const DType t = ins[0].dtype;
      if (p == Prim::logical_not) {
        if (is_float(t)) fail(p, "needs a bool or integer operand, got " + type_str(ins[0]));
      } else if (p != Prim::neg && p != Prim::abs && p != Prim::stop_gradient && !is_float(t)) {
        fail(p, "needs a floating-point operand, got " + type_str(ins[0]) + " (cast it with astype first)");
      }
      return {ins[0]};
    }
    case Family::binary: {
      expect_arity(p, ins, 2);
      if (ins[0].dtype != ins[1].dtype)
        fail(p, "operand dtypes differ (" + types_str(ins) + "); the array API promotes them before binding");
      if ((p == Prim::bit_and || p == Prim::bit_or || p == Prim::bit_xor) && is_float(ins[0].dtype))
        fail(p, "needs bool or integer operands, got " + types_str(ins));
      if (p == Prim::pow && !is_float(ins[0].dtype)) fail(p, "needs floating-point operands, got " + types_str(ins));
      return elementwise(p, ins, ins[0].dtype);
    }
    case Family::compare:
      expect_arity(p, ins, 2);
      if (ins[0].dtype != ins[1].dtype) fail(p, "operand dtypes differ (" + types_str(ins) + ")");
      return elementwise(p, ins, DType::bool_);
    case Family::select:
      expect_arity(p, ins, 3);
      if (ins[0].dtype != DType::bool_) fail(p, "the condition must be bool, got " + type_str(ins[0]));
      if (ins[1].dtype != ins[2].dtype) fail(p, "the two branches have different dtypes (" + types_str(ins) + ")");
      return elementwise(p, ins, ins[1].dtype);
    case Family::convert:
      expect_arity(p, ins, 1);
      return {{ins[0].shape, q.dtype}};
    case Family::broadcast: {
      expect_arity(p, ins, 1);
      const Shape b = broadcast_shapes(ins[0].shape, q.shape, prim_name(p));
      if (b != q.shape) fail(p, "cannot broadcast " + shape_str(ins[0].shape) + " to " + shape_str(q.shape));
      return {{q.shape, ins[0].dtype}};
    }
    case Family::full:
      expect_arity(p, ins, 0);
      return {{q.shape, q.dtype}};
    case Family::iota:
      expect_arity(p, ins, 0);
      if (q.axis < 0 || q.axis >= static_cast<int64_t>(q.shape.size())) fail(p, "dimension out of range");
      return {{q.shape, q.dtype}};
    case Family::reduce:
    case Family::argreduce: {
      expect_arity(p, ins, 1);
      const std::vector<int64_t> axes = check_axes(p, q.axes, ins[0].shape.size());
      Shape out;
      for (size_t d = 0; d < ins[0].shape.size(); ++d)
        if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end()) out.push_back(ins[0].shape[d]);
      for (int64_t a : axes)
        if (ins[0].shape[static_cast<size_t>(a)] == 0 && p != Prim::reduce_sum)
          fail(p, "reduction over an empty axis has no identity");
      if (family_of(p) == Family::argreduce) {
        if (axes.size() != 1) fail(p, "takes exactly one axis");
        return {{out, DType::int32}};
      }
      if (ins[0].dtype == DType::bool_ && p == Prim::reduce_sum) fail(p, "sum of a bool array: cast it first");
      return {{out, ins[0].dtype}};
    }
    case Family::matmul: {
      expect_arity(p, ins, 2);
      const Shape &a = ins[0].shape, &b = ins[1].shape;
      if (a.size() < 2 || a.size() != b.size())
        fail(p, "needs operands of equal rank >= 2, got " + types_str(ins));
      if (ins[0].dtype != ins[1].dtype || ins[0].dtype == DType::bool_)
        fail(p, "needs two numeric operands of one dtype, got " + types_str(ins));
      const size_t r = a.size();
      if (!std::equal(a.begin(), a.end() - 2, b.begin()))
        fail(p, "batch dimensions differ: " + types_str(ins));
      if (a[r - 1] != b[r - 2])
        fail(p, "contracting dimensions differ: " + shape_str(a) + " @ " + shape_str(b) + " (" + std::to_string(a[r - 1]) +
                    " != " + std::to_string(b[r - 2]) + ")");
      Shape out(a.begin(), a.end() - 1);
      out.push_back(b[r - 1]);
      return {{out, ins[0].dtype}};
    }
    case Family::reshape:
      expect_arity(p, ins, 1);
      if (numel(q.shape) != numel(ins[0].shape))
        fail(p, "cannot reshape " + shape_str(ins[0].shape) + " (" + std::to_string(numel(ins[0].shape)) +
                    " elements) into " + shape_str(q.shape));
      return {{q.shape, ins[0].dtype}};
    case Family::transpose: {
      expect_arity(p, ins, 1);
      const size_t r = ins[0].shape.size();
      std::vector<int64_t> perm = q.axes;
      std::vector<int64_t> sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; i < sorted.size(); ++i)
        if (sorted[i] != static_cast<int64_t>(i) || sorted.size() != r)
          fail(p, "permutation does not match rank " + std::to_string(r));
      Shape out;
      for (int64_t d : perm) out.push_back(ins[0].shape[static_cast<size_t>(d)]);
      return {{out, ins[0].dtype}};
    }
    case Family::concatenate: {
      if (ins.empty()) fail(p, "needs at least one operand");
      const size_t r = ins[0].shape.size();
      if (q.axis < 0 || q.axis >= static_cast<int64_t>(r)) fail(p, "axis out of range for rank " + std::to_string(r));
      Shape out = ins[0].shape;
      out[static_cast<size_t>(q.axis)] = 0;
      for (const Type& t : ins) {
        bool same = t.shape.size() == r && t.dtype == ins[0].dtype;
        for (size_t d = 0; same && d < r; ++d) same = d == static_cast<size_t>(q.axis) || t.shape[d] == ins[0].shape[d];
        if (!same) fail(p, "operands differ outside the concatenation axis: " + types_str(ins));
        out[static_cast<size_t>(q.axis)] += t.shape[static_cast<size_t>(q.axis)];
      }
      return {{out, ins[0].dtype}};
    }
    case Family::slice: {
      expect_arity(p, ins, 1);
      const Shape& s = ins[0].shape;
      if (q.lo.size() != s.size() || q.hi.size() != s.size() || q.step.size() != s.size())
        fail(p, "needs one start, limit and stride per dimension of " + shape_str(s));
      Shape out;
      for (size_t d = 0; d < s.size(); ++d) {
        if (q.lo[d] < 0 || q.hi[d] > s[d] || q.lo[d] > q.hi[d] || q.step[d] < 1)
          fail(p, "slice [" + std::to_string(q.lo[d]) + ":" + std::to_string(q.hi[d]) + ":" + std::to_string(q.step[d]) +
                      "] is out of range for dimension " + std::to_string(d) + " of " + shape_str(s));
        out.push_back((q.hi[d] - q.lo[d] + q.step[d] - 1) / q.step[d]);
      }
      return {{out, ins[0].dtype}};
    }
    case Family::pad: {
      expect_arity(p, ins, 1);
      const Shape& s = ins[0].shape;
      if (q.lo.size() != s.size() || q.hi.size() != s.size()) fail(p, "needs one (low, high) pair per dimension");
      Shape out;
      for (size_t d = 0; d < s.size(); ++d) {
        if (q.lo[d] < 0 || q.hi[d] < 0) fail(p, "negative padding");
        out.push_back(s[d] + q.lo[d] + q.hi[d]);
      }
      return {{out, ins[0].dtype}};
    }
    case Family::dynamic_slice: {
      const Shape& s = ins.at(0).shape;
      if (ins.size() != s.size() + 1 || q.shape.size() != s.size())
        fail(p, "needs one start index and one size per dimension of " + shape_str(s));
      for (size_t i = 1; i < ins.size(); ++i)
        if (!ins[i].shape.empty() || !is_integer(ins[i].dtype)) fail(p, "start indices must be integer scalars");
      for (size_t d = 0; d < s.size(); ++d)
        if (q.shape[d] < 0 || q.shape[d] > s[d]) fail(p, "slice size exceeds dimension " + std::to_string(d) + " of " + shape_str(s));
      return {{q.shape, ins[0].dtype}};
    }
    case Family::dynamic_update_slice: {
      if (ins.size() < 2) fail(p, "needs an operand, an update and start indices");
      const Shape &s = ins[0].shape, &u = ins[1].shape;
      if (ins.size() != s.size() + 2 || u.size() != s.size())
        fail(p, "needs an update of the operand's rank and one start index per dimension");
      if (ins[0].dtype != ins[1].dtype) fail(p, "update dtype differs from the operand's: " + types_str(ins));
      for (size_t d = 0; d < s.size(); ++d)
        if (u[d] > s[d]) fail(p, "update " + shape_str(u) + " does not fit in " + shape_str(s));
      for (size_t i = 2; i < ins.size(); ++i)
        if (!ins[i].shape.empty() || !is_integer(ins[i].dtype)) fail(p, "start indices must be integer scalars");
      return {ins[0]};
    }
    case Family::pallas_call:
    case Family::custom_vjp:
    case Family::scan:
    case Family::while_loop:
    case Family::cond:
      // Their result types come from their callee or regions, fixed when the equation is made.
      return q.out_types;
    case Family::constraint:
      expect_arity(p, ins, 1);
      return {ins[0]};
    case Family::collective:
      return collective_types(p, q, ins);
  }
  fail(p, "no shape rule");
}

}  // namespace palladium::program
