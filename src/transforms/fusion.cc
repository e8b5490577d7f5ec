// Fusion: elementwise equations that produce arrays of one shape join one group, lowered to one
// kernel. A group stays open while later equations may join it and closes as soon as anything
// outside it reads one of its values, so groups run in dependency order. Constants (`full`) are
// recomputed inside every group that reads them instead of being materialised.
#include <set>

#include "program/executor.h"
#include "program/families.h"

namespace palladium::program {

namespace {

struct Open {
  FusionGroup group;
  Shape shape;
  std::set<int> produced;
  std::set<int> inputs;   // read from outside so far
  size_t outputs = 0;     // results read outside (or returned), so far
};

// A generated kernel takes at most 24 refs: cap a group's operands and results.
constexpr size_t kMaxGroupInputs = 16;
constexpr size_t kMaxGroupOutputs = 6;

bool inlinable(const Eqn& e) { return e.prim == Prim::full; }

}  // namespace

std::vector<FusionGroup> fuse(const Program& p, bool enabled) {
  std::vector<int> producer(p.types.size(), -1);
  for (size_t i = 0; i < p.eqns.size(); ++i)
    for (int v : p.eqns[i].outs) producer[static_cast<size_t>(v)] = static_cast<int>(i);
  std::set<int> returned(p.outputs.begin(), p.outputs.end());
  std::vector<std::vector<size_t>> readers(p.types.size());
  for (size_t i = 0; i < p.eqns.size(); ++i)
    for (int v : p.eqns[i].ins) readers[static_cast<size_t>(v)].push_back(i);

  // Whether v may be read outside an elementwise group: by a non-elementwise equation, or returned.
  auto escapes = [&](int v) {
    if (returned.count(v)) return true;
    for (size_t j : readers[static_cast<size_t>(v)])
      if (!enabled || !is_elementwise(p.eqns[j].prim)) return true;
    return false;
  };
  std::vector<FusionGroup> done;
  std::vector<Open> open;
  std::set<int> materialised;  // inlinable vars given a step of their own

  auto finish = [&](FusionGroup g) {
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
        if (g.elementwise && inlinable(e) && g.eqns.size() > 1) continue;
        bool used_outside = returned.count(v) > 0;
        for (size_t j : readers[static_cast<size_t>(v)])
          if (!members.count(j) && !(inlinable(e) && is_elementwise(p.eqns[j].prim) && enabled)) used_outside = true;
        if (used_outside || !g.elementwise) g.outs.push_back(v);
      }
    }
    done.push_back(std::move(g));
  };
  auto close = [&](size_t k) {
    FusionGroup g = std::move(open[k].group);
    open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
    finish(std::move(g));
  };
  auto close_producers_of = [&](int v, const Open* keep) {
    for (size_t k = 0; k < open.size();)
      if (&open[k] != keep && open[k].produced.count(v)) close(k);
      else ++k;
  };
  // An inlinable var read where it cannot be inlined gets its own step, once.
  auto materialise = [&](int v) {
    const int pi = producer[static_cast<size_t>(v)];
    if (pi < 0 || !inlinable(p.eqns[static_cast<size_t>(pi)]) || !materialised.insert(v).second) return;
    FusionGroup g;
    g.eqns = {static_cast<size_t>(pi)};
    g.elementwise = true;
    finish(std::move(g));
  };

  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    if (inlinable(e) && enabled) continue;  // placed where it is read
    if (enabled && is_elementwise(e.prim)) {
      const Shape& s = p.type(e.outs[0]).shape;
      Open* target = nullptr;
      for (Open& o : open)
        if (o.shape == s) target = &o;
      for (int v : e.ins) {
        close_producers_of(v, target);
        // close() may move the open groups: find the target again.
        target = nullptr;
        for (Open& o : open)
          if (o.shape == s) target = &o;
      }
      // Start a new group when this equation would take the group past its refs.
      if (target != nullptr) {
        size_t new_ins = 0, new_outs = 0;
        for (int v : e.ins) {
          const int pi = producer[static_cast<size_t>(v)];
          const bool inlined = pi >= 0 && inlinable(p.eqns[static_cast<size_t>(pi)]);
          new_ins += !inlined && !target->produced.count(v) && !target->inputs.count(v) ? 1 : 0;
        }
        for (int v : e.outs) new_outs += escapes(v) ? 1 : 0;
        if (target->inputs.size() + new_ins > kMaxGroupInputs || target->outputs + new_outs > kMaxGroupOutputs) {
          for (size_t k = 0; k < open.size(); ++k)
            if (&open[k] == target) { close(k); break; }
          target = nullptr;
        }
      }
      if (target == nullptr) {
        open.push_back(Open{{}, s, {}, {}, 0});
        open.back().group.elementwise = true;
        target = &open.back();
      }
      for (int v : e.ins) {
        const int pi = producer[static_cast<size_t>(v)];
        if (pi >= 0 && inlinable(p.eqns[static_cast<size_t>(pi)]) && !target->produced.count(v)) {
          target->group.eqns.push_back(static_cast<size_t>(pi));
          target->produced.insert(v);
        }
      }
      target->group.eqns.push_back(i);
      for (int v : e.ins)
        if (!target->produced.count(v)) target->inputs.insert(v);
      for (int v : e.outs) {
        target->produced.insert(v);
        target->outputs += escapes(v) ? 1 : 0;
      }
      continue;
    }
    for (int v : e.ins) {
      close_producers_of(v, nullptr);
      if (enabled) materialise(v);
    }
    FusionGroup g;
    g.eqns = {i};
    g.elementwise = is_elementwise(e.prim);
    finish(std::move(g));
  }
  while (!open.empty()) close(0);
  if (enabled)
    for (int v : p.outputs) materialise(v);
  // Groups are finished in dependency order: a group closes before anything reading its values,
  // and a materialised constant is finished before the reader that needed it.
  return done;
}

}  // namespace palladium::program
