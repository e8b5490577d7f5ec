// Collectives run on their own engine (NCCL's stream, another process) while the device computes,
// and a step that reads a collective's result waits only there (executor.cc). What is left exposed
// is the communication that no work follows: the order of the equations decides how much.
//
// A data-parallel backward pass shows it. Its last weight gradients come from independent chains
// (an output projection's dot, and the long chain through attention to the input projection's
// dot), each ending in an all-reduce. In the order the transposition wrote them, the short chain
// runs first and the largest all-reduce comes last, with nothing to overlap.
//
// The order is built from the end (list scheduling in reverse): the latest place goes to work
// that no unplaced equation needs, computation before communication, so that each collective lands
// as early as its operand allows, right after the equation that makes it, with the work that does
// not need it after it. Where only collectives can go, the smallest goes: the collective at the
// very end is the one left exposed. Computation keeps the program's order among itself.
#include "program/schedule.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <vector>

#include "program/families.h"

namespace palladium::program {
namespace {

// Collectives that move data between devices (axis_index and shard_slice are local).
bool communicates(Prim p) { return family_of(p) == Family::collective && p != Prim::axis_index && p != Prim::shard_slice; }

double bytes_of(const Program& p, const std::vector<int>& vars) {
  double b = 0;
  for (int v : vars) b += static_cast<double>(numel(p.type(v).shape)) * static_cast<double>(itemsize(p.type(v).dtype));
  return b;
}

// A collective's time, relative to others: the bytes it moves.
double cost_of(const Program& p, const Eqn& e) { return bytes_of(p, e.ins) + bytes_of(p, e.outs); }

}  // namespace

Program schedule_collectives_early(const Program& p) {
  if (std::none_of(p.eqns.begin(), p.eqns.end(), [](const Eqn& e) { return communicates(e.prim); })) return p;
  const size_t n = p.eqns.size();
  std::map<int, size_t> producer;
  for (size_t i = 0; i < n; ++i)
    for (int v : p.eqns[i].outs) producer[v] = i;
  std::vector<std::set<size_t>> users(n), needs(n);
  for (size_t i = 0; i < n; ++i)
    for (int v : p.eqns[i].ins)
      if (auto it = producer.find(v); it != producer.end()) {
        needs[i].insert(it->second);
        users[it->second].insert(i);
      }
  // Placeable: every user placed. Computation that reads a collective's result first (the
  // later it runs, the longer the collective has), then the latest in the program's order;
  // collectives, the smallest first (ties: the latest).
  std::vector<bool> reads_collective(n, false);  // directly or through views (reshapes)
  auto is_view = [&](size_t d) {
    return family_of(p.eqns[d].prim) == Family::reshape || family_of(p.eqns[d].prim) == Family::constraint;
  };
  for (size_t i = 0; i < n; ++i)
    for (size_t d : needs[i])
      reads_collective[i] = reads_collective[i] || communicates(p.eqns[d].prim) || (is_view(d) && reads_collective[d]);
  auto earlier = [&](size_t a, size_t b) {
    return reads_collective[a] != reads_collective[b] ? reads_collective[b] : a < b;
  };
  std::priority_queue<size_t, std::vector<size_t>, decltype(earlier)> compute(earlier);
  auto larger = [&](size_t a, size_t b) {
    const double ca = cost_of(p, p.eqns[a]), cb = cost_of(p, p.eqns[b]);
    return ca != cb ? ca > cb : a < b;
  };
  std::priority_queue<size_t, std::vector<size_t>, decltype(larger)> collectives(larger);
  std::vector<size_t> unplaced_users(n);
  auto placeable = [&](size_t i) { (communicates(p.eqns[i].prim) ? collectives.push(i) : compute.push(i)); };
  for (size_t i = 0; i < n; ++i) {
    unplaced_users[i] = users[i].size();
    if (unplaced_users[i] == 0) placeable(i);
  }
  std::vector<size_t> reversed;
  while (!compute.empty() || !collectives.empty()) {
    size_t i = 0;
    if (!compute.empty()) {
      i = compute.top();
      compute.pop();
    } else {
      i = collectives.top();
      collectives.pop();
    }
    reversed.push_back(i);
    for (size_t d : needs[i])
      if (--unplaced_users[d] == 0) placeable(d);
  }
  PL_ASSERT(reversed.size() == n, "schedule of program '", p.name, "': its equations are not acyclic");
  Program out = p;
  out.eqns.clear();
  for (size_t k = n; k-- > 0;) out.eqns.push_back(p.eqns[reversed[k]]);
  return out;
}

}  // namespace palladium::program
