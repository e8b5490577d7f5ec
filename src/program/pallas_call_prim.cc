// pallas_call as a primitive of the program IR: a user kernel inside jit, grad or vmap is one
// equation whose params hold the call; its result types come from the call's own description.
// Pallas's None inputs are not operands of the equation: params.axes lists their positions.
#include "core/grid_mapping.h"
#include "program/executor.h"
#include "program/pallas_call_prim.h"

#include "palladium/device.h"
#include "program/trace.h"

namespace palladium::program {

std::vector<Array> with_none_inputs(const Params& q, const std::vector<Array>& defined) {
  std::vector<Array> all;
  size_t next = 0;
  const size_t total = defined.size() + q.axes.size();
  for (size_t i = 0; i < total; ++i) {
    bool none = false;
    for (int64_t a : q.axes) none = none || a == static_cast<int64_t>(i);
    all.push_back(none ? Array() : defined.at(next++));
  }
  return all;
}

}  // namespace palladium::program

namespace palladium::detail {

std::vector<Array> call_or_bind(const std::shared_ptr<CallImpl>& call, const std::vector<Array>& inputs) {
  if (program::Trace::current() == nullptr) {
    for (const Array& a : inputs)
      PL_CHECK(!a.is_tracer(), "pallas_call '", call->name(),
               "': a traced Array escaped the function that was traced (it is used after its jit/grad/vmap finished)");
    std::vector<Array> whole = inputs;
    for (Array& a : whole)
      if (a.is_sharded()) a = to_host(a);  // run eagerly, a kernel sees a sharded Array's global value
    return invoke(*call, whole);
  }
  InputTypes types;
  program::Params q;
  std::vector<Array> operands;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      types.push_back(std::nullopt);
      q.axes.push_back(static_cast<int64_t>(i));
      continue;
    }
    types.push_back(ShapeDtype(inputs[i].shape(), inputs[i].dtype()));
    operands.push_back(inputs[i]);
  }
  const CallDesc d = describe(*call, types);
  for (size_t o = 0; o < d.num_results(); ++o) q.out_types.push_back({d.outputs[o].shape, d.outputs[o].dtype});
  q.callee = call;
  q.name = call->name();
  return program::bind(program::Prim::pallas_call, std::move(q), operands);
}

}  // namespace palladium::detail
