#include "backends/common/hoist_invariants.h"

#include <set>

namespace palladium::backend {
namespace {

bool movable(const ir::Kernel& k, const ir::Inst& in) {
  if (!in.regions.empty() || ir::has_effects(in)) return false;
  switch (ir::op_family(in.op)) {
    case ir::Family::Leaf: case ir::Family::Unary: case ir::Family::Binary: case ir::Family::Compare:
    case ir::Family::Select: case ir::Family::Cast: case ir::Family::Layout: case ir::Family::Reduce: break;
    default: return false;
  }
  for (ir::ValueId r : in.results)
    if (numel(k.type(r).shape) > kMaxHoistedElements) return false;
  return true;
}

// Every value defined in `r` (its arguments and results, nested regions included).
void defined_in(const ir::Region& r, std::set<ir::ValueId>& out) {
  out.insert(r.args.begin(), r.args.end());
  for (const ir::Inst& in : r.body) {
    out.insert(in.results.begin(), in.results.end());
    for (const ir::Region& sub : in.regions) defined_in(sub, out);
  }
}

void hoist(const ir::Kernel& k, ir::Region& r) {
  std::vector<ir::Inst> out;
  out.reserve(r.body.size());
  for (ir::Inst& in : r.body) {
    for (ir::Region& sub : in.regions) hoist(k, sub);
    if (in.op == ir::Op::For) {
      ir::Region& body = in.regions[0];
      std::set<ir::ValueId> inside;
      defined_in(body, inside);
      std::vector<ir::Inst> kept;
      for (ir::Inst& x : body.body) {
        bool invariant = movable(k, x);
        for (ir::ValueId o : x.operands) invariant = invariant && !inside.count(o);
        if (!invariant) {
          kept.push_back(std::move(x));
          continue;
        }
        for (ir::ValueId v : x.results) inside.erase(v);
        out.push_back(std::move(x));
      }
      body.body = std::move(kept);
    }
    out.push_back(std::move(in));
  }
  r.body = std::move(out);
}

}  // namespace

ir::Kernel hoist_loop_invariants(ir::Kernel kernel) {
  hoist(kernel, kernel.body);
  return kernel;
}

}  // namespace palladium::backend
