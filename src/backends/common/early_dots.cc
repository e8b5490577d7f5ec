#include "backends/common/early_dots.h"
#include "backends/common/movable.h"

#include <algorithm>
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

// The number of products each element of a dot's result sums.
int64_t contraction(const ir::Kernel& k, const Inst& dot) {
  const Shape& a = k.type(dot.operands[0]).shape;
  return dot.i0 ? a[0] : a[1];
}

class EarlyDots {
 public:
  EarlyDots(const ir::Kernel& k, int64_t min_contraction) : out_(k), min_contraction_(min_contraction) {}

  ir::Kernel run() {
    written_ = written_refs(out_);
    reorder(out_.body);
    return out_;
  }

 private:
  bool movable(const Inst& in) const {
    if (!in.regions.empty()) return false;
    if (ir::op_family(in.op) == ir::Family::Memory) return in.op == Op::Load && !written_.count(in.i0);
    return pure_family(ir::op_family(in.op));
  }

  static void collect_reads(const Inst& in, std::vector<ValueId>& reads) {
    reads.insert(reads.end(), in.operands.begin(), in.operands.end());
    for (const Region& s : in.regions)
      for (const Inst& inner : s.body) collect_reads(inner, reads);
  }

  void reorder(Region& r) {
    for (Inst& in : r.body)
      for (Region& s : in.regions) reorder(s);
    const size_t n = r.body.size();
    std::map<ValueId, size_t> def;  // value -> position of its definition in this region
    for (size_t i = 0; i < n; ++i)
      for (ValueId v : r.body[i].results) def[v] = i;
    std::vector<std::vector<size_t>> deps(n);
    for (size_t i = 0; i < n; ++i) {
      std::vector<ValueId> reads;
      collect_reads(r.body[i], reads);
      for (ValueId v : reads) {
        if (auto d = def.find(v); d != def.end() && d->second < i) deps[i].push_back(d->second);
      }
    }
    // The instructions a dot needs, transitively, within this region (itself included).
    auto closure = [&](size_t root) {
      std::set<size_t> seen;
      std::function<void(size_t)> visit = [&](size_t i) {
        if (!seen.insert(i).second) return;
        for (size_t d : deps[i]) visit(d);
      };
      visit(root);
      return seen;
    };
    std::vector<bool> placed(n, false);
    std::vector<size_t> order;
    for (size_t i = 0; i < n; ++i) {
      if (placed[i]) continue;
      placed[i] = true;
      order.push_back(i);
      if (r.body[i].op != Op::Dot) continue;
      for (size_t j = i + 1; j < n; ++j) {
        if (placed[j] || r.body[j].op != Op::Dot || contraction(out_, r.body[j]) < min_contraction_) continue;
        // Only what the dot reads moves. An addend it would accumulate onto (acc + dot) stays
        // where it was, after the dot, so the dot accumulates from zero and the add follows its
        // wait: accumulating onto values computed in the loop, ptxas (CUDA 13) made the moved
        // dot wait for the one before it (C7517), which undid the overlap.
        const std::set<size_t> need = closure(j);
        bool ok = true;
        for (size_t m : need)
          ok = ok && (m == j || r.body[m].op != Op::Dot) && (placed[m] || movable(r.body[m]));
        if (!ok) continue;
        for (size_t m : need)  // ascending: the order as written among the moved instructions
          if (!placed[m]) {
            placed[m] = true;
            order.push_back(m);
          }
      }
    }
    if (std::is_sorted(order.begin(), order.end())) return;  // nothing moved
    std::vector<Inst> body;
    body.reserve(n);
    for (size_t i : order) body.push_back(std::move(r.body[i]));
    r.body = std::move(body);
  }

  ir::Kernel out_;
  int64_t min_contraction_;
  std::set<int64_t> written_;
};

}  // namespace

ir::Kernel issue_independent_dots_early(const ir::Kernel& kernel, int64_t min_contraction) {
  return EarlyDots(kernel, min_contraction).run();
}

}  // namespace palladium::backend
