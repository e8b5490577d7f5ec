// The trace context: while a kernel is being traced, the current thread has one, and every Value
// operation appends to its IR through the Builder.
#pragma once
#include <string>
#include <vector>

#include "ir/builder.h"
#include "palladium/value.h"

namespace palladium::trace {

struct PendingControl;  // control flow ops whose regions are still open (control.cc)

class Context {
 public:
  Context(std::string kernel_name, Shape grid, int program_id_offset);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // The context of the trace running on this thread; throws an Error naming `what` if none.
  static Context& current(const char* what);
  static bool active();

  ir::Kernel& kernel() { return kernel_; }
  ir::Builder& builder() { return builder_; }
  uint32_t generation() const { return generation_; }
  int program_id_offset() const { return program_id_offset_; }
  std::vector<PendingControl*>& pending() { return pending_; }

 private:
  ir::Kernel kernel_;
  ir::Builder builder_;
  uint32_t generation_;
  int program_id_offset_;
  Context* previous_;
  std::vector<PendingControl*> pending_;
};

// Helpers shared by the front end.
ir::Builder& builder(const char* what);
DType promote(DType a, DType b);
// Materialise v as an IR value of dtype `t` and shape `shape` (literals become constants, traced
// values are cast and broadcast with NumPy's rules); `op` names the operation for errors.
ir::ValueId as_value(const Value& v, DType t, const Shape& shape, const char* op);
ir::ValueId as_value(const Value& v, const char* op);  // keep its own dtype and shape
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// The dtype two operands meet at, with weak literals taking the other side's dtype.
DType result_dtype(const Value& a, const Value& b);
Value wrap(ir::ValueId id);
// A binary or compare op on two Values after promotion and broadcasting (value.cc).
Value binary_op(ir::Op op, const Value& a, const Value& b, const char* name);

}  // namespace palladium::trace
