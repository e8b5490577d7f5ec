#include "backends/common/carried_loads.h"
#include "backends/common/movable.h"

#include <functional>
#include <map>
#include <set>
#include <vector>

namespace palladium::backend {
namespace {

using ir::Inst;
using ir::Op;
using ir::Region;
using ir::ValueId;

class CarriedLoads {
 public:
  CarriedLoads(const ir::Kernel& k, int64_t max_elements) : out_(k), max_elements_(max_elements) {}

  ir::Kernel run() {
    written_ = written_refs(out_);
    rewrite(out_.body);
    if (changed_) ir::remove_dead_code(out_);
    return out_;
  }

 private:

  ValueId fresh(ir::Type t) {
    out_.types.push_back(std::move(t));
    return static_cast<ValueId>(out_.types.size() - 1);
  }

  // A copy of `in` reading through `map`, with fresh results (added to `map`).
  Inst clone(const Inst& in, std::map<ValueId, ValueId>& map) {
    Inst c = in;
    for (ValueId& o : c.operands)
      if (auto it = map.find(o); it != map.end()) o = it->second;
    for (ValueId& r : c.results) {
      const ValueId n = fresh(out_.type(r));
      map[r] = n;
      r = n;
    }
    return c;
  }

  static void replace_uses(Region& r, ValueId from, ValueId to) {
    for (Inst& in : r.body) {
      for (ValueId& o : in.operands)
        if (o == from) o = to;
      for (Region& s : in.regions) replace_uses(s, from, to);
    }
  }

  void rewrite(Region& r) {
    std::vector<Inst> body;
    body.reserve(r.body.size());
    for (Inst& in : r.body) {
      for (Region& s : in.regions) rewrite(s);
      if (in.op == Op::For)
        for (Inst& before : carry(in)) body.push_back(std::move(before));
      body.push_back(std::move(in));
    }
    r.body = std::move(body);
  }

  // Rewrites `loop` in place; returns what goes before it (the first iteration's loads).
  std::vector<Inst> carry(Inst& loop) {
    Region& body = loop.regions[0];
    if (body.body.empty() || body.body.back().op != Op::Yield) return {};
    bool has_dot = false;  // only loops around dots: where the latency was measured to cost
    for (const Inst& in : body.body) has_dot = has_dot || in.op == Op::Dot;
    if (!has_dot) return {};
    const ValueId counter = body.args[0];
    const std::set<ValueId> carried(body.args.begin() + 1, body.args.end());
    std::map<ValueId, size_t> def;
    for (size_t p = 0; p < body.body.size(); ++p)
      for (ValueId v : body.body[p].results) def[v] = p;
    // The positions a load needs (itself included), or none where one of them may not run early.
    auto closure = [&](size_t root) {
      std::set<size_t> need;
      bool ok = true, counted = false;
      std::function<void(size_t)> visit = [&](size_t p) {
        if (!need.insert(p).second) return;
        const Inst& in = body.body[p];
        const bool load = in.op == Op::Load && !written_.count(in.i0) && !(in.i1 & ir::kGather);
        ok = ok && in.regions.empty() && (load || pure_family(ir::op_family(in.op)));
        for (ValueId o : in.operands) {
          counted = counted || o == counter;
          ok = ok && !carried.count(o);
          if (auto d = def.find(o); d != def.end()) visit(d->second);
        }
      };
      visit(root);
      return ok && counted ? need : std::set<size_t>{};
    };
    std::vector<size_t> loads;
    std::set<size_t> needed;
    for (size_t p = 0; p < body.body.size(); ++p) {
      const Inst& in = body.body[p];
      if (in.op != Op::Load || in.results.size() != 1) continue;
      const Shape& s = out_.type(in.results[0]).shape;
      if (s.size() > 1 || numel(s) > max_elements_) continue;
      const std::set<size_t> need = closure(p);
      if (need.empty()) continue;
      loads.push_back(p);
      needed.insert(need.begin(), need.end());
    }
    if (loads.empty()) return {};
    changed_ = true;
    // Before the loop: iteration lo's values.
    std::map<ValueId, ValueId> first{{counter, loop.operands[0]}};
    std::vector<Inst> before;
    for (size_t p : needed) before.push_back(clone(body.body[p], first));
    // At the end of each iteration: those of min(i + 1, hi - 1).
    const ir::Type index_type = out_.type(counter);
    const ValueId one = fresh(index_type), after = fresh(index_type), last = fresh(index_type), next = fresh(index_type);
    std::vector<Inst> tail;
    tail.push_back(Inst{.op = Op::Const, .results = {one}, .i0 = 1});
    tail.push_back(Inst{.op = Op::Add, .results = {after}, .operands = {counter, one}});
    tail.push_back(Inst{.op = Op::Sub, .results = {last}, .operands = {loop.operands[1], one}});
    tail.push_back(Inst{.op = Op::Min, .results = {next}, .operands = {after, last}});
    std::map<ValueId, ValueId> following{{counter, next}};
    for (size_t p : needed) tail.push_back(clone(body.body[p], following));
    for (size_t p : loads) {
      const ValueId loaded = body.body[p].results[0];
      const ir::Type t = out_.type(loaded);
      const ValueId arg = fresh(t);
      replace_uses(body, loaded, arg);
      body.args.push_back(arg);
      loop.operands.push_back(first.at(loaded));
      loop.results.push_back(fresh(t));
      body.body.back().operands.push_back(following.at(loaded));
    }
    body.body.insert(body.body.end() - 1, std::make_move_iterator(tail.begin()), std::make_move_iterator(tail.end()));
    return before;
  }

  ir::Kernel out_;
  int64_t max_elements_;
  std::set<int64_t> written_;
  bool changed_ = false;
};

}  // namespace

ir::Kernel carry_loop_loads(const ir::Kernel& kernel, int64_t max_elements) {
  return CarriedLoads(kernel, max_elements).run();
}

}  // namespace palladium::backend
