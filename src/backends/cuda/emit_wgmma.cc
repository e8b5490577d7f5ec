// dot on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): the default for 16-bit dots there; PALLADIUM_CUDA_WGMMA=0 turns it off.
// A dot qualifies when its result is an Mma layout with one warp per 16 rows (each warpgroup of
// four warps then owns 64 rows, exactly the m64nNk16 accumulator layout), N <= 256, and its
// operands are 16-bit tiles in swizzled
// shared-memory homes (or, for A, already in accumulator layout in registers, as P in P @ V).
// Operand majorness comes from the orientation: a tile whose contiguous dimension is K is read
// K-major, one whose contiguous dimension is M or N is read MN-major (imm-trans = 1).
#include <cstdlib>
#include <functional>

#include "backends/cuda/emitter.h"
#include "palladium/error.h"

namespace palladium::cuda {
namespace {

// pl_wgmma_n<N>_<ss|rs>_<A major><B major>_<type>: majors 'k' (K-major, imm-trans 0) or 'm'
// (M- or N-major, imm-trans 1). A = op(a) is K-major unless transposed; B = op(b) is N-major
// unless transposed (then its tile is [N][K], K-major).
std::string variant_name(int64_t n, bool a_regs, bool ta, bool tb, DType t) {
  return "pl_wgmma_n" + std::to_string(n) + (a_regs ? "_rs_" : "_ss_") + (ta ? "m" : "k") + (tb ? "k" : "m") +
         (t == DType::bfloat16 ? "_bf16" : "_f16");
}

}  // namespace

bool Emitter::wgmma_candidate(const ir::Inst& d) const {
  if (target_.sm != 90 || !target_.arch_specific) return false;
  // On by default on sm_90a; PALLADIUM_CUDA_WGMMA=0 falls back to mma.sync everywhere.
  const char* env = std::getenv("PALLADIUM_CUDA_WGMMA");
  if (env && std::string(env) == "0") return false;
  const DType t = type(d.operands[0]).dtype;
  if (!is_16bit_float(t)) return false;
  const Shape& rs = type(d.results[0]).shape;
  const Shape& as = type(d.operands[0]).shape;
  const int64_t k = d.i0 ? as[0] : as[1];
  const int warps = threads_ / 32;
  // At 16 warps the accumulators do not fit the per-thread register budget (ptxas C7602).
  return warps % 4 == 0 && warps <= 8 && rs[0] == 16 * warps && rs[1] % 8 == 0 && rs[1] <= 256 && k % 16 == 0;
}

// The wgmma dots and their swizzled homes, to a fixed point: a home is swizzled when every dot
// using it runs on wgmma; a dot runs on wgmma when B has a swizzled home and A has one or is in
// accumulator registers.
void Emitter::choose_wgmma(std::vector<std::pair<ir::ValueId, bool>>& homes) {
  std::vector<const ir::Inst*> dots;
  std::function<void(const ir::Region&)> collect = [&](const ir::Region& r) {
    for (const ir::Inst& in : r.body) {
      if (in.op == ir::Op::Dot && layout_of(in.results[0]).kind == LayoutKind::Mma && wgmma_candidate(in))
        dots.push_back(&in);
      for (const ir::Region& sub : in.regions) collect(sub);
    }
  };
  collect(k_.body);
  std::map<ir::ValueId, std::vector<const ir::Inst*>> users;
  std::function<void(const ir::Region&)> use_walk = [&](const ir::Region& r) {
    for (const ir::Inst& in : r.body) {
      if (in.op == ir::Op::Dot)
        for (int o = 0; o < 2; ++o) users[unfolded(in.operands[static_cast<size_t>(o)])].push_back(&in);
      for (const ir::Region& sub : in.regions) use_walk(sub);
    }
  };
  use_walk(k_.body);
  std::set<ir::ValueId> has_home;
  for (const auto& h : homes) has_home.insert(h.first);
  std::set<const ir::Inst*> chosen(dots.begin(), dots.end());
  std::set<ir::ValueId> swizzled;
  for (bool changed = true; changed;) {
    changed = false;
    swizzled.clear();
    for (const auto& [v, plain_load] : homes) {
      const Shape& s = type(v).shape;
      bool all = s[0] % 8 == 0 && s[1] % 64 == 0;
      for (const ir::Inst* u : users[v]) all = all && chosen.count(u);
      if (all) swizzled.insert(v);
    }
    for (auto it = chosen.begin(); it != chosen.end();) {
      const ir::Inst& d = **it;
      const auto [a, b, ta, tb] = dot_operands(d);
      const Layout& al = layout_of(a);
      const Layout& rl = layout_of(d.results[0]);
      // A from registers: an accumulator-layout value without a home (emit_wgmma's rule).
      const bool a_regs = !ta && !has_home.count(a) && al.kind == LayoutKind::Mma && al.warps_n == 1 &&
                          al.warps_m == rl.warps_m && al.tiles_m == 1 && type(a).shape[0] == rl.shape[0];
      const bool ok = swizzled.count(b) && (swizzled.count(a) || a_regs);
      if (!ok) {
        it = chosen.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
  }
  wgmma_dots_ = chosen;
  swizzled_homes_ = swizzled;
}

std::string Emitter::home_element(ir::ValueId v, const std::string& r, const std::string& c) const {
  const SmemTile& tile = smem_home.at(v);
  if (tile.swizzled)
    return "(*(pl_u16*)((char*)(" + home_expr(v) + ") + pl_swz_offset(" + r + ", " + c + ", " + std::to_string(tile.rows) + ")))";
  return home_expr(v) + "[(" + r + ") * " + std::to_string(tile.row_stride()) + " + " + c + "]";
}

void Emitter::emit_wgmma(const ir::Inst& in, ir::ValueId a, ir::ValueId b, bool ta, bool tb, bool retire_later) {
  init_accumulator(in);
  emit_wgmma_issue(in, a, b, ta, tb);
  line("pl_wgmma_commit();");
  // A pipelined K loop's TMA round, once the iteration's dot is on the tensor cores: the buffer it
  // fills was freed at the barrier after this iteration's wait.
  if (auto p = pipelined_by_dot_.find(&in); p != pipelined_by_dot_.end() && p->second->last_dot == &in &&
                                            round_issue(*p->second->loop) == RoundIssue::AfterLastDot) {
    const ir::Inst& loop = *p->second->loop;
    emit_prefetch_round(loop, "pl_nx", name(loop.regions[0].args[0]) + "[0] + " + std::to_string(prefetch_distance(loop)));
  }
  // Retired where its result is first needed (emit_region), unless PALLADIUM_CUDA_DEFER_WAIT=0.
  const char* env = std::getenv("PALLADIUM_CUDA_DEFER_WAIT");
  const bool defer = !(env && std::string(env) == "0");
  if (!retire_later && defer) {
    std::set<ir::ValueId> group{in.results[0]};
    for (const auto& [sum, dot] : alias_of)  // adds folded into the dot name its registers too
      if (dot == in.results[0]) group.insert(sum);
    dots_in_flight_.insert(group.begin(), group.end());
    dot_groups_.push_back(std::move(group));
  }
  else line(retire_later ? "pl_wgmma_wait<1>();" : "pl_wgmma_wait<0>();");
}

void Emitter::emit_wgmma_issue(const ir::Inst& in, ir::ValueId a, ir::ValueId b, bool ta, bool tb) {
  const ir::ValueId r = in.results[0];
  const Layout& rl = layout_of(r);
  const DType t = type(a).dtype;
  const int64_t n = rl.shape[1];
  const int64_t k = ta ? type(a).shape[0] : type(a).shape[1];
  const bool a_regs = !smem_home.count(a);
  PL_ASSERT(smem_home.count(b) && smem_home.at(b).swizzled && (a_regs || smem_home.at(a).swizzled),
            "wgmma operands must be swizzled homes (or A in registers)");
  const std::string fn = variant_name(n, a_regs, ta, tb, t);
  wgmma_variants_.insert(fn);
  const int64_t b_rows = type(b).shape[0];
  const std::string bdesc = tb ? "pl_wgmma_desc_k(" + home_expr(b) + ", " + std::to_string(b_rows) + ", kk)"
                               : "pl_wgmma_desc_mn(" + home_expr(b) + ", " + std::to_string(b_rows) + ", kk)";
  max_fragment_regs_ = std::max<int64_t>(max_fragment_regs_, a_regs ? k / 4 : 1);
  open("");
  // This warp's warpgroup (rows 64 * pl_wg ..): a constant where one warpgroup computes.
  line(std::string("const int pl_wg = ") + (threads_ <= 128 ? "0" : uniform_addresses() ? "pl_wg_top" : "pl_warpgroup()") + ";");
  line("(void)pl_wg;");
  if (a_regs) {
    // A from registers: the warp's 16 rows of k16 step kk are accumulator tiles 2kk and 2kk + 1,
    // packed for every step before the fence (no register writes between the MMAs).
    // A cast from float32 registers in the same layout packs straight from its source: the
    // pack rounds to nearest even exactly as the cast does, and the cast becomes dead code.
    const std::string x = name(pack_source(a)), pack = pack_function(t);
    line("unsigned pl_a[" + std::to_string(k / 16) + "][4];");
    line("#pragma unroll");
    open("for (int kk = 0; kk < " + std::to_string(k / 16) + "; ++kk)");
    line("const int s0 = 8 * kk, s1 = s0 + 4;");
    line("pl_a[kk][0] = " + pack + "(" + x + "[s0], " + x + "[s0 + 1]); pl_a[kk][1] = " + pack + "(" + x + "[s0 + 2], " + x +
         "[s0 + 3]);");
    line("pl_a[kk][2] = " + pack + "(" + x + "[s1], " + x + "[s1 + 1]); pl_a[kk][3] = " + pack + "(" + x + "[s1 + 2], " + x +
         "[s1 + 3]);");
    close();
  }
  for (ir::ValueId home : {a, b})  // a tile still in flight from the TMA (this program's phase, pl_home_phase)
    if (auto th = tma_homes_.find(home); th != tma_homes_.end() && !tma_homes_waited_.count(home))
      line("pl_mbar_wait(pl_home_bar" + std::to_string(th->second) + ", pl_home_phase);");
  emit_turn_wait(in);  // ping-pong: this warpgroup's turn at the tensor cores
  line("pl_wgmma_fence();");
  line("#pragma unroll");
  open("for (int kk = 0; kk < " + std::to_string(k / 16) + "; ++kk)");
  if (a_regs) {
    line(fn + "(" + name(r) + ", pl_a[kk][0], pl_a[kk][1], pl_a[kk][2], pl_a[kk][3], " + bdesc + ");");
  } else {
    const int64_t a_rows = type(a).shape[0];
    // K-major A ([M][K]): the warpgroup's 64 rows start 8 atoms in; M-major A ([K][M]): its 64
    // columns are one column block.
    const std::string adesc =
        ta ? "pl_wgmma_desc_mn((char*)(" + home_expr(a) + ") + pl_wg * " + std::to_string(a_rows * 128) + ", " +
                 std::to_string(a_rows) + ", kk)"
           : "pl_wgmma_desc_k((char*)(" + home_expr(a) + ") + pl_wg * 8192, " + std::to_string(a_rows) + ", kk)";
    line(fn + "(" + name(r) + ", " + adesc + ", " + bdesc + ");");
  }
  close();
  emit_turn_pass(in);
  close();
}

// One wrapper per instruction variant: d += A * B over the warp's N/2 accumulators.
std::string Emitter::wgmma_functions() const {
  std::string out;
  for (const std::string& fn : wgmma_variants_) {
    const size_t p = fn.find('_', 10);
    const int n = std::stoi(fn.substr(10, p - 10));
    const bool regs = fn.compare(p + 1, 2, "rs") == 0;
    const bool a_mn = fn[p + 4] == 'm', b_mn = fn[p + 5] == 'm';
    const std::string ty = fn.substr(fn.size() - 4) == "bf16" ? "bf16" : "f16";
    std::string acc, cons;
    for (int i = 0; i < n / 2; ++i) {
      acc += (i ? ", %" : "%") + std::to_string(i);
      cons += (i ? ", " : "") + std::string("\"+f\"(d[") + std::to_string(i) + "])";
    }
    const int first = n / 2;
    std::string a_operand, params, inputs;
    if (regs) {
      a_operand = "{%" + std::to_string(first) + ", %" + std::to_string(first + 1) + ", %" + std::to_string(first + 2) +
                  ", %" + std::to_string(first + 3) + "}";
      params = "float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long db";
      inputs = "\"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"l\"(db), \"r\"(1)";
    } else {
      a_operand = "%" + std::to_string(first);
      params = "float* d, unsigned long long da, unsigned long long db";
      inputs = "\"l\"(da), \"l\"(db), \"r\"(1)";
    }
    const int b_index = regs ? first + 4 : first + 1;
    const std::string trans = regs ? std::string(b_mn ? "1" : "0") : std::string(a_mn ? "1" : "0") + ", " + (b_mn ? "1" : "0");
    out += "// wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k16.f32." + ty + "." + ty + (regs ? ", A in registers" : "") + "\n";
    out += "PL_DEVICE void " + fn + "(" + params + ") {\n";
    out += "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" + std::to_string(b_index + 1) +
           ", 0;\\nwgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k16.f32." + ty + "." + ty + " {" + acc +
           "}, " + a_operand + ", %" + std::to_string(b_index) + ", p, 1, 1, " + trans + ";\\n}\\n\"\n";
    out += "      : " + cons + "\n      : " + inputs + ");\n}\n";
  }
  return out;
}

}  // namespace palladium::cuda
