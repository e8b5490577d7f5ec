// Builder: appends instructions to a kernel under construction and owns the IR's shape and dtype
// rules. A rule that fails throws a user Error naming the kernel and the op; the front end
// (src/trace) broadcasts and promotes before calling here, so the rules are strict.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace palladium::ir {

class Builder {
 public:
  explicit Builder(Kernel& kernel);

  [[noreturn]] void fail(const std::string& op, const std::string& message) const;
  const Type& type(ValueId v) const { return kernel_.types.at(static_cast<size_t>(v)); }
  Kernel& kernel() { return kernel_; }
  // Throws if v was defined in a region that has been closed (a Value leaked out of a loop body).
  void check_visible(ValueId v, const std::string& op) const;

  ValueId constant(DType dtype, Shape shape, double value);
  ValueId program_id(int axis);
  ValueId num_programs(int axis);
  ValueId iota(DType dtype, Shape shape, int dimension);
  ValueId unary(Op op, ValueId x);
  ValueId binary(Op op, ValueId a, ValueId b);
  ValueId compare(Op op, ValueId a, ValueId b);
  ValueId select(ValueId pred, ValueId on_true, ValueId on_false);
  ValueId cast(ValueId x, DType dtype);
  ValueId bitcast(ValueId x, DType dtype);  // the same bits as another dtype of the same size
  ValueId broadcast(ValueId x, Shape shape, std::vector<int64_t> dims);
  ValueId reshape(ValueId x, Shape shape);
  ValueId transpose(ValueId x, std::vector<int64_t> perm);
  ValueId reduce(Op op, ValueId x, int axis);
  ValueId cumsum(ValueId x, int axis);
  ValueId dot(ValueId a, ValueId b, bool trans_a, bool trans_b);

  ValueId load(int ref, std::vector<IndexEntry> index, std::vector<ValueId> starts, ValueId mask,
               ValueId other);
  void store(int ref, std::vector<IndexEntry> index, std::vector<ValueId> starts, ValueId value,
             ValueId mask);
  ValueId atomic(Op op, int ref, std::vector<IndexEntry> index, std::vector<ValueId> starts,
                 ValueId value, ValueId mask);
  // Compare-and-swap: where an element equals cmp it becomes value; returns the old values.
  ValueId atomic_cas(int ref, std::vector<IndexEntry> index, std::vector<ValueId> starts, ValueId cmp, ValueId value);
  void debug_print(std::string format, std::vector<ValueId> values);

  // Structured control flow: open a region, emit its body, close it with the values it yields,
  // then emit the op that owns the closed regions.
  std::vector<ValueId> open_region(const std::vector<Type>& arg_types);
  Region close_region(const std::vector<ValueId>& yielded);
  std::vector<ValueId> emit_for(ValueId lo, ValueId hi, const std::vector<ValueId>& init, Region body);
  std::vector<ValueId> emit_while(const std::vector<ValueId>& init, Region cond, Region body);
  std::vector<ValueId> emit_if(ValueId pred, Region then_region, Region else_region);

  // Runs `emit_values` with what it emits appended to the kernel body's top level (before the loop
  // or conditional being traced), then returns to the innermost open region: for values the whole
  // kernel needs, such as the origin of a buffer that run_scoped makes inside a loop.
  void at_top_level(const std::function<void()>& emit_values);

  // Moves the finished top-level body into the kernel; call once, after tracing.
  void finish();

  // Result type of Dot for operand dtype t: float32 for 16/32-bit floats, int32 for small ints.
  static DType dot_result_dtype(DType t);

  // Throws unless every dimension is >= 0 and the tile has at most 2^31 elements.
  void check_shape(const std::string& op, const Shape& shape) const;

 private:
  ValueId new_value(Type t);
  Inst& emit(Inst inst);
  Type ref_access_type(const std::string& op, int ref, const std::vector<IndexEntry>& index,
                       const std::vector<ValueId>& starts) const;
  // Throws unless ref (already range-checked) is an output: stores and atomics never write inputs.
  void check_writable(const std::string& op, int ref) const;
  void check_mask(const std::string& op, ValueId mask, const Shape& shape) const;

  Kernel& kernel_;
  struct Open {
    Region region;
    int serial;
  };
  std::vector<Open> open_;             // open_[0] is the kernel body
  std::vector<int> value_region_;      // serial of the region that defines each value
  int next_serial_ = 0;
};

}  // namespace palladium::ir
