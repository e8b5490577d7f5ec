// What an IR pass that reorders instructions may move: instructions whose result depends only on
// their operands, and loads of refs the kernel never writes.
#pragma once

#include <cstdint>
#include <functional>
#include <set>

#include "ir/ir.h"

namespace palladium::backend {

// Families whose instructions compute their result from their operands alone (no memory, no regions).
inline bool pure_family(ir::Family f) {
  switch (f) {
    case ir::Family::Leaf:
    case ir::Family::Unary:
    case ir::Family::Binary:
    case ir::Family::Compare:
    case ir::Family::Select:
    case ir::Family::Cast:
    case ir::Family::Layout:
    case ir::Family::Reduce:
    case ir::Family::Scan:
    case ir::Family::Dot: return true;
    case ir::Family::Memory:
    case ir::Family::Control:
    case ir::Family::Effect: return false;
  }
  return false;
}

// The refs a kernel writes (stores and atomic updates, in any region), with the inputs aliased to
// them, which may share their memory: a load of one of these keeps its place.
inline std::set<int64_t> written_refs(const ir::Kernel& k) {
  std::set<int64_t> written;
  std::function<void(const ir::Region&)> visit = [&](const ir::Region& r) {
    for (const ir::Inst& in : r.body) {
      if (ir::op_family(in.op) == ir::Family::Memory && in.op != ir::Op::Load) written.insert(in.i0);
      for (const ir::Region& s : in.regions) visit(s);
    }
  };
  visit(k.body);
  for (auto [in, out] : k.aliases)
    if (written.count(k.num_inputs + out)) written.insert(in);
  return written;
}

}  // namespace palladium::backend
