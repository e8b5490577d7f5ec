// The CUDA emitter's driver: the kernel's signature, program-id decoding from the launch grid,
// scratch acquisition, the shared helpers, and structured control flow.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <optional>

#include "backends/common/carried_loads.h"
#include "backends/common/early_dots.h"
#include "backends/common/transposed_products.h"
#include "backends/cuda/emitter.h"
#include "palladium/error.h"

namespace palladium::cuda {

std::string Target::arch_flag() const {
  return "sm_" + std::to_string(sm) + (arch_specific && sm >= 90 ? "a" : "");
}

Target target_for(int major, int minor) {
  Target t;
  t.sm = major * 10 + minor;
  t.arch_specific = t.sm == 90 || t.sm == 100;
  // Opt-in shared memory per block by generation (bytes).
  if (t.sm >= 90) t.max_shared_bytes = 227 * 1024;
  else if (t.sm == 80 || t.sm == 87) t.max_shared_bytes = 163 * 1024;
  else if (t.sm >= 86) t.max_shared_bytes = 99 * 1024;
  else if (t.sm >= 70) t.max_shared_bytes = 96 * 1024;
  else t.max_shared_bytes = 48 * 1024;
  return t;
}

Emitter::Emitter(const ir::Kernel& k, const CompilerParams& params, const Target& target)
    : k_(k), params_(params), target_(target) {}

// ---------------------------------------------------------------- helpers

std::string Emitter::reg_type(DType t) {
  switch (t) {
    case DType::bool_: return "bool";
    case DType::int8: return "pl_i8";
    case DType::int16: return "pl_i16";
    case DType::int32: return "pl_i32";
    case DType::int64: return "pl_i64";
    case DType::uint8: return "pl_u8";
    case DType::uint32: return "pl_u32";
    case DType::float16: case DType::bfloat16: case DType::float32: return "float";
    case DType::float64: return "double";
  }
  return "float";
}

std::string Emitter::mem_type(DType t) {
  switch (t) {
    case DType::bool_: return "pl_u8";
    case DType::float16: case DType::bfloat16: return "pl_u16";
    default: return reg_type(t);
  }
}

int Emitter::reg_size(DType t) {
  switch (t) {
    case DType::bool_: case DType::int8: case DType::uint8: return 1;
    case DType::int16: return 2;
    case DType::int64: case DType::float64: return 8;
    default: return 4;
  }
}

std::string Emitter::name(ir::ValueId v) const {
  if (auto it = name_override_.find(v); it != name_override_.end()) return it->second;
  if (auto it = alias_of.find(v); it != alias_of.end()) return name(it->second);
  return "v" + std::to_string(v);
}

void Emitter::line(const std::string& s) { body_ << std::string(static_cast<size_t>(indent_) * 2, ' ') << s << "\n"; }
void Emitter::open(const std::string& s) {
  line(s + " {");
  ++indent_;
}
void Emitter::close(const std::string& s) {
  --indent_;
  line(s);
}
// Shared addresses as 32-bit offsets from the one dynamic shared area, and the warpgroup index
// computed once (pl_smem_addr, pl_wg_top): fewer uniform-datapath instructions ahead of each
// wgmma. Only in kernels without a producer: on the H200 (stop 44, docs/performance.md) the head_dim
// 64 forward at blocks 128 x 64 ran 1.5-2.6% faster and the backward within noise, while in
// producer kernels the ping-pong loops lost 3-5% (d64, 128 x 128) and 17-26% (causal d128,
// 128 x 128), cause not found. PALLADIUM_CUDA_UNIFORM_ADDRESSES=0 keeps generic pointers everywhere.
bool Emitter::uniform_addresses() const {
  const char* env = std::getenv("PALLADIUM_CUDA_UNIFORM_ADDRESSES");
  return producer_warps_ == 0 && !(env && std::string(env) == "0");
}

void Emitter::barrier() {
  touched_shared_ = true;
  barrier_in_body_ = true;
  line(producer_warps_ > 0 ? "pl_consumer_barrier<" + std::to_string(threads_) + ">();" : "__syncthreads();");
}

int64_t Emitter::accumulator_slots(const ir::Region& region) const {
  int64_t slots = 0;
  for (const ir::Inst& in : region.body) {
    if (in.op == ir::Op::Dot && layout_of(in.results[0]).kind == LayoutKind::Mma) slots += layout_of(in.results[0]).slots;
    for (const ir::Region& sub : in.regions) slots += accumulator_slots(sub);
  }
  return slots;
}

void Emitter::declare(ir::ValueId v) {
  if (skip_registers.count(v) || in_place_.count(v)) return;
  const ir::Type& t = type(v);
  const Layout& l = layout_of(v);
  if (l.registers()) {
    line(reg_type(t.dtype) + " " + name(v) + "[" + std::to_string(l.slots) + "];");
  } else {
    line(reg_type(t.dtype) + "* " + name(v) + " = " +
         scratch_ptr(scratch_offset_.at(static_cast<size_t>(v)), reg_type(t.dtype)) + ";");
  }
}

std::string Emitter::scratch_ptr(int64_t offset, const std::string& type) const {
  return "((" + type + "*)(pl_scratch + " + std::to_string(offset) + "))";
}

void Emitter::open_slots(const Layout& l) {
  if (l.registers()) {
    line("#pragma unroll");
    open("for (int s = 0; s < " + std::to_string(l.slots) + "; ++s)");
  } else {
    open("for (int s = pl_tid(); s < " + std::to_string(l.numel) + "; s += " + std::to_string(threads_) + ")");
  }
}

std::string Emitter::at(ir::ValueId v) const { return name(v) + "[s]"; }

std::string Emitter::elem(const Layout& l) const { return l.registers() ? "pl_L" + std::to_string(l.id) + "_elem(s)" : "s"; }

std::string Emitter::coord(const Layout& l, size_t dim) const {
  if (l.kind == LayoutKind::Mma) return "pl_L" + std::to_string(l.id) + (dim == 0 ? "_row(s)" : "_col(s)");
  if (l.kind == LayoutKind::RowSlice) return dim == 0 ? "pl_L" + std::to_string(l.id) + "_row(s)" : "0";
  int64_t inner = 1;
  for (size_t d = dim + 1; d < l.shape.size(); ++d) inner *= l.shape[d];
  std::string e = elem(l);
  if (inner > 1) e = "(" + e + " / " + std::to_string(inner) + ")";
  if (dim > 0) e = "(" + e + " % " + std::to_string(l.shape[dim]) + ")";
  return e;
}

std::string Emitter::valid(const Layout& l) const {
  if (l.kind == LayoutKind::Strided && !l.all_slots_valid) return "pl_L" + std::to_string(l.id) + "_elem(s) < " + std::to_string(l.numel);
  return "";
}

std::string Emitter::owner(const Layout& l) const {
  switch (l.kind) {
    case LayoutKind::Replicated: return "pl_tid() == 0";
    case LayoutKind::RowSlice: return "(pl_lane() & 3) == 0";
    default: {
      std::string v = valid(l);
      return v.empty() ? "true" : v;
    }
  }
}

std::string Emitter::stage_space(int64_t bytes, const std::string& type, int64_t offset) {
  touched_shared_ = true;
  if (smem_homes_bytes_ + offset + bytes + bulk_stage_bytes_ <= target_.max_shared_bytes - kSharedReserve) {
    smem_stage_bytes_ = std::max(smem_stage_bytes_, offset + bytes);
    return "((" + type + "*)(pl_stage_s + " + std::to_string(offset) + "))";
  }
  global_stage_bytes_ = std::max(global_stage_bytes_, offset + bytes);
  return "((" + type + "*)(pl_stage_g + " + std::to_string(offset) + "))";
}

int64_t Emitter::staged_bytes(ir::ValueId v) const {
  if (!layout_of(v).registers()) return 0;
  return (numel(type(v).shape) * reg_size(type(v).dtype) + 15) / 16 * 16;
}

std::string Emitter::stage_value(ir::ValueId v, int64_t offset) {
  const Layout& l = layout_of(v);
  const std::string t = reg_type(type(v).dtype);
  if (!l.registers()) return name(v);
  const std::string buf = stage_space(staged_bytes(v), t, offset);
  open_slots(l);
  line("if (" + owner(l) + ") " + buf + "[" + elem(l) + "] = " + at(v) + ";");
  close();
  return buf;
}

std::string Emitter::literal(DType t, double f, int64_t i) const {
  switch (t) {
    case DType::bool_: return i ? "true" : "false";
    case DType::float16: case DType::bfloat16: case DType::float32: {
      const float x = static_cast<float>(f);
      if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e7f) {
        std::ostringstream os;
        os << static_cast<int64_t>(x) << ".0f";
        return os.str();
      }
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      std::ostringstream os;
      os << "__int_as_float(0x" << std::hex << bits << ")";
      return os.str();
    }
    case DType::float64: {
      uint64_t bits;
      std::memcpy(&bits, &f, 8);
      std::ostringstream os;
      os << "__longlong_as_double(0x" << std::hex << bits << "ll)";
      return os.str();
    }
    case DType::int64: return "(pl_i64)" + std::to_string(i) + "ll";
    case DType::uint32: return "(pl_u32)" + std::to_string(static_cast<uint32_t>(i)) + "u";
    default: return "(" + reg_type(t) + ")" + std::to_string(i);
  }
}

std::string Emitter::round_fn(DType t) const {
  if (t == DType::bfloat16) return "pl_round_bf16";
  if (t == DType::float16) return "pl_round_f16";
  return "";
}

void Emitter::unsupported(const ir::Inst& in, const std::string& why) const {
  throw Error("pallas_call '" + k_.name + "', op '" + ir::op_name(in.op) + "': the cuda backend " + why);
}

// ---------------------------------------------------------------- regions and control flow

void Emitter::emit_region(const ir::Region& r) {
  // A barrier in a nested region need not run on every iteration of the loop around it.
  const bool barrier_before = barrier_in_body_;
  if (&r != &k_.body) barrier_in_body_ = false;
  emit_region_body(r);
  barrier_in_body_ = barrier_before;
}

void Emitter::emit_region_body(const ir::Region& r) {
  for (const ir::Inst& in : r.body) {
    if (in.op == ir::Op::Yield) continue;
    if (!emitted_early_.count(&in)) {
      if (&r == &k_.body && reuse_barriers_.count(static_cast<size_t>(&in - r.body.data()))) {
        retire_dots();
        barrier();
      }
      // A pipelined loop's last dot is still in flight into the carry this instruction reads.
      for (const auto& [loop, p] : pipelined_)
        if (p.carry_reader == &in) line("pl_wgmma_wait<0>();");
      if (!dots_in_flight_.empty() && !folded_into_dot(in) && ir::reads(in, dots_in_flight_)) emit_ahead_of_wait(r, in);
      emit_inst_beside_dots(in);
    }
    if (&r == &k_.body) emit_home_release(in);
  }
  retire_dots();
}

// Emits `in` while the wgmma dots issued before it run, when it neither reads their results nor
// writes shared memory (their operands) nor is control flow; else retires them first. A wgmma dot
// outside a pipelined K loop joins them on the tensor cores (the attention backward's dk and dq
// dots, both of ds, and its dv and dp dots), so one wait retires both.
void Emitter::emit_inst_beside_dots(const ir::Inst& in) {
  if (dots_in_flight_.empty() || folded_into_dot(in)) return emit_inst(in);  // a folded add emits nothing
  const ir::Family f = ir::op_family(in.op);
  static const bool join = [] {  // PALLADIUM_CUDA_JOIN_DOTS=0: each dot retires the ones before it
    const char* env = std::getenv("PALLADIUM_CUDA_JOIN_DOTS");
    return !(env && std::string(env) == "0");
  }();
  const bool joining_dot = join && f == ir::Family::Dot && wgmma_dots_.count(&in) && !pipelined_by_dot_.count(&in);
  if (!in.regions.empty() || (f == ir::Family::Dot && !joining_dot) || f == ir::Family::Effect) {
    retire_dots();
    return emit_inst(in);
  }
  if (ir::reads(in, dots_in_flight_)) {  // the dots it reads retire; those issued after them run on
    retire_dots_read_by(in);
    if (dots_in_flight_.empty()) return emit_inst(in);
  }
  const size_t earlier = dot_groups_.size();
  std::ostringstream aside;
  aside.swap(body_);
  touched_shared_ = false;
  emit_inst(in);
  aside.swap(body_);
  // The earlier dots retire first (a dot `in` issued stays in flight).
  if (touched_shared_) retire_oldest_dot_groups(earlier);
  body_ << aside.str();
}

// `in` reads a dot in flight: first the later loads of the region that can run while it does
// (into registers, from refs the kernel never writes, their indices already computed: the
// attention backward's lse and delta rows), up to the next effect or control flow. Their
// latency then hides behind the dot's.
void Emitter::emit_ahead_of_wait(const ir::Region& r, const ir::Inst& in) {
  std::set<ir::ValueId> unavailable = dots_in_flight_;
  for (size_t j = static_cast<size_t>(&in - r.body.data()); j < r.body.size(); ++j) {
    const ir::Inst& x = r.body[j];
    if (x.op == ir::Op::Yield || !x.regions.empty() || ir::has_effects(x)) break;
    if (emitted_early_.count(&x)) continue;
    const bool register_load = x.op == ir::Op::Load && !(x.i1 & (ir::kHasMask | ir::kGather)) &&
                               !written_refs_.count(static_cast<int>(x.i0)) && !smem_home.count(x.results[0]) &&
                               layout_of(x.results[0]).registers();
    if (&x == &in || !register_load || ir::reads(x, unavailable)) {
      for (ir::ValueId v : x.results) unavailable.insert(v);
      continue;
    }
    emit_inst_beside_dots(x);
    emitted_early_.insert(&x);
    if (dots_in_flight_.empty()) return;  // it needed shared memory after all: the dots are retired
  }
}

void Emitter::retire_dots() { retire_oldest_dot_groups(dot_groups_.size()); }

// `in` waits for the newest group it reads and those before it; the later ones run on.
void Emitter::retire_dots_read_by(const ir::Inst& in) {
  for (size_t g = dot_groups_.size(); g > 0; --g)
    if (ir::reads(in, dot_groups_[g - 1])) return retire_oldest_dot_groups(g);
}

// wgmma.wait_group N retires every commit group but the N committed last.
void Emitter::retire_oldest_dot_groups(size_t count) {
  if (count == 0) return;
  line("pl_wgmma_wait<" + std::to_string(dot_groups_.size() - count) + ">();");
  for (size_t g = 0; g < count; ++g)
    for (ir::ValueId v : dot_groups_[g]) dots_in_flight_.erase(v);
  dot_groups_.erase(dot_groups_.begin(), dot_groups_.begin() + static_cast<std::ptrdiff_t>(count));
}

static const ir::Inst& yield_of(const ir::Region& r) { return r.body.back(); }

void Emitter::emit_inst(const ir::Inst& in) {
  if (deferred(in)) return;  // a uniform select's predicate, computed in its mixed branch
  emit_inst_body(in);
  // Loop-invariant dot operands computed in registers are copied to their shared home once.
  for (ir::ValueId r : in.results)
    if (smem_home.count(r) && !skip_registers.count(r)) emit_home_store(r);
}

void Emitter::emit_inst_body(const ir::Inst& in) {
  switch (ir::op_family(in.op)) {
    case ir::Family::Leaf: emit_leaf(in); return;
    case ir::Family::Unary: case ir::Family::Binary: case ir::Family::Compare: case ir::Family::Select:
    case ir::Family::Cast: emit_elementwise(in); return;
    case ir::Family::Layout:
      if (in.op == ir::Op::Broadcast) emit_broadcast(in);
      else if (in.op == ir::Op::Reshape) emit_reshape(in);
      else emit_transpose(in);
      return;
    case ir::Family::Reduce: emit_reduce(in); return;
    case ir::Family::Scan: emit_cumsum(in); return;
    case ir::Family::Dot: emit_dot(in); return;
    case ir::Family::Memory: emit_memory(in); return;
    case ir::Family::Control: emit_control(in); return;
    case ir::Family::Effect: emit_debug_print(in); return;
  }
}

void Emitter::emit_control(const ir::Inst& in) {
  // Copies yielded values into the carries; through temporaries when a carry is yielded into
  // another carry's slot (a swap would otherwise read an overwritten value).
  auto assign_yield = [&](const ir::Inst& y, const std::vector<ir::ValueId>& dst) {
    bool via_temp = false;
    for (ir::ValueId v : y.operands)
      for (ir::ValueId d : dst) via_temp = via_temp || name(v) == name(d);
    std::vector<std::string> src;
    for (size_t i = 0; i < y.operands.size(); ++i) {
      ir::ValueId v = y.operands[i];
      if (name(v) == name(dst[i])) { src.push_back(""); continue; }
      const Layout& l = layout_of(v);
      std::string from = name(v);
      if (via_temp) {
        from = "pl_tmp" + std::to_string(i);
        if (l.registers()) {
          line(reg_type(type(v).dtype) + " " + from + "[" + std::to_string(l.slots) + "];");
        } else {
          unsupported(in, "cannot swap loop carries that live in scratch memory");
        }
        open_slots(l);
        line(from + "[s] = " + at(v) + ";");
        close();
      }
      src.push_back(from);
    }
    for (size_t i = 0; i < dst.size(); ++i) {
      if (src[i].empty()) continue;
      open_slots(layout_of(dst[i]));
      line(at(dst[i]) + " = " + src[i] + "[s];");
      close();
    }
  };
  auto init_results = [&](size_t first_operand) {
    for (size_t r = 0; r < in.results.size(); ++r) {
      declare(in.results[r]);
      const ir::ValueId init = in.operands[first_operand + r];
      open_slots(layout_of(in.results[r]));
      line(at(in.results[r]) + " = " + at(init) + ";");
      close();
    }
  };

  if (in.op == ir::Op::For) {
    init_results(2);
    const ir::Region& body = in.regions[0];
    for (size_t r = 0; r < in.results.size(); ++r) name_override_[body.args[1 + r]] = name(in.results[r]);
    const PipelinedLoop* pipe = pipelined_loop(in);
    if (pipe && pipe->carry_reader) name_override_[pipe->carry_reader->results[0]] = name(pipe->carry_arg);
    emit_turns_open(in);  // before the prologue: a pipelined loop's first turn is there
    emit_loop_prologue(in);
    const std::string it = reg_type(type(body.args[0]).dtype);
    const std::string idx = "pl_i" + std::to_string(body.args[0]);
    const std::string slot = "pl_slot" + std::to_string(body.args[0]);
    if (carries_slot(in)) {  // iteration lo's slot is 0 (ring_slot counts from lo)
      line("unsigned " + slot + " = 0u;");
      carried_slot_[&in] = slot;
    }
    open("for (" + it + " " + idx + " = " + name(in.operands[0]) + "[0]; " + idx + " < " + name(in.operands[1]) +
         "[0]; ++" + idx + ")");
    line("const " + it + " " + name(body.args[0]) + "[1] = {" + idx + "};");
    emit_region(body);
    if (producer_serves(in)) emit_consumer_release(in);
    assign_yield(yield_of(body), in.results);
    if (carried_slot_.erase(&in))
      line(slot + " = " + slot + " == " + std::to_string(stages_ - 1) + "u ? 0u : " + slot + " + 1u;");
    close();
    if (pipe) line("pl_wgmma_wait<0>();");  // the last iteration's last dot
    if (producer_serves(in)) emit_consumer_loop_end(in);
    emit_turns_close(in);
  } else if (in.op == ir::Op::While) {
    init_results(0);
    const ir::Region& cond = in.regions[0];
    const ir::Region& body = in.regions[1];
    for (size_t r = 0; r < in.results.size(); ++r) {
      name_override_[cond.args[r]] = name(in.results[r]);
      name_override_[body.args[r]] = name(in.results[r]);
    }
    open("while (true)");
    emit_region(cond);
    line("if (!" + name(yield_of(cond).operands[0]) + "[0]) break;");
    emit_region(body);
    assign_yield(yield_of(body), in.results);
    close();
  } else if (in.op == ir::Op::If) {
    for (ir::ValueId r : in.results) declare(r);
    open("if (" + name(in.operands[0]) + "[0])");
    emit_region(in.regions[0]);
    assign_yield(yield_of(in.regions[0]), in.results);
    close("} else {");
    ++indent_;
    emit_region(in.regions[1]);
    assign_yield(yield_of(in.regions[1]), in.results);
    close();
  } else {
    unsupported(in, "has no rule for this control op");
  }
}

// ---------------------------------------------------------------- the kernel

static std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return out.empty() ? "kernel" : out;
}

GeneratedKernel Emitter::run() {
  plan();
  emit_region(k_.body);
  if (bulk_stage_bytes_ > 0) line("pl_bulk_wait_all();  // the bulk reductions done before the block ends");
  const std::string producer = producer_code();

  GeneratedKernel g;
  g.entry = "pl_" + sanitize(k_.name);
  g.threads = threads_ + 32 * producer_warps_;
  g.num_programs = k_.parallel_programs();  // thread blocks: one per point of the parallel axes
  // The exchange area, then the bulk reductions' staging rows (16-byte aligned), then the TMA's mbarriers.
  const int64_t bulk_at = (smem_homes_bytes_ + smem_stage_bytes_ + 15) / 16 * 16;
  const int64_t staged_end = bulk_stage_bytes_ > 0 ? bulk_at + bulk_stage_bytes_ : smem_homes_bytes_ + smem_stage_bytes_;
  const int64_t barriers_at = (staged_end + 7) / 8 * 8;
  g.shared_bytes = tma_barrier_bytes() > 0 ? barriers_at + tma_barrier_bytes() : staged_end;
  g.scratch_bytes = global_stage_offset_ + global_stage_bytes_;

  std::ostringstream src;
  src << "// Generated by Palladium's CUDA backend from pallas_call '" << k_.name << "'.\n";
  if (!uniform_addresses()) src << "#define PL_GENERIC_SMEM_ADDRESSES 1\n";
  src << "#include \"cuda/palladium.h\"\n\n";
  // Layout helpers: which element each slot of each thread holds.
  for (const Layout& l : layouts_) {
    const std::string p = "PL_DEVICE int pl_L" + std::to_string(l.id);
    src << "// layout " << l.id << ": " << shape_str(l.shape) << " ";
    switch (l.kind) {
      case LayoutKind::Replicated:
        src << "replicated\n" << p << "_elem(int) { return 0; }\n";
        break;
      case LayoutKind::Strided:
        src << "strided, " << l.slots << " slots of " << l.vec << "-element groups\n"
            << p << "_elem(int s) { return ((s / " << l.vec << ") * " << threads_ << " + pl_tid()) * " << l.vec
            << " + s % " << l.vec << "; }\n";
        break;
      case LayoutKind::Mma: {
        const int64_t wr = l.shape[0] / l.warps_m, wc = l.shape[1] / l.warps_n;
        src << "mma accumulators, warps " << l.warps_m << "x" << l.warps_n << ", tiles " << l.tiles_m << "x"
            << l.tiles_n << "\n"
            << p << "_row(int s) { return (pl_warp() / " << l.warps_n << ") * " << wr << " + ((s >> 2) / "
            << l.tiles_n << ") * 16 + (pl_lane() >> 2) + ((s >> 1) & 1) * 8; }\n"
            << p << "_col(int s) { return (pl_warp() % " << l.warps_n << ") * " << wc << " + ((s >> 2) % "
            << l.tiles_n << ") * 8 + (pl_lane() & 3) * 2 + (s & 1); }\n"
            << p << "_elem(int s) { return pl_L" << l.id << "_row(s) * " << l.shape[1] << " + pl_L" << l.id
            << "_col(s); }\n";
        break;
      }
      case LayoutKind::RowSlice:
        src << "rows of mma accumulators, warps " << l.warps_m << "\n"
            << p << "_row(int s) { return pl_warp() * " << l.shape[0] / l.warps_m
            << " + (s >> 1) * 16 + (pl_lane() >> 2) + (s & 1) * 8; }\n"
            << p << "_elem(int s) { return pl_L" << l.id << "_row(s); }\n";
        break;
      case LayoutKind::Memory:
        src << "global scratch\n";
        break;
    }
  }
  // Blocks per multiprocessor to keep registers for: 2 for tensor-core kernels (a block waiting at
  // a barrier then has another to overlap with), 1 otherwise. PALLADIUM_CUDA_MIN_BLOCKS overrides.
  // The estimate: the tensor-core dots' accumulators (all live at once, as in a loop carrying
  // them) plus the largest dot's fragments.
  const int64_t reg_estimate = max_fragment_regs_ + 16 + accumulator_slots(k_.body);
  int min_blocks = max_fragment_regs_ > 0 && reg_estimate <= 120 ? 2 : 1;
  // Warp-specialised kernels run one program per multiprocessor (their loops are the pipelined
  // ones, whose shared memory already allows no second), so the registers go to that one.
  if ((producer_warps_ > 0 && pingpong_loops_.empty()) || consumer_regs_ > 0) min_blocks = 1;
  if (const char* env = std::getenv("PALLADIUM_CUDA_MIN_BLOCKS"); env && *env) min_blocks = std::max(1, std::atoi(env));
  src << wgmma_functions();
  g.cluster = cluster_;
  src << "\nextern \"C\" __global__ void __launch_bounds__(" << g.threads << ", " << min_blocks << ") "
      << (cluster_ > 1 ? "__cluster_dims__(" + std::to_string(cluster_) + ", 1, 1) " : "") << g.entry << "(";
  for (size_t i = 0; i < k_.refs.size(); ++i) {
    const ir::RefParam& p = k_.refs[i];
    src << (i ? ",\n    " : "\n    ") << (p.is_output ? "" : "const ") << mem_type(p.dtype) << "* "
        << (p.is_output ? "" : "__restrict__ ") << "pl_ref" << i;
  }
  src << (k_.refs.empty() ? "\n    " : ",\n    ")
      << "unsigned char* pl_scratch_base, unsigned long long pl_scratch_stride, unsigned* pl_slot_flags, "
         "int pl_num_slots"
      << (debug_prints_.empty() ? "" : ", unsigned char* pl_debug")
      << (params_.checks ? ", unsigned long long* pl_checks" : "") << tma_parameters() << ") {\n";
  // The program's row-major linear id over the whole grid (debug_print records carry it).
  std::string linear = "0";
  for (size_t d = 0; d < k_.grid.size(); ++d)
    linear = "(" + linear + ") * " + std::to_string(k_.grid[d]) + "ll + pl_pid" + std::to_string(d);
  // Persistent (warp-specialised kernels whose homes the producer loads, without per-program
  // scratch or records; persistent_eligible): a block runs programs pl_block, pl_block + blocks,
  // ..., its producer filling the ring for the next program while the consumers store this one's.
  g.persistent = persistent_eligible() && debug_prints_.empty() && !params_.checks && g.scratch_bytes == 0;
  const std::string program = "  long long pl_rest = pl_block;\n" + program_id_decode() +
                              "  const long long pl_linear = " + linear + ";\n  (void)pl_linear;\n";
  g.balance_length = g.persistent ? balance_length() : 0;
  // The warp's warpgroup, once: computed in a loop, its shuffle headed every iteration's first
  // wgmma descriptor.
  if (uniform_addresses() && threads_ > 128) src << "  const int pl_wg_top = pl_warpgroup();\n  (void)pl_wg_top;\n";
  src << "  const long long pl_first_block = (long long)blockIdx.x + (long long)blockIdx.y * gridDim.x;\n";
  if (!g.persistent) {
    src << "  const long long pl_block = pl_first_block;\n";
    src << "  if (pl_block >= " << g.num_programs << "ll) return;\n";
    // Program ids: row-major over the parallel axes, the last axis fastest; the sequential axes are
    // a loop inside the block (below), in grid order.
    src << "  long long pl_rest = pl_block;\n";
    src << program_id_decode(longest_first());
  }
  if (g.scratch_bytes > 0) {
    // Scratch per program, or per resident block when the grid outnumbers the slots: a block
    // takes a free slot and frees it at its end (there are as many slots as resident blocks).
    src << "  __shared__ int pl_slot;\n"
           "  if (pl_num_slots >= "
        << g.num_programs
        << "ll) {\n"
           "    if (pl_tid() == 0) pl_slot = (int)pl_block;\n"
           "  } else if (pl_tid() == 0) {\n"
           "    for (int t = (int)(pl_block % pl_num_slots);; t = (t + 1) % pl_num_slots)\n"
           "      if (atomicCAS(&pl_slot_flags[t], 0u, 1u) == 0u) { pl_slot = t; break; }\n"
           "  }\n"
           "  __syncthreads();\n"
           "  unsigned char* pl_scratch = pl_scratch_base + (unsigned long long)pl_slot * pl_scratch_stride;\n";
  } else {
    src << "  unsigned char* pl_scratch = pl_scratch_base;\n";
  }
  src << "  unsigned char* pl_stage_s = pl_smem + " << smem_homes_bytes_ << ";\n";
  if (bulk_stage_bytes_ > 0) src << "  unsigned char* pl_bulk_s = pl_smem + " << bulk_at << ";\n";
  src << "  unsigned char* pl_stage_g = pl_scratch + " << global_stage_offset_ << ";\n";
  src << "  (void)pl_stage_s; (void)pl_stage_g; (void)pl_scratch_stride; (void)pl_slot_flags;\n";
  src << tma_kernel_setup(barriers_at);
  if (!debug_prints_.empty()) src << "  unsigned pl_debug_seq = 0;\n";
  if (k_.any_sequential()) {
    // One program per step; the barrier orders each step's global and shared memory accesses
    // before the next step's (an output block accumulated along the axis is read back here).
    src << "  for (long long pl_step = 0; pl_step < " << k_.sequential_programs() << "ll; ++pl_step) {\n";
    src << "  long long pl_srest = pl_step;\n";
    for (size_t d = k_.grid.size(); d-- > 0;) {
      if (!k_.is_sequential(d)) continue;
      src << "  const int pl_pid" << d << " = (int)(pl_srest % " << k_.grid[d] << "ll);\n";
      src << "  pl_srest /= " << k_.grid[d] << "ll;\n";
    }
  }
  // The producer's branch and the consumers' (warp-specialised kernels): only lane 0 of the first
  // producer warp works; with register rebalancing each side first moves to its register count.
  const std::string producer_open =
      "  if (pl_warp() >= " + std::to_string(threads_ / 32) + ") {\n" +
      (consumer_regs_ > 0 ? "    pl_regs_decrease<" + std::to_string(producer_regs_) + ">();\n    if (pl_warp() == " +
                                std::to_string(threads_ / 32) + " && pl_lane() == 0) {\n"
                          : std::string("    if (pl_lane() == 0) {\n"));
  const std::string consumer_open =
      "  } else {\n" + (consumer_regs_ > 0 ? "    pl_regs_increase<" + std::to_string(consumer_regs_) + ">();\n" : "");
  if (g.persistent) {
    const std::string programs = "  for (long long pl_block = pl_first_block; pl_block < " + std::to_string(g.num_programs) +
                                 "ll; pl_block += (long long)gridDim.x * gridDim.y) {\n";
    src << producer_open << programs << program << producer << "  }\n    }\n"
        << consumer_open << programs << program << body_.str() << (tma_homes_.empty() ? "" : "  pl_home_phase ^= 1u;\n")
        << "  pl_consumer_barrier<" << threads_
        << ">();\n  }\n  }\n";
  } else {
    src << "  const long long pl_linear = " << linear << ";\n  (void)pl_linear;\n";
    if (producer_warps_ > 0)  // the producer's first lane issues the rings' copies; the consumer warps run the body
      src << producer_open << producer << "    }\n" << consumer_open << body_.str() << "  }\n";
    else
      src << body_.str();
  }
  if (k_.any_sequential()) src << "  __syncthreads();\n  }\n";
  if (g.scratch_bytes > 0) {
    src << "  __syncthreads();\n"
           "  if (pl_tid() == 0 && pl_num_slots < "
        << g.num_programs << "ll) { __threadfence(); atomicExch(&pl_slot_flags[pl_slot], 0u); }\n";
  }
  src << cluster_sync() << "}\n";
  g.source = src.str();
  g.prints = debug_prints_;
  g.access_sites = access_sites_;
  g.checked = params_.checks;
  g.tensor_maps = tensor_maps_;
  return g;
}

// On wgmma targets, PALLADIUM_CUDA_TRANSPOSED_PRODUCTS=1 computes groups read only transposed by
// dots transposed, so that the dots take them from registers (transposed_products.h). Opt-in: on
// an H200 (stop 42, job 4) the attention backward ran 0-21% slower so: its lse and delta, loaded
// and clamped by column, cost more instructions (d64: 709M -> 798M, job 5) than the shared-memory
// round trips of p^T and ds^T it saves. Read at each generation (tests set it).
bool transposed_products_on() {
  const char* env = std::getenv("PALLADIUM_CUDA_TRANSPOSED_PRODUCTS");
  return env && std::string(env) == "1";
}

// On wgmma targets a dot that needs no other dot of its loop is issued beside the loop's first
// (early_dots.h), so that its wgmma runs under the code that waits for the first; emit_region
// then retires each dot where its own result is needed (wgmma.wait_group N). Only dots summing
// 128 products or more move. On an H200 (stop 45, jobs 23-24) the head_dim 128 backward ran
// 0.5-9% faster so (s8192 the most); at head_dim 64, where dout v^T sums 64, it was no faster:
// s2048 and s8192 slower in both rounds (1-3%, 2-7%), the causal rows within noise. There its
// loops grew 11-13% (the -delta no longer folded into the moved dot, registers 155 -> 168 at the
// cap of three programs per SM). PALLADIUM_CUDA_EARLY_DOTS=0 keeps the dots where the kernel
// wrote them. Read at each generation (tests set it).
namespace {
constexpr int64_t kEarlyDotMinContraction = 128;

bool early_dots_on() {
  const char* env = std::getenv("PALLADIUM_CUDA_EARLY_DOTS");
  return !(env && std::string(env) == "0");
}

// On wgmma targets the loops around dots load the next iteration's small vectors (lse and delta
// in the attention backward) in the iteration before (carried_loads.h). Not in checked runs: the
// first iteration's load goes out before the loop, even where the loop then runs no iteration.
// Nor with the transposed products, which load lse and delta again by column inside the loop
// (emit_reloaded_broadcast). PALLADIUM_CUDA_CARRIED_LOADS=0 keeps them where the kernel wrote
// them. Read at each generation.
constexpr int64_t kCarriedLoadMaxElements = 256;

bool carried_loads_on() {
  const char* env = std::getenv("PALLADIUM_CUDA_CARRIED_LOADS");
  return !(env && std::string(env) == "0");
}
}  // namespace

GeneratedKernel generate_cuda(const ir::Kernel& kernel, const CompilerParams& params, const Target& target) {
  CompilerParams resolved = params;
  resolved.checks = backend::checks_enabled(params.checks);
  const char* wgmma = std::getenv("PALLADIUM_CUDA_WGMMA");
  const bool async_dots = target.sm == 90 && target.arch_specific && !(wgmma && std::string(wgmma) == "0");
  std::optional<ir::Kernel> rewritten;
  if (transposed_products_on() && async_dots) rewritten = backend::transpose_register_products(kernel);
  if (early_dots_on() && async_dots)
    rewritten = backend::issue_independent_dots_early(rewritten ? *rewritten : kernel, kEarlyDotMinContraction);
  if (carried_loads_on() && async_dots && !resolved.checks && !transposed_products_on())
    rewritten = backend::carry_loop_loads(rewritten ? *rewritten : kernel, kCarriedLoadMaxElements);
  Emitter e(rewritten ? *rewritten : kernel, resolved, target);
  return e.run();
}

}  // namespace palladium::cuda
