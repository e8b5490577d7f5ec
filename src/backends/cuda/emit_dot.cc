// dot: on the tensor cores (mma.sync m16n8k16 for float16/bfloat16, m16n8k8 TF32 for float32 when
// allowed) into the Mma accumulator layout, with float32 accumulation; otherwise a SIMT loop
// (full float32, float64 or wrapped int64 accumulation, as the interpreter's eval_dot.cc).
//
// Tensor-core operands come from shared-memory tiles holding the operand in its natural
// row-major form (a "home" planned in layout_plan.cc, or staged here); ldmatrix reads them with
// or without .trans to suit the orientation. An A operand already in Mma accumulator layout with
// the result's warp rows is used from registers (two adjacent n8 accumulator tiles are exactly one
// k16 A fragment), as FlashAttention-2 does for P @ V.
#include "backends/cuda/emitter.h"
#include "palladium/error.h"

namespace palladium::cuda {

// What packing `v` into 16-bit pairs reads: a cast from float32 registers in the same layout packs
// straight from its source, since the pack rounds to nearest even exactly as the cast does (the
// cast then is dead code where nothing else reads it). The attention backward stored its P and dS
// for the dv and dk dots so: the cast's rounding, its widening back and the pack had cost 4 of 22
// instructions a score in the first loop. H100, stop 36 job 4 (same binary, through a switch
// since removed): the d64 s2048 backward kernel 1.10G -> 0.97G instructions, 4.05M -> 3.43M
// cycles, tensor pipes 44% -> 52% busy; forward+backward 6-11% faster (d64 s2048 3.12 -> 2.79
// ms, s8192 12.08 -> 10.80; d128 s2048 2.61 -> 2.40, s8192 9.70 -> 9.16).
ir::ValueId Emitter::pack_source(ir::ValueId v) const {
  const ir::Inst* c = def(v);
  if (c && c->op == ir::Op::Cast && type(c->operands[0]).dtype == DType::float32 &&
      layout_of(c->operands[0]).id == layout_of(v).id && layout_of(v).registers() && !skip_registers.count(c->operands[0]))
    return c->operands[0];
  return v;
}

// Writes a register (or scratch) value into its shared-memory home, once, after its definition.
void Emitter::emit_home_store(ir::ValueId v) {
  const Layout& l = layout_of(v);
  const std::string conv = type(v).dtype == DType::bfloat16 ? "pl_f_to_bf16" : "pl_f_to_f16";
  // Dots of the previous iteration may still read the home, unless a barrier has run since (every
  // dot in flight is retired at the end of a loop body).
  if (loop_depth_of(v) > 0 && !barrier_in_body_) barrier();
  if (l.kind == LayoutKind::Mma) {
    // Slots 2i and 2i + 1 hold adjacent columns of one row (an even one): one 4-byte store each.
    // (stmatrix, eight slots an instruction, measured no faster in the attention backward and
    // took 5-9 more registers: H100, stop 36 job 9, `h100_stop36_job9_bwd_*`.)
    const std::string pack = pack_function(type(v).dtype);
    line("#pragma unroll");
    open("for (int s = 0; s < " + std::to_string(l.slots) + "; s += 2)");
    const ir::ValueId src = pack_source(v);
    line("*(unsigned*)&" + home_element(v, coord(l, 0), coord(l, 1)) + " = " + pack + "(" + at(src) + ", " + name(src) +
         "[s + 1]);");
    close();
  } else {
    open_slots(l);
    line("if (" + owner(l) + ") " + home_element(v, coord(l, 0), coord(l, 1)) + " = " + conv + "(" + at(v) + ");");
    close();
  }
  if (!wgmma_dots_.empty()) line("pl_fence_proxy_async();");
  barrier();
}

void Emitter::init_accumulator(const ir::Inst& dot) {
  const ir::ValueId r = dot.results[0];
  const ir::ValueId addend = dot_addend.count(r) ? dot_addend.at(r) : -1;
  if (addend >= 0 && uses(addend) == 1 && loop_depth_of(addend) == loop_depth_of(r) && layout_of(addend).registers()) {
    name_override_[r] = name(addend);
    return;
  }
  declare(r);
  open_slots(layout_of(r));
  line(at(r) + " = " + (addend >= 0 ? at(addend) : std::string("0.0f")) + ";");
  close();
}

ir::ValueId Emitter::unfolded(ir::ValueId v) const {
  auto it = folded_transpose.find(v);
  return it == folded_transpose.end() ? v : it->second;
}

// A folded transpose flips its operand's orientation flag.
Emitter::DotOperands Emitter::dot_operands(const ir::Inst& dot) const {
  const ir::ValueId a = unfolded(dot.operands[0]), b = unfolded(dot.operands[1]);
  return {a, b, (dot.i0 != 0) != (a != dot.operands[0]), (dot.i1 != 0) != (b != dot.operands[1])};
}

void Emitter::emit_dot(const ir::Inst& in) {
  const ir::ValueId r = in.results[0];
  const Layout& rl = layout_of(r);
  // Plain variables, not structured bindings: the lambdas below capture them (clang 14 cannot).
  const DotOperands operands = dot_operands(in);
  const ir::ValueId a = operands.a, b = operands.b;
  const bool ta = operands.ta, tb = operands.tb;
  const DType t = type(a).dtype;
  const Shape& as = type(a).shape;
  const Shape& bs = type(b).shape;
  const int64_t K = ta ? as[0] : as[1];
  const bool tf32 = t == DType::float32 && params_.allow_tf32;
  const bool tensor = rl.kind == LayoutKind::Mma && ((is_16bit_float(t) && K % 16 == 0) || (tf32 && K % 8 == 0));
  if (auto p = pipelined_by_dot_.find(&in); p != pipelined_by_dot_.end()) {
    if (p->second->first_dot == &in) return;  // issued at the end of the previous iteration
    emit_pipeline_next_issue(*p->second);
    emit_wgmma(in, a, b, ta, tb, /*retire_later=*/true);
    return;
  }
  if (wgmma_dots_.count(&in)) {
    emit_wgmma(in, a, b, ta, tb);
    return;
  }
  PL_ASSERT(!(smem_home.count(a) && smem_home.at(a).swizzled) && !(smem_home.count(b) && smem_home.at(b).swizzled),
            "a swizzled (wgmma) operand tile reached the mma.sync path");

  // Shared-memory tiles for the tensor-core path: homes, or staging in the exchange area.
  const int esize = tf32 ? 4 : 2, pad = tf32 ? 4 : 8;
  auto tile_bytes = [&](ir::ValueId v) { return type(v).shape[0] * (type(v).shape[1] + pad) * esize; };
  const Layout& al = layout_of(a);
  const bool a_in_registers = tensor && !tf32 && !ta && al.kind == LayoutKind::Mma && al.warps_n == 1 &&
                              rl.warps_n == 1 && al.warps_m == rl.warps_m && as[0] == rl.shape[0] &&
                              !smem_home.count(a);
  const bool a_home = !tf32 && smem_home.count(a) && !smem_home.at(a).swizzled;
  const bool b_home = !tf32 && smem_home.count(b) && !smem_home.at(b).swizzled;
  const int64_t a_stage = (a_in_registers || a_home) ? 0 : (tile_bytes(a) + 127) / 128 * 128;
  const int64_t b_stage = b_home ? 0 : tile_bytes(b);
  const bool fits = smem_homes_bytes_ + a_stage + b_stage <= target_.max_shared_bytes - kSharedReserve;

  if (!tensor || !fits) {
    // SIMT: stage both operands as register-typed buffers; each result slot loops over k.
    auto operand = [&](ir::ValueId v, int64_t offset) -> std::string {
      if (skip_registers.count(v)) return home_expr(v);
      return stage_value(v, offset);
    };
    if (!layout_of(a).registers() || !layout_of(b).registers()) barrier();
    const std::string abuf = operand(a, 0);
    const std::string bbuf = operand(b, staged_bytes(a));
    barrier();
    auto read = [&](const std::string& buf, ir::ValueId v, const std::string& row, const std::string& col) {
      if (skip_registers.count(v))
        return std::string(type(v).dtype == DType::bfloat16 ? "pl_bf16_to_f(" : "pl_f16_to_f(") + home_element(v, row, col) + ")";
      return buf + "[" + row + " * " + std::to_string(type(v).shape[1]) + " + " + col + "]";
    };
    const std::string acc = is_float(t) ? (t == DType::float64 ? "double" : "float") : "pl_i64";
    const std::string addend = dot_addend.count(r) ? at(dot_addend.at(r)) + " + " : "";
    const std::string v = valid(rl);
    declare(r);
    if (rl.registers()) {
      // k outermost (a runtime loop), the thread's slots innermost: accumulators stay in
      // registers and the code stays small.
      open("");
      line(acc + " pl_acc[" + std::to_string(rl.slots) + "];");
      line("#pragma unroll");
      line("for (int s = 0; s < " + std::to_string(rl.slots) + "; ++s) pl_acc[s] = 0;");
      line("#pragma unroll 1");
      open("for (int k = 0; k < " + std::to_string(K) + "; ++k)");
      open_slots(rl);
      if (!v.empty()) line("if (!(" + v + ")) continue;");
      line("const int m = " + coord(rl, 0) + ", n = " + coord(rl, 1) + ";");
      line("pl_acc[s] += (" + acc + ")" + read(abuf, a, ta ? "k" : "m", ta ? "m" : "k") + " * (" + acc + ")" +
           read(bbuf, b, tb ? "n" : "k", tb ? "k" : "n") + ";");
      close();
      close();
      open_slots(rl);
      line(at(r) + " = " + addend + "(" + reg_type(type(r).dtype) + ")pl_acc[s];");
      close();
      close();
    } else {
      open_slots(rl);
      line("const int m = " + coord(rl, 0) + ", n = " + coord(rl, 1) + ";");
      line(acc + " acc = 0;");
      line("#pragma unroll 4");
      line("for (int k = 0; k < " + std::to_string(K) + "; ++k) acc += (" + acc + ")" +
           read(abuf, a, ta ? "k" : "m", ta ? "m" : "k") + " * (" + acc + ")" + read(bbuf, b, tb ? "n" : "k", tb ? "k" : "n") + ";");
      line(at(r) + " = " + addend + "(" + reg_type(type(r).dtype) + ")acc;");
      close();
    }
    barrier();
    return;
  }

  // Tensor cores. Stage operands without a home into the exchange area, in natural orientation.
  auto stage_tile = [&](ir::ValueId v, int64_t offset) {
    const Layout& l = layout_of(v);
    const int64_t stride = type(v).shape[1] + pad;
    const std::string buf = stage_space(tile_bytes(v), tf32 ? "float" : "pl_u16", offset);
    const std::string conv = tf32 ? "" : (t == DType::bfloat16 ? "pl_f_to_bf16" : "pl_f_to_f16");
    open_slots(l);
    line("if (" + owner(l) + ") " + buf + "[" + coord(l, 0) + " * " + std::to_string(stride) + " + " + coord(l, 1) +
         "] = " + conv + "(" + at(v) + ");");
    close();
    return buf;
  };
  const bool any_memory = (!a_in_registers && !a_home && !al.registers()) || (!b_home && !layout_of(b).registers());
  if (any_memory) barrier();
  const std::string atile = a_in_registers ? "" : a_home ? home_expr(a) : stage_tile(a, 0);
  const std::string btile = b_home ? home_expr(b) : stage_tile(b, a_stage);
  if (a_stage + b_stage > 0) barrier();
  const int64_t a_ld = as[1] + pad, b_ld = bs[1] + pad;

  init_accumulator(in);
  const int TM = rl.tiles_m, TN = rl.tiles_n;
  const int64_t wr = rl.shape[0] / rl.warps_m, wc = rl.shape[1] / rl.warps_n;
  const int ksteps = static_cast<int>(K / (tf32 ? 8 : 16));
  open("");
  line("const int pl_m0 = (pl_warp() / " + std::to_string(rl.warps_n) + ") * " + std::to_string(wr) +
       ", pl_n0 = (pl_warp() % " + std::to_string(rl.warps_n) + ") * " + std::to_string(wc) + ";");
  line("const int g = pl_lane() >> 2, t = pl_lane() & 3, q = pl_lane() >> 3, l8 = pl_lane() & 7;");
  line("(void)g; (void)t; (void)q; (void)l8;");
  const std::string mma = tf32 ? "pl_mma_tf32_1688" : t == DType::bfloat16 ? "pl_mma_bf16_16816" : "pl_mma_f16_16816";
  // Fragment loads of k-step `kk` (C++ text) into the arrays named fa, fb.
  auto load_fragments = [&](const std::string& kk, const std::string& fa, const std::string& fb) {
    if (tf32) {
      // Scalar fragment loads: A(m, k) and B(k, n) from the f32 tiles.
      auto A = [&](const std::string& m, const std::string& kx) {
        return atile + "[" + (ta ? kx + " * " + std::to_string(a_ld) + " + " + m : m + " * " + std::to_string(a_ld) + " + " + kx) + "]";
      };
      auto B = [&](const std::string& kx, const std::string& n) {
        return btile + "[" + (tb ? n + " * " + std::to_string(b_ld) + " + " + kx : kx + " * " + std::to_string(b_ld) + " + " + n) + "]";
      };
      line("#pragma unroll");
      open("for (int tm = 0; tm < " + std::to_string(TM) + "; ++tm)");
      line("const int m = pl_m0 + tm * 16 + g, k = " + kk + " * 8 + t;");
      line(fa + "[tm][0] = pl_to_tf32(" + A("m", "k") + "); " + fa + "[tm][1] = pl_to_tf32(" + A("(m + 8)", "k") + ");");
      line(fa + "[tm][2] = pl_to_tf32(" + A("m", "(k + 4)") + "); " + fa + "[tm][3] = pl_to_tf32(" + A("(m + 8)", "(k + 4)") + ");");
      close();
      line("#pragma unroll");
      open("for (int tn = 0; tn < " + std::to_string(TN) + "; ++tn)");
      line("const int n = pl_n0 + tn * 8 + g, k = " + kk + " * 8 + t;");
      line(fb + "[tn][0] = pl_to_tf32(" + B("k", "n") + "); " + fb + "[tn][1] = pl_to_tf32(" + B("(k + 4)", "n") + ");");
      close();
      return;
    }
    if (a_in_registers) {
      const std::string x = name(a), tna = std::to_string(al.tiles_n);
      const std::string pack = pack_function(t);
      line("#pragma unroll");
      open("for (int tm = 0; tm < " + std::to_string(TM) + "; ++tm)");
      line("const int s0 = (tm * " + tna + " + 2 * " + kk + ") * 4, s1 = s0 + 4;");
      line(fa + "[tm][0] = " + pack + "(" + x + "[s0], " + x + "[s0 + 1]); " + fa + "[tm][1] = " + pack + "(" + x +
           "[s0 + 2], " + x + "[s0 + 3]);");
      line(fa + "[tm][2] = " + pack + "(" + x + "[s1], " + x + "[s1 + 1]); " + fa + "[tm][3] = " + pack + "(" + x +
           "[s1 + 2], " + x + "[s1 + 3]);");
      close();
    } else {
      line("#pragma unroll");
      open("for (int tm = 0; tm < " + std::to_string(TM) + "; ++tm)");
      if (!ta)  // A rows are m: x4 over (m 0-7 | 8-15) x (k 0-7 | 8-15)
        line("pl_ldmatrix_x4(" + fa + "[tm], " + atile + " + (pl_m0 + tm * 16 + (q & 1) * 8 + l8) * " +
             std::to_string(a_ld) + " + " + kk + " * 16 + (q >> 1) * 8);");
      else  // A stored [k][m]: transposed 8x8 loads
        line("pl_ldmatrix_x4_trans(" + fa + "[tm], " + atile + " + (" + kk + " * 16 + (q >> 1) * 8 + l8) * " +
             std::to_string(a_ld) + " + pl_m0 + tm * 16 + (q & 1) * 8);");
      close();
    }
    line("#pragma unroll");
    open("for (int tn = 0; tn + 1 < " + std::to_string(TN) + "; tn += 2)");
    line("unsigned x[4];");
    if (tb)  // B stored [n][k]
      line("pl_ldmatrix_x4(x, " + btile + " + (pl_n0 + tn * 8 + (q >> 1) * 8 + l8) * " + std::to_string(b_ld) + " + " +
           kk + " * 16 + (q & 1) * 8);");
    else  // B stored [k][n]
      line("pl_ldmatrix_x4_trans(x, " + btile + " + (" + kk + " * 16 + (q & 1) * 8 + l8) * " + std::to_string(b_ld) +
           " + pl_n0 + tn * 8 + (q >> 1) * 8);");
    line(fb + "[tn][0] = x[0]; " + fb + "[tn][1] = x[1]; " + fb + "[tn + 1][0] = x[2]; " + fb + "[tn + 1][1] = x[3];");
    close();
    if (TN % 2) {
      const std::string tn = std::to_string(TN - 1);
      if (tb)
        line("pl_ldmatrix_x2(" + fb + "[" + tn + "], " + btile + " + (pl_n0 + " + tn + " * 8 + l8) * " +
             std::to_string(b_ld) + " + " + kk + " * 16 + (q & 1) * 8);");
      else
        line("pl_ldmatrix_x2_trans(" + fb + "[" + tn + "], " + btile + " + (" + kk + " * 16 + (q & 1) * 8 + l8) * " +
             std::to_string(b_ld) + " + pl_n0 + " + tn + " * 8);");
    }
  };
  auto mmas = [&](const std::string& fa, const std::string& fb) {
    line("#pragma unroll");
    open("for (int tm = 0; tm < " + std::to_string(TM) + "; ++tm)");
    line("#pragma unroll");
    line("for (int tn = 0; tn < " + std::to_string(TN) + "; ++tn) " + mma + "(&" + name(r) + "[(tm * " +
         std::to_string(TN) + " + tn) * 4], " + fa + "[tm], " + fb + "[tn]);");
    close();
  };
  const bool double_buffered = ksteps <= 32 && TM * 4 + TN * 2 <= 48;
  max_fragment_regs_ = std::max<int64_t>(max_fragment_regs_, (TM * 4 + TN * 2) * (double_buffered ? 2 : 1));
  if (double_buffered) {
    // Fragments double-buffered across k-steps: step kk + 1's loads are issued before step kk's
    // mmas, so their latency overlaps the tensor-core work.
    line("unsigned fa[2][" + std::to_string(TM) + "][4], fb[2][" + std::to_string(TN) + "][2];");
    load_fragments("0", "fa[0]", "fb[0]");
    line("#pragma unroll");
    open("for (int kk = 0; kk < " + std::to_string(ksteps) + "; ++kk)");
    open("if (kk + 1 < " + std::to_string(ksteps) + ")");
    load_fragments("(kk + 1)", "fa[(kk + 1) & 1]", "fb[(kk + 1) & 1]");
    close();
    mmas("fa[kk & 1]", "fb[kk & 1]");
    close();
  } else {
    line(a_in_registers || ksteps <= 16 ? "#pragma unroll" : "#pragma unroll 4");
    open("for (int kk = 0; kk < " + std::to_string(ksteps) + "; ++kk)");
    line("unsigned fa[" + std::to_string(TM) + "][4], fb[" + std::to_string(TN) + "][2];");
    load_fragments("kk", "fa", "fb");
    mmas("fa", "fb");
    close();
  }
  close();
  // The staged tiles are free again once every warp is done (homes are guarded where refilled).
  if (a_stage + b_stage > 0) barrier();
}

}  // namespace palladium::cuda
