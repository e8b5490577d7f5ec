// Lazily scaled selects. The causal attention's scores are s = where(mask, qk * c, M), read by
// the row max and by exp(s - m) alone. In blocks where the mask holds throughout (every block
// below the diagonal: uniform_select.cc) s is qk * c, and the fold that serves the unmasked
// softmax (emit_elementwise.cc) applies: the row max reads qk and multiplies once per row, the
// exp is exp(fma(qk, c, -m)). So such a select keeps qk in qk's own registers and a block-uniform
// flag: where the flag holds, the registers hold s / c; elsewhere (the mixed blocks) they are
// scaled and masked in place and hold s. The readers pick c or 1 by the flag: the row max scales
// its result, the exp computes exp(fma(v, flag ? c : 1, -m)), which in the mixed blocks is
// exp(s - m) rounded as the interpreter rounds it (the mask value M subtracted exactly, so a
// wholly masked row still gets exp(0) = 1). Each score's multiply goes from the blocks below the
// diagonal. Needs fast_math (the fold's contraction) and PALLADIUM_CUDA_FOLD_SCALE left on;
// PALLADIUM_CUDA_LAZY_SCALE=0 turns it off.
// H100, stop 39 job 4, same binary, two rounds each, ms, on / off: causal forward d64 blocks
// 128 x 128 s2048 0.431/0.424 against 0.454/0.455, s8192 1.392/1.369 against 1.526/1.504; d128
// blocks 128 x 64 s2048 0.346/0.349 against 0.358/0.356, s8192 1.143/1.145 against 1.191/1.190;
// d64 128 x 64 within noise. Job 3: forward+backward causal d64 s2048 1.486 against 1.557, s8192
// 5.128 against 5.253.
#include <cstdlib>
#include <functional>

#include "backends/cuda/emitter.h"

namespace palladium::cuda {

void Emitter::find_lazy_scales() {
  const char* env = std::getenv("PALLADIUM_CUDA_LAZY_SCALE");
  if (env && std::string(env) == "0") return;
  const char* exp2_env = std::getenv("PALLADIUM_CUDA_LAZY_EXP2");
  const bool exp2_rows = !(exp2_env && std::string(exp2_env) == "0");
  // The accumulator registers a thread of the innermost loop holding `s`, else of the kernel
  // (emit_scaled_exp takes the exp2 form up to 128 of them).
  std::function<const ir::Inst*(const ir::Region&, const ir::Inst*, const ir::Inst*)> loop_of =
      [&](const ir::Region& region, const ir::Inst* loop, const ir::Inst* s) -> const ir::Inst* {
    for (const ir::Inst& in : region.body) {
      if (&in == s) return loop;
      const ir::Inst* inner = in.op == ir::Op::For || in.op == ir::Op::While ? &in : loop;
      for (const ir::Region& sub : in.regions)
        if (const ir::Inst* found = loop_of(sub, inner, s)) return found;
    }
    return nullptr;
  };
  auto loop_accumulators = [&](const ir::Inst* s) {
    const ir::Inst* loop = loop_of(k_.body, nullptr, s);
    if (!loop) return accumulator_slots(k_.body);
    int64_t slots = 0;
    for (const ir::Region& region : loop->regions) slots += accumulator_slots(region);
    return slots;
  };
  // Not in an unpipelined loop whose warpgroups take turns at the dots (the causal forward at
  // head_dim 128, blocks 128 x 128): there it ran 10-14% slower (H100, stop 39 job 3), where the
  // pipelined loops ran 3-10% faster; and again 8-13% slower on an H200 (stop 47 job 42, s2048
  // 0.298 -> 0.322 ms, s8192 0.988 -> 1.12), though it drops each score's multiply and folds the
  // exp's subtract into an FFMA (docs/performance.md, stop 47).
  auto turns_unpipelined = [&](const ir::Inst* s) {
    for (const ir::Inst* loop : pingpong_loops_) {
      if (pipelined_loop(*loop)) continue;
      for (const ir::Inst& in : loop->regions[0].body)
        if (&in == s) return true;
    }
    return false;
  };
  for (const ir::Inst* s : uniform_selects_) {
    if (turns_unpipelined(s)) continue;
    const ir::ValueId r = s->results[0], scaled = s->operands[1];
    ir::ValueId x = scaled;
    const std::optional<double> c = constant_factor(scaled, &x);
    if (!c || *c <= 0) continue;
    const Layout& l = layout_of(r);
    // The select overwrites x's registers (emit_uniform_select): x and x * c have no other reader
    // (not the predicate nor the other branch either), and x is a plain register value of r's
    // layout (not a loop carry, an alias or a shared-memory home).
    const ir::Inst* xd = def(x);
    if (!l.registers() || uses(scaled) != 1 || uses(x) != 1 || layout_of(x).id != l.id || !xd ||
        xd->regions.size() != 0 || alias_of.count(x) || alias_of.count(scaled) || alias_of.count(r) ||
        skip_registers.count(x) || smem_home.count(x) || smem_home.count(r))
      continue;
    bool readers_fold = uses(r) > 0;
    for (const ir::Inst* u : users(r)) {
      if (u->op == ir::Op::ReduceMax || u->op == ir::Op::ReduceMin) {
        readers_fold = readers_fold && mma_row_reduce(*u);
        continue;
      }
      // r - b, read only by exps of the fold's form.
      bool exp_reader = u->op == ir::Op::Sub && u->operands[0] == r && u->operands[1] != r && uses(u->results[0]) > 0;
      for (const ir::Inst* e : exp_reader ? users(u->results[0]) : std::vector<const ir::Inst*>{})
        exp_reader = exp_reader && exp_of_difference(*e).has_value();
      readers_fold = readers_fold && exp_reader;
    }
    if (!readers_fold) continue;
    lazy_scaled_[r] = LazyScale{x, *c, "pl_unscaled" + std::to_string(r), exp2_rows && loop_accumulators(s) <= 128};
    lazy_muls_.insert(def(scaled));
  }
}

}  // namespace palladium::cuda
