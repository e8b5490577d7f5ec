// Control flow: the region bookkeeping behind fori_loop, while_loop and cond (control.h).
#include "palladium/control.h"

#include "trace/context.h"

namespace palladium::trace {

// A control flow op under construction: its operands and the regions closed so far.
struct PendingControl {
  ir::Op op;
  std::vector<ir::ValueId> operands;   // For: lo, hi; If: pred
  std::vector<ir::ValueId> init;       // carries
  std::vector<ir::Type> carry_types;
  std::vector<ir::Region> regions;
};

}  // namespace palladium::trace

namespace palladium::detail {

using trace::Context;
using trace::PendingControl;

namespace {

std::vector<Value> wrap_all(const std::vector<ir::ValueId>& ids) {
  std::vector<Value> out;
  for (ir::ValueId id : ids) out.push_back(trace::wrap(id));
  return out;
}

// Yielded values take the carry's types; a literal becomes a constant of that type.
std::vector<ir::ValueId> yielded_ids(const std::vector<Value>& values, const std::vector<ir::Type>& types,
                                     const char* op) {
  std::vector<ir::ValueId> ids;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].is_literal() && i < types.size())
      ids.push_back(trace::as_value(values[i], types[i].dtype, types[i].shape, op));
    else
      ids.push_back(trace::as_value(values[i], op));
  }
  return ids;
}

PendingControl& top(ir::Op op, const char* name) {
  Context& ctx = Context::current(name);
  if (ctx.pending().empty() || ctx.pending().back()->op != op)
    ctx.builder().fail(name, "control flow regions closed out of order");
  return *ctx.pending().back();
}

std::unique_ptr<PendingControl> pop(Context& ctx) {
  std::unique_ptr<PendingControl> p(ctx.pending().back());
  ctx.pending().pop_back();
  return p;
}

std::vector<ir::ValueId> materialise(const std::vector<Value>& init, const char* op) {
  std::vector<ir::ValueId> ids;
  for (const Value& v : init) ids.push_back(trace::as_value(v, op));
  return ids;
}

}  // namespace

std::vector<Value> begin_for(const Value& lo, const Value& hi, const std::vector<Value>& init, Value& index) {
  Context& ctx = Context::current("fori_loop");
  ir::Builder& b = ctx.builder();
  DType t = trace::result_dtype(lo, hi);
  if (!is_integer(t)) b.fail("fori_loop", std::string("bounds must be integers, not ") + dtype_name(t));
  auto p = std::make_unique<PendingControl>();
  p->op = ir::Op::For;
  p->operands = {trace::as_value(lo, t, {}, "fori_loop"), trace::as_value(hi, t, {}, "fori_loop")};
  p->init = materialise(init, "fori_loop");
  std::vector<ir::Type> arg_types{{t, {}}};
  for (ir::ValueId v : p->init) {
    p->carry_types.push_back(b.type(v));
    arg_types.push_back(b.type(v));
  }
  std::vector<ir::ValueId> args = b.open_region(arg_types);
  ctx.pending().push_back(p.release());
  index = trace::wrap(args[0]);
  return wrap_all(std::vector<ir::ValueId>(args.begin() + 1, args.end()));
}

std::vector<Value> end_for(const std::vector<Value>& yielded) {
  Context& ctx = Context::current("fori_loop");
  PendingControl& p = top(ir::Op::For, "fori_loop");
  ir::Region body = ctx.builder().close_region(yielded_ids(yielded, p.carry_types, "fori_loop"));
  auto done = pop(ctx);
  return wrap_all(ctx.builder().emit_for(done->operands[0], done->operands[1], done->init, std::move(body)));
}

std::vector<Value> begin_while(const std::vector<Value>& init) {
  Context& ctx = Context::current("while_loop");
  auto p = std::make_unique<PendingControl>();
  p->op = ir::Op::While;
  p->init = materialise(init, "while_loop");
  for (ir::ValueId v : p->init) p->carry_types.push_back(ctx.builder().type(v));
  std::vector<ir::ValueId> args = ctx.builder().open_region(p->carry_types);
  ctx.pending().push_back(p.release());
  return wrap_all(args);
}

std::vector<Value> while_body(const Value& keep_going) {
  Context& ctx = Context::current("while_loop");
  PendingControl& p = top(ir::Op::While, "while_loop");
  ir::ValueId pred = trace::as_value(keep_going, "while_loop");
  p.regions.push_back(ctx.builder().close_region({pred}));
  return wrap_all(ctx.builder().open_region(p.carry_types));
}

std::vector<Value> end_while(const std::vector<Value>& yielded) {
  Context& ctx = Context::current("while_loop");
  PendingControl& p = top(ir::Op::While, "while_loop");
  ir::Region body = ctx.builder().close_region(yielded_ids(yielded, p.carry_types, "while_loop"));
  auto done = pop(ctx);
  return wrap_all(ctx.builder().emit_while(done->init, std::move(done->regions[0]), std::move(body)));
}

void begin_cond(const Value& pred) {
  Context& ctx = Context::current("cond");
  auto p = std::make_unique<PendingControl>();
  p->op = ir::Op::If;
  p->operands = {trace::as_value(pred, DType::bool_, {}, "cond")};
  if (!pred.is_literal() && (pred.dtype() != DType::bool_ || !pred.shape().empty()))
    ctx.builder().fail("cond", "predicate must be a bool scalar");
  ctx.builder().open_region({});
  ctx.pending().push_back(p.release());
}

void cond_else(const std::vector<Value>& yielded) {
  Context& ctx = Context::current("cond");
  PendingControl& p = top(ir::Op::If, "cond");
  std::vector<ir::ValueId> ids = yielded_ids(yielded, {}, "cond");
  for (ir::ValueId v : ids) p.carry_types.push_back(ctx.builder().type(v));
  p.regions.push_back(ctx.builder().close_region(ids));
  ctx.builder().open_region({});
}

std::vector<Value> end_cond(const std::vector<Value>& yielded) {
  Context& ctx = Context::current("cond");
  PendingControl& p = top(ir::Op::If, "cond");
  ir::Region else_region = ctx.builder().close_region(yielded_ids(yielded, p.carry_types, "cond"));
  auto done = pop(ctx);
  return wrap_all(ctx.builder().emit_if(done->operands[0], std::move(done->regions[0]), std::move(else_region)));
}

}  // namespace palladium::detail

namespace palladium::trace {
// Frees control flow ops left open when a trace is abandoned by an exception.
void free_pending(std::vector<PendingControl*>& pending) {
  for (PendingControl* p : pending) delete p;
  pending.clear();
}
}  // namespace palladium::trace
