// Fusion: equations over one domain shape join one group, lowered to one kernel. A group holds
// elementwise equations, and also reductions (sum, max, min) whose reduced axes fit in one block,
// with the reshapes that put their reduced axes back as size-1 dimensions: a row softmax or a
// column mean with what follows it is one kernel, each program holding whole rows (columns).
//
// Every value of a group is held in the kernel at the domain's rank: its "embedded" shape is the
// domain with size-1 dimensions where it is broadcast or reduced. An elementwise equation joins a
// group only where NumPy's broadcasting of its operands' program shapes is the broadcasting of
// their embedded shapes; a reshape joins only where it is the identity on the embedded shape.
//
// A group stays open while later equations may join it and closes as soon as anything outside it
// reads one of its values, so groups run in dependency order. Constants (`full`) are recomputed
// inside every group that reads them instead of being materialised.
#include <algorithm>
#include <list>
#include <map>
#include <set>

#include "program/executor.h"
#include "program/families.h"
#include "program/kernel_util.h"
#include "program/lower.h"

namespace palladium::program {

namespace {

struct Open {
  FusionGroup group;
  // A group headed by a matmul takes its tiling: its operands are read in the matmul's blocks
  // only, and a reduction joins only over result axes that one block holds whole.
  bool matmul_head = false;
  std::set<int> head_operands;
  std::set<int> inputs;           // read from outside so far
  size_t outputs = 0;             // results read outside (or returned), so far
  const Shape& domain() const { return group.domain; }
  const Shape& embedded(int v) const { return group.embedded.at(v); }
  bool produces(int v) const { return group.embedded.count(v) > 0; }
};

// A generated kernel takes at most 24 refs: cap a group's operands and results.
constexpr size_t kMaxGroupInputs = 16;
constexpr size_t kMaxGroupOutputs = 6;

bool inlinable(const Eqn& e) { return e.prim == Prim::full; }

// A transpose of the last two axes, read once, by a matmul: the matmul reads the transpose's
// operand with its dot transposed instead (x @ w.T costs no copy of w).
bool swaps_last_two(const Eqn& e) {
  const std::vector<int64_t>& perm = e.params.axes;
  const size_t r = perm.size();
  if (e.prim != Prim::transpose || r < 2) return false;
  for (size_t d = 0; d + 2 < r; ++d)
    if (perm[d] != static_cast<int64_t>(d)) return false;
  return perm[r - 2] == static_cast<int64_t>(r - 1) && perm[r - 1] == static_cast<int64_t>(r - 2);
}

bool fusible_reduction(Prim p) { return p == Prim::reduce_sum || p == Prim::reduce_max || p == Prim::reduce_min; }

bool is_whole(const FusionGroup& g, size_t d) {
  for (int64_t a : g.whole)
    if (static_cast<size_t>(a) == d) return true;
  return false;
}

// Elements of the domain along its whole axes, with `more` added.
int64_t whole_extent(const FusionGroup& g, const std::vector<int64_t>& more) {
  std::set<int64_t> axes(g.whole.begin(), g.whole.end());
  axes.insert(more.begin(), more.end());
  int64_t n = 1;
  for (int64_t a : axes) n *= g.domain[static_cast<size_t>(a)];
  return n;
}

}  // namespace

std::vector<FusionGroup> fuse(const Program& p, bool enabled, const std::string& backend) {
  const int64_t budget = block_budget(backend);
  const int64_t tile = matmul_tile(backend);
  std::vector<int> producer(p.types.size(), -1);
  for (size_t i = 0; i < p.eqns.size(); ++i)
    for (int v : p.eqns[i].outs) producer[static_cast<size_t>(v)] = static_cast<int>(i);
  std::set<int> returned(p.outputs.begin(), p.outputs.end());
  std::vector<std::vector<size_t>> readers(p.types.size());
  for (size_t i = 0; i < p.eqns.size(); ++i)
    for (int v : p.eqns[i].ins) readers[static_cast<size_t>(v)].push_back(i);
  auto may_join = [&](const Eqn& e) {
    return enabled && (is_elementwise(e.prim) || fusible_reduction(e.prim) || e.prim == Prim::reshape);
  };
  // Transposes folded into the matmul that reads them (placed in its group, not run on their own).
  auto folded_transpose = [&](int v) {
    const int pi = producer[static_cast<size_t>(v)];
    if (!enabled || pi < 0 || !swaps_last_two(p.eqns[static_cast<size_t>(pi)]) || returned.count(v)) return false;
    const std::vector<size_t>& rs = readers[static_cast<size_t>(v)];
    if (rs.size() != 1 || p.eqns[rs[0]].prim != Prim::matmul) return false;
    const std::vector<int>& mins = p.eqns[rs[0]].ins;
    return std::count(mins.begin(), mins.end(), v) == 1;
  };
  auto is_inlined = [&](int v) {
    const int pi = producer[static_cast<size_t>(v)];
    return pi >= 0 && inlinable(p.eqns[static_cast<size_t>(pi)]);
  };

  // Whether v may be read outside a group: by an equation that never joins one, or returned.
  auto escapes = [&](int v) {
    if (returned.count(v)) return true;
    for (size_t j : readers[static_cast<size_t>(v)])
      if (!may_join(p.eqns[j])) return true;
    return false;
  };
  std::vector<FusionGroup> done;
  std::list<Open> open;  // a list: groups keep their address while others close
  std::set<int> materialised;  // inlinable vars given a step of their own

  auto finish = [&](FusionGroup g) {
    if (g.eqns.size() == 1 && p.eqns[g.eqns[0]].prim == Prim::matmul) g.fused = false;  // a plain matmul
    std::set<size_t> members(g.eqns.begin(), g.eqns.end());
    std::set<int> produced, ins_seen;
    for (size_t i : g.eqns)
      for (int v : p.eqns[i].outs) produced.insert(v);
    for (size_t i : g.eqns)
      for (int v : p.eqns[i].ins)
        if (!produced.count(v) && ins_seen.insert(v).second) g.ins.push_back(v);
    for (size_t i : g.eqns) {
      const Eqn& e = p.eqns[i];
      for (int v : e.outs) {
        if (g.fused && inlinable(e) && g.eqns.size() > 1) continue;
        bool used_outside = returned.count(v) > 0;
        for (size_t j : readers[static_cast<size_t>(v)])
          if (!members.count(j) && !(inlinable(e) && is_elementwise(p.eqns[j].prim) && enabled)) used_outside = true;
        if (used_outside || !g.fused) g.outs.push_back(v);
      }
    }
    done.push_back(std::move(g));
  };
  auto close = [&](std::list<Open>::iterator it) {
    FusionGroup g = std::move(it->group);
    open.erase(it);
    finish(std::move(g));
  };
  auto close_producers_of = [&](int v, const Open* keep) {
    for (auto it = open.begin(); it != open.end();) {
      auto next = std::next(it);
      if (&*it != keep && it->produces(v)) close(it);
      it = next;
    }
  };
  auto open_group = [&](const Shape& domain) {
    open.push_back(Open{});
    open.back().group.fused = true;
    open.back().group.domain = domain;
    return &open.back();
  };
  // An inlinable var read where it cannot be inlined gets its own step, once.
  auto materialise = [&](int v) {
    const int pi = producer[static_cast<size_t>(v)];
    if (pi < 0 || !inlinable(p.eqns[static_cast<size_t>(pi)]) || !materialised.insert(v).second) return;
    FusionGroup g;
    g.eqns = {static_cast<size_t>(pi)};
    g.fused = true;
    g.domain = p.type(v).shape;
    g.embedded[v] = g.domain;
    finish(std::move(g));
  };
  // Whether a value the group produces reads, in the kernel, as its program shape broadcasts.
  auto reads_as_program = [&](const Open& o, int v) {
    return !o.produces(v) || at_rank(p.type(v).shape, o.domain().size()) == o.embedded(v);
  };
  // Where an elementwise equation of result shape s may go: a group producing one of its operands
  // (its result broadcast only along that group's whole axes), else a group of domain s.
  auto elementwise_target = [&](const Eqn& e, const Shape& s) -> Open* {
    Open* same_shape = nullptr;
    Open* feeding = nullptr;
    for (Open& o : open) {
      if (s.size() > o.domain().size()) continue;
      const Shape out = at_rank(s, o.domain().size());
      bool fits = true, feeds = false;
      for (int v : e.ins) fits = fits && !o.head_operands.count(v);
      for (size_t d = 0; d < out.size() && fits; ++d)
        fits = out[d] == o.domain()[d] || (out[d] == 1 && (o.domain()[d] == 1 || is_whole(o.group, d)));
      for (int v : e.ins) {
        fits = fits && reads_as_program(o, v);
        feeds = feeds || o.produces(v);
      }
      if (!fits) continue;
      if (feeds) feeding = &o;
      else if (s == o.domain()) same_shape = &o;
    }
    return feeding ? feeding : same_shape;
  };
  auto reduction_target = [&](const Eqn& e) -> Open* {
    const Shape& x = p.type(e.ins[0]).shape;
    int64_t reduced = 1;
    for (int64_t a : e.params.axes) reduced *= x[static_cast<size_t>(a)];
    if (numel(x) == 0 || reduced > budget) return nullptr;
    Open* best = nullptr;
    auto held_whole = [&](const Open& o) {
      if (!o.matmul_head) return true;
      const size_t r = x.size();
      for (int64_t a : e.params.axes)
        if (!((static_cast<size_t>(a) + 2 >= r) && x[static_cast<size_t>(a)] <= tile)) return false;
      return !o.head_operands.count(e.ins[0]);
    };
    for (Open& o : open) {
      if (o.domain() != x || whole_extent(o.group, e.params.axes) > budget || !held_whole(o)) continue;
      if (o.produces(e.ins[0])) {
        if (o.embedded(e.ins[0]) == x) best = &o;
      } else if (!best || !best->produces(e.ins[0])) {
        best = &o;
      }
    }
    return best ? best : open_group(x);
  };
  auto reshape_target = [&](const Eqn& e) -> Open* {
    const Shape& out = p.type(e.outs[0]).shape;
    for (Open& o : open)
      if (o.produces(e.ins[0]) && out.size() <= o.domain().size() && at_rank(out, o.domain().size()) == o.embedded(e.ins[0]))
        return &o;
    return nullptr;
  };

  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    if (inlinable(e) && enabled) continue;  // placed where it is read
    if (!e.outs.empty() && folded_transpose(e.outs[0])) continue;  // placed in its matmul's group
    Open* target = nullptr;
    if (enabled && is_elementwise(e.prim)) {
      target = elementwise_target(e, p.type(e.outs[0]).shape);
      if (!target) target = open_group(p.type(e.outs[0]).shape);
    } else if (enabled && fusible_reduction(e.prim)) {
      target = reduction_target(e);
    } else if (enabled && e.prim == Prim::reshape) {
      target = reshape_target(e);
    } else if (enabled && e.prim == Prim::matmul) {
      for (int v : e.ins) materialise(v);  // a constant operand is an array the matmul's blocks read
      target = open_group(p.type(e.outs[0]).shape);
      target->matmul_head = true;
      target->head_operands.insert(e.ins.begin(), e.ins.end());
      for (int v : e.ins)
        if (folded_transpose(v)) {
          const Eqn& t = p.eqns[static_cast<size_t>(producer[static_cast<size_t>(v)])];
          close_producers_of(t.ins[0], target);
          materialise(t.ins[0]);
          target->group.eqns.push_back(static_cast<size_t>(producer[static_cast<size_t>(v)]));
          target->group.embedded[v] = p.type(v).shape;
          target->head_operands.insert(t.ins[0]);
          target->inputs.insert(t.ins[0]);
        }
    }
    if (target) {
      for (int v : e.ins) close_producers_of(v, target);
      // Start a new group when this equation would take the group past its refs (a reshape
      // becomes a view step of its own; a matmul always heads a new group, within them).
      size_t new_ins = 0, new_outs = 0;
      for (int v : e.ins) new_ins += !is_inlined(v) && !target->produces(v) && !target->inputs.count(v) ? 1 : 0;
      for (int v : e.outs) new_outs += escapes(v) ? 1 : 0;
      if (target->inputs.size() + new_ins > kMaxGroupInputs || target->outputs + new_outs > kMaxGroupOutputs) {
        PL_ASSERT(e.prim != Prim::matmul, "fusion: a new matmul group past its refs");
        for (auto it = open.begin(); it != open.end(); ++it)
          if (&*it == target) { close(it); break; }
        target = e.prim == Prim::reshape ? nullptr
                 : open_group(p.type(fusible_reduction(e.prim) ? e.ins[0] : e.outs[0]).shape);
      }
    }
    if (target) {
      for (int v : e.ins)
        if (e.prim != Prim::matmul && is_inlined(v) && !target->produces(v)) {
          target->group.eqns.push_back(static_cast<size_t>(producer[static_cast<size_t>(v)]));
          target->group.embedded[v] = at_rank(p.type(v).shape, target->domain().size());
        }
      target->group.eqns.push_back(i);
      for (int v : e.ins)
        if (!target->produces(v)) target->inputs.insert(v);
      const size_t r = target->domain().size();
      if (fusible_reduction(e.prim)) {
        Shape emb = target->domain();
        for (int64_t a : e.params.axes) {
          emb[static_cast<size_t>(a)] = 1;
          if (!is_whole(target->group, static_cast<size_t>(a))) target->group.whole.push_back(a);
        }
        std::sort(target->group.whole.begin(), target->group.whole.end());
        target->group.embedded[e.outs[0]] = emb;
      } else if (e.prim == Prim::reshape) {
        target->group.embedded[e.outs[0]] = target->embedded(e.ins[0]);
      } else {
        target->group.embedded[e.outs[0]] = at_rank(p.type(e.outs[0]).shape, r);
      }
      for (int v : e.outs) target->outputs += escapes(v) ? 1 : 0;
      continue;
    }
    for (int v : e.ins) {
      close_producers_of(v, nullptr);
      if (enabled) materialise(v);
    }
    FusionGroup g;
    g.eqns = {i};
    g.fused = is_elementwise(e.prim);
    g.domain = p.type(e.outs[0]).shape;
    g.embedded[e.outs[0]] = g.domain;
    finish(std::move(g));
  }
  while (!open.empty()) close(open.begin());
  if (enabled)
    for (int v : p.outputs) materialise(v);
  // Groups are finished in dependency order: a group closes before anything reading its values,
  // and a materialised constant is finished before the reader that needed it.
  return done;
}

}  // namespace palladium::program
