// Software pipelining of a loop's wgmma dots (sm_90a). A loop with one dot accumulating into its
// carry (a matmul's K loop) keeps each dot in flight across the next iteration's waits. And the
// FlashAttention-3 overlap for any kernel of the same shape: in
//     for i: s = dot(q, k_i); ...elementwise on s...; acc = f(acc) + dot(p, v_i)
// the first dot of iteration i + 1 is issued just before the last dot of iteration i, and that
// last dot is retired only where its accumulator (a loop carry) is next read, after the next
// iteration's elementwise work. The tensor cores then run dot(p, v_i) while the warps compute on
// s_{i+1}. Two consumer warpgroups also take turns at issuing those two dots (emit_producer.cc),
// so that one's softmax runs under the other's dots (PALLADIUM_CUDA_PINGPONG=0: no turns).
// Prefetched tiles move to a distance of stages - 2 iterations so that no buffer is overwritten
// while an in-flight dot still reads it; served by a producer warpgroup, the slots come back on
// barriers instead (K's and V's apart, emit_producer.cc), and two stages do.
// PALLADIUM_CUDA_PIPELINE=0 turns this off.
#include <cstdlib>
#include <functional>

#include "backends/cuda/emitter.h"

namespace palladium::cuda {
namespace {

bool is_elementwise(ir::Op op) {
  const ir::Family f = ir::op_family(op);
  return f == ir::Family::Unary || f == ir::Family::Binary || f == ir::Family::Select || f == ir::Family::Cast;
}

}  // namespace

void Emitter::find_pipelined_loops() {
  const char* env = std::getenv("PALLADIUM_CUDA_PIPELINE");
  // Two stages pipeline an attention loop only where the producer serves it (drop_short_pipelines).
  if ((env && std::string(env) == "0") || wgmma_dots_.empty() || stages_ < 2) return;
  std::function<void(const ir::Region&)> visit = [&](const ir::Region& r) {
    for (const ir::Inst& loop : r.body) {
      for (const ir::Region& sub : loop.regions) visit(sub);
      if (loop.op != ir::Op::For || prefetched_loads(loop).empty()) continue;
      const ir::Region& body = loop.regions[0];
      std::vector<size_t> dots;  // positions of the body's top-level dots
      for (size_t i = 0; i < body.body.size(); ++i)
        if (body.body[i].op == ir::Op::Dot) dots.push_back(i);
      if (dots.empty()) continue;
      // The last dot accumulates in place (dot_addend) and its sum is yielded into carry j.
      const ir::Inst& last = body.body[dots.back()];
      const ir::ValueId acc = last.results[0];
      if (!wgmma_dots_.count(&last) || !dot_addend.count(acc)) continue;
      const ir::ValueId addend = dot_addend.at(acc);
      const ir::Inst& yield = body.body.back();
      int carry = -1;
      for (size_t j = 0; j < yield.operands.size(); ++j)
        if (alias_of.count(yield.operands[j]) && alias_of.at(yield.operands[j]) == acc) carry = static_cast<int>(j);
      if (carry < 0) continue;
      PipelinedLoop p;
      p.loop = &loop;
      p.last_dot = &last;
      p.carry_arg = body.args[static_cast<size_t>(carry) + 1];
      if (uses(p.carry_arg) != 1 || !layout_of(p.carry_arg).registers()) continue;
      if (dots.size() == 1) {
        // A K loop, acc = acc + dot(a_i, b_i): each dot stays in flight while the next
        // iteration's tiles are awaited; consecutive MMAs into one accumulator need no wait.
        if (addend != p.carry_arg || stages_ < 3) continue;
        pipelined_[&loop] = p;
        continue;
      }
      // The attention shape. The last dot's addend is e = f(carry), computed at the top level,
      // the carry's and e's only use (e then computes in place, in the carry's registers).
      const ir::Inst* e = def(addend);
      const bool top_level = e && e >= &body.body.front() && e <= &body.body.back();
      if (!top_level || !is_elementwise(e->op) || uses(addend) != 1 || !ir::reads(*e, {p.carry_arg}) ||
          layout_of(p.carry_arg).id != layout_of(addend).id)
        continue;
      // The first dot: a fresh accumulator read only before the last dot; both operands in
      // shared memory, each prefetched by this loop or loop invariant, at least one prefetched.
      const ir::Inst& first = body.body[dots.front()];
      bool ok = wgmma_dots_.count(&first) && !dot_addend.count(first.results[0]);
      for (size_t i = dots.back(); i < body.body.size() && ok; ++i) ok = !ir::reads(body.body[i], {first.results[0]});
      const auto [a, b, ta, tb] = dot_operands(first);
      int prefetched = 0;
      for (ir::ValueId v : {a, b}) {
        if (!smem_home.count(v) || !smem_home.at(v).swizzled) ok = false;
        else if (prefetch.count(v) && prefetch.at(v).loop == &loop) ++prefetched;
        else if (loop_depth_of(v) >= loop_depth_of(body.args[0])) ok = false;
      }
      if (!ok || prefetched == 0) continue;
      p.first_dot = &first;
      p.carry_reader = e;
      pipelined_[&loop] = p;
    }
  };
  visit(k_.body);
  for (const auto& [loop, p] : pipelined_) {
    pipelined_by_dot_[p.last_dot] = &p;
    if (!p.first_dot) continue;
    pipelined_by_dot_[p.first_dot] = &p;
    in_place_.insert(p.carry_reader->results[0]);
  }
}

// Before a pipelined loop (after its prefetch rounds): the first dot of iteration lo.
void Emitter::emit_pipeline_prologue(const PipelinedLoop& p) {
  if (!p.first_dot) return;
  const ir::Inst& loop = *p.loop;
  const std::string lo = name(loop.operands[0]) + "[0]", hi = name(loop.operands[1]) + "[0]";
  const bool split = tma_ring(loop) && tma_ring(loop)->split;
  declare(p.first_dot->results[0]);
  open("if (" + lo + " < " + hi + ")");
  emit_prefetch_wait(loop, lo, split ? 0 : -1);
  const bool turns = pipelined_turns(p);
  if (turns) line("pl_turn_wait(pl_warp() >> 2);");  // the first dot is a turn of its own
  emit_first_dot_issue(p, lo);
  line("pl_wgmma_commit();");
  if (turns) line("pl_turn_pass(pl_warp() >> 2);");
  line("pl_wgmma_wait<0>();");
  if (split) emit_slot_release(loop, 0, lo);  // K's slot: its one dot is retired
  if (split) emit_early_home_release(loop, lo + " + 1 == " + hi);  // a loop of one iteration: its only q k^T
  close();
}

// Zeroes the first dot's accumulator and issues it on the tiles of iteration `iteration` (no commit).
void Emitter::emit_first_dot_issue(const PipelinedLoop& p, const std::string& iteration) {
  const ir::Inst& d = *p.first_dot;
  for (const ir::Inst* load : prefetched_loads(*p.loop))
    home_override_[load->results[0]] = "(" + home_buffer(load->results[0], iteration) + ")";
  const ir::ValueId r = d.results[0];
  open_slots(layout_of(r));
  line(at(r) + " = 0.0f;");
  close();
  const auto [a, b, ta, tb] = dot_operands(d);
  emit_wgmma_issue(d, a, b, ta, tb);
  home_override_.clear();
}

// At the last dot of iteration i: make iteration i + 1's tiles visible, issue its first dot, then
// the last dot itself (by the caller), each its own commit group.
void Emitter::emit_pipeline_next_issue(const PipelinedLoop& p) {
  if (!p.first_dot) return;
  const ir::Region& body = p.loop->regions[0];
  const std::string i = name(body.args[0]) + "[0]", hi = name(p.loop->operands[1]) + "[0]";
  const bool split = tma_ring(*p.loop) && tma_ring(*p.loop)->split;
  emit_prefetch_wait(*p.loop, i + " + 1", split ? 0 : -1);
  // Ping-pong: this warpgroup's turn at the tensor cores, for both dots (the last one passes it on).
  if (pipelined_turns(p)) line("pl_turn_wait(pl_warp() >> 2);");
  open("if (" + i + " + 1 < " + hi + ")");
  emit_first_dot_issue(p, i + " + 1");
  close();
  line("pl_wgmma_commit();");
  if (split) emit_prefetch_wait(*p.loop, i, 1);  // this iteration's other tiles (V), for the last dot
}

}  // namespace palladium::cuda
