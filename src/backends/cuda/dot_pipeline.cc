// Software pipelining of a loop's wgmma dots (sm_90a). A loop with one dot accumulating into its
// carry (a matmul's K loop) keeps each dot in flight across the next iteration's waits. And the
// FlashAttention-3 overlap for any kernel of the same shape: in
//     for i: s = dot(q, k_i); ...elementwise on s...; acc = f(acc) + dot(p, v_i)
// the first dot of iteration i + 1 is issued just before the last dot of iteration i, and that
// last dot is retired only where its accumulator (a loop carry) is next read, after the next
// iteration's elementwise work. The tensor cores then run dot(p, v_i) while the warps compute on
// s_{i+1}. Prefetched tiles move to a distance of stages - 2 iterations so that no buffer is
// overwritten while an in-flight dot still reads it. PALLADIUM_CUDA_PIPELINE=0 turns this off.
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
  if ((env && std::string(env) == "0") || wgmma_dots_.empty() || stages_ < 3) return;
  std::function<void(const ir::Region&)> visit = [&](const ir::Region& r) {
    for (const ir::Inst& loop : r.body) {
      for (const ir::Region& sub : loop.regions) visit(sub);
      if (loop.op != ir::Op::For || prefetched_loads(loop).empty()) continue;
      const ir::Region& body = loop.regions[0];
      const ir::Inst& yield = body.body.back();
      std::map<const ir::Inst*, size_t> position;  // top-level instructions of the body
      for (size_t i = 0; i < body.body.size(); ++i) position[&body.body[i]] = i;
      // Every instruction of the body, nested ones under their top-level ancestor's position.
      std::vector<std::pair<const ir::Inst*, size_t>> all;
      std::function<void(const ir::Region&, size_t)> collect = [&](const ir::Region& reg, size_t top) {
        for (const ir::Inst& in : reg.body) {
          all.push_back({&in, top});
          for (const ir::Region& sub : in.regions) collect(sub, top);
        }
      };
      for (size_t i = 0; i < body.body.size(); ++i) {
        all.push_back({&body.body[i], i});
        for (const ir::Region& sub : body.body[i].regions) collect(sub, i);
      }
      auto uses_of = [&](ir::ValueId v) {
        std::vector<std::pair<const ir::Inst*, size_t>> out;
        for (const auto& [in, top] : all)
          for (ir::ValueId o : in->operands)
            if (o == v) out.push_back({in, top});
        return out;
      };
      auto through = [&](ir::ValueId v) {
        auto it = folded_transpose.find(v);
        return it == folded_transpose.end() ? v : it->second;
      };
      std::vector<const ir::Inst*> dots;
      for (const ir::Inst& in : body.body)
        if (in.op == ir::Op::Dot) dots.push_back(&in);
      if (dots.size() == 1 && wgmma_dots_.count(dots[0])) {
        // A K loop: acc = acc + dot(a_i, b_i), the accumulator being the carry itself. Each dot
        // stays in flight while the next iteration's tiles are awaited; consecutive MMAs into one
        // accumulator need no wait between them.
        const ir::Inst& d = *dots[0];
        const ir::ValueId acc = d.results[0];
        if (!dot_addend.count(acc)) continue;
        const ir::ValueId carry_arg = dot_addend.at(acc);
        ir::ValueId sum = -1;
        for (const auto& [v, target] : alias_of)
          if (target == acc) sum = v;
        int carry = -1;
        for (size_t j = 0; j < yield.operands.size(); ++j)
          if (yield.operands[j] == sum && body.args[j + 1] == carry_arg) carry = static_cast<int>(j);
        if (sum < 0 || carry < 0 || uses(carry_arg) != 1 || !layout_of(carry_arg).registers()) continue;
        PipelinedLoop p;
        p.loop = &loop;
        p.last_dot = &d;
        p.carry_arg = carry_arg;
        pipelined_[&loop] = p;
        continue;
      }
      if (dots.size() < 2) continue;
      const ir::Inst& first = *dots.front();
      const ir::Inst& last = *dots.back();
      if (!wgmma_dots_.count(&first) || !wgmma_dots_.count(&last)) continue;
      // The first dot: both operands in shared memory, each prefetched by this loop or loop
      // invariant, at least one prefetched; a fresh accumulator read only before the last dot.
      bool ok = !dot_addend.count(first.results[0]);
      int prefetched = 0;
      for (int o = 0; o < 2 && ok; ++o) {
        const ir::ValueId v = through(first.operands[static_cast<size_t>(o)]);
        if (!smem_home.count(v) || !smem_home.at(v).swizzled) ok = false;
        else if (prefetch.count(v) && prefetch.at(v).loop == &loop) ++prefetched;
        else if (loop_depth_of(v) >= loop_depth_of(body.args[0])) ok = false;
      }
      if (!ok || prefetched == 0) continue;
      for (const auto& [user, top] : uses_of(first.results[0]))
        if (top >= position[&last]) ok = false;
      if (!ok) continue;
      // The last dot accumulates in place into e = f(carry), e's only use, the carry's only use
      // being e, and the sum is yielded back into the same carry.
      const ir::ValueId acc = last.results[0];
      if (!dot_addend.count(acc)) continue;
      const ir::ValueId e = dot_addend.at(acc);
      const ir::Inst* e_def = def(e);
      if (!e_def || !position.count(e_def) || !is_elementwise(e_def->op) || uses(e) != 1) continue;
      ir::ValueId sum = -1;
      for (const auto& [v, target] : alias_of)
        if (target == acc) sum = v;
      int carry = -1;
      for (size_t j = 0; j < yield.operands.size(); ++j)
        if (yield.operands[j] == sum) carry = static_cast<int>(j);
      if (sum < 0 || carry < 0) continue;
      const ir::ValueId carry_arg = body.args[static_cast<size_t>(carry) + 1];
      bool reads_carry = false;
      for (ir::ValueId o : e_def->operands) reads_carry = reads_carry || o == carry_arg;
      if (!reads_carry || uses(carry_arg) != 1 || layout_of(carry_arg).id != layout_of(e).id ||
          !layout_of(e).registers())
        continue;
      PipelinedLoop p;
      p.loop = &loop;
      p.first_dot = &first;
      p.last_dot = &last;
      p.carry_reader = e_def;
      p.carry_arg = carry_arg;
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

// Before a pipelined loop (after its S - 2 prefetch groups): the first dot of iteration lo.
void Emitter::emit_pipeline_prologue(const PipelinedLoop& p) {
  if (!p.first_dot) return;
  const ir::Inst& loop = *p.loop;
  const std::string lo = name(loop.operands[0]) + "[0]", hi = name(loop.operands[1]) + "[0]";
  declare(p.first_dot->results[0]);
  open("if (" + lo + " < " + hi + ")");
  line("pl_cp_async_wait<" + std::to_string(stages_ - 3) + ">();");
  line("pl_fence_proxy_async();");
  barrier();
  emit_first_dot_issue(p, lo);
  line("pl_wgmma_commit();");
  line("pl_wgmma_wait<0>();");
  close();
}

// Zeroes the first dot's accumulator and issues it on the tiles of iteration `iteration` (no commit).
void Emitter::emit_first_dot_issue(const PipelinedLoop& p, const std::string& iteration) {
  const ir::Inst& d = *p.first_dot;
  const std::string lo = name(p.loop->operands[0]) + "[0]";
  for (ir::ValueId v : prefetched_loads_values(*p.loop))
    home_override_[v] = "(" + home_buffer(v, iteration, lo) + ")";
  const ir::ValueId r = d.results[0];
  open_slots(layout_of(r));
  line(at(r) + " = 0.0f;");
  close();
  ir::ValueId a = d.operands[0], b = d.operands[1];
  bool ta = d.i0 != 0, tb = d.i1 != 0;
  if (auto it = folded_transpose.find(a); it != folded_transpose.end()) { a = it->second; ta = !ta; }
  if (auto it = folded_transpose.find(b); it != folded_transpose.end()) { b = it->second; tb = !tb; }
  emit_wgmma_issue(d, a, b, ta, tb);
  home_override_.clear();
}

// At the last dot of iteration i: make iteration i + 1's tiles visible, issue its first dot, then
// the last dot itself (by the caller), each its own commit group.
void Emitter::emit_pipeline_next_issue(const PipelinedLoop& p) {
  if (!p.first_dot) return;
  const ir::Region& body = p.loop->regions[0];
  const std::string i = name(body.args[0]) + "[0]", hi = name(p.loop->operands[1]) + "[0]";
  line("pl_cp_async_wait<" + std::to_string(stages_ - 3) + ">();");
  line("pl_fence_proxy_async();");
  barrier();
  open("if (" + i + " + 1 < " + hi + ")");
  emit_first_dot_issue(p, i + " + 1");
  close();
  line("pl_wgmma_commit();");
}

std::vector<ir::ValueId> Emitter::prefetched_loads_values(const ir::Inst& loop) const {
  std::vector<ir::ValueId> out;
  for (const ir::Inst* l : prefetched_loads(loop)) out.push_back(l->results[0]);
  return out;
}

}  // namespace palladium::cuda
