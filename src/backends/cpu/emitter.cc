// The cpu code generator's driver: liveness, planning (fusion groups, dot operands read straight
// from refs, dots computed at their consumer) and the translation unit around the kernel body.
#include "backends/cpu/emitter.h"

#include <cstdlib>

#include <algorithm>

namespace palladium::cpu {

namespace {

// Comments carry user text (kernel names, debug_print formats): keep them on one line.
std::string comment_safe(const std::string& s) {
  std::string out;
  for (char c : s) out += (static_cast<unsigned char>(c) < 0x20 || c == '\\') ? '?' : c;
  return out;
}

int64_t compute_size(DType t) {
  switch (t) {
    case DType::float16: case DType::bfloat16: return 4;  // carried in float
    default: return itemsize(t);
  }
}

}  // namespace

Emitter::Emitter(const ir::Kernel& kernel, bool checks)
    : kernel_(kernel),
      checks_(checks),
      kinds_(kernel.types.size(), ValueKind::Dead),
      users_(kernel.types.size()),
      def_(kernel.types.size(), nullptr) {}

// ---------------------------------------------------------------------------------------------
// Analysis

bool Emitter::has_effects(const ir::Inst& in) {
  if (auto it = effects_.find(&in); it != effects_.end()) return it->second;
  const bool effects = ir::has_effects(in);
  effects_[&in] = effects;
  return effects;
}

void Emitter::add_user(ir::ValueId v, const ir::Inst* user) { users_[static_cast<size_t>(v)].push_back(user); }

// Backwards over the region: an instruction is live if it has effects or a live user. A live
// control op keeps all its yields (carries may feed effects in later iterations).
void Emitter::mark_live(const ir::Region& r) {
  for (size_t i = r.body.size(); i-- > 0;) {
    const ir::Inst& in = r.body[i];
    bool is_live = in.op == ir::Op::Yield || has_effects(in);
    for (ir::ValueId res : in.results) is_live = is_live || !users(res).empty();
    if (!is_live) continue;
    live_.insert(&in);
    for (const ir::Region& inner : in.regions) mark_live(inner);
    for (ir::ValueId v : in.operands) add_user(v, &in);
    if (ir::op_family(in.op) == ir::Family::Memory)
      for (ir::ValueId o : kernel_.refs[static_cast<size_t>(in.i0)].origin) add_user(o, &in);
  }
}

bool Emitter::is_fusable(const ir::Inst& in) const {
  if (in.results.size() != 1 || type(in.results[0]).shape.empty()) return false;
  if (deferred_dot_.count(&in)) return false;  // an add that accumulates a dot
  switch (ir::op_family(in.op)) {
    case ir::Family::Unary: case ir::Family::Binary: case ir::Family::Compare: case ir::Family::Select:
    case ir::Family::Cast:
      return true;
    default:
      return in.op == ir::Op::Const || in.op == ir::Op::Iota || in.op == ir::Op::Broadcast;
  }
}

void Emitter::plan_groups(const ir::Region& r) {
  FusionGroup current;
  auto finish = [&] {
    if (current.members.empty()) return;
    const size_t g = groups_.size();
    for (const ir::Inst* m : current.members) group_of_[m] = g;
    for (const ir::Inst* m : current.members) {
      const ir::ValueId v = m->results[0];
      bool internal = true;
      for (const ir::Inst* u : users(v)) {
        auto it = group_of_.find(u);
        internal = internal && it != group_of_.end() && it->second == g;
      }
      kinds_[static_cast<size_t>(v)] = internal ? ValueKind::Fused : ValueKind::Tile;
      if (m->op == ir::Op::Iota || (m->op == ir::Op::Broadcast && !type(m->operands[0]).shape.empty()))
        current.needs_indices = true;
    }
    plan_in_place_yields(r, current, g);
    plan_fused_store(r, current, g);
    groups_.push_back(std::move(current));
    current = FusionGroup{};
  };
  for (const ir::Inst& in : r.body) {
    if (!live(in) || in.op == ir::Op::Yield) continue;
    if (!is_fusable(in)) {
      finish();
      continue;
    }
    const Shape& shape = type(in.results[0]).shape;
    if (!current.members.empty() && current.shape != shape) finish();
    current.shape = shape;
    current.members.push_back(&in);
  }
  finish();
}

// A group whose one materialized value is only stored, unmasked, by a store later in the same
// region with nothing but scalar work between them, is computed at that store, straight into the
// output (emit_fused_rows): no block-sized stack array and no second pass copying it out.
void Emitter::plan_fused_store(const ir::Region& r, const FusionGroup& group, size_t g) {
  // PALLADIUM_CPU_FUSED_STORE=0 keeps the value in its own array (for comparisons).
  if (const char* env = std::getenv("PALLADIUM_CPU_FUSED_STORE"); env && std::string(env) == "0") return;
  if (group.needs_indices) return;
  ir::ValueId result = -1;
  for (const ir::Inst* m : group.members) {
    const ir::ValueId v = m->results[0];
    if (kind(v) != ValueKind::Tile) continue;
    if (result >= 0 || in_place_.count(v)) return;
    result = v;
  }
  if (result < 0 || users(result).size() != 1) return;
  const ir::Inst* store = users(result)[0];
  if (store->op != ir::Op::Store || parent_.at(store) != &r || store->operands[store->index.size()] != result ||
      (store->i1 & (ir::kHasMask | ir::kGather)))
    return;
  bool between = false;
  for (const ir::Inst& in : r.body) {
    if (&in == store) {
      fused_store_[store] = g;
      deferred_groups_.insert(g);
      return;
    }
    if (&in == group.members.back()) {
      between = true;
      continue;
    }
    if (!between || !live(in)) continue;
    // Scalar work only (the store's indices): nothing that reads or writes memory or a tile.
    if (!in.regions.empty() || ir::op_family(in.op) == ir::Family::Memory || ir::op_family(in.op) == ir::Family::Control ||
        ir::op_family(in.op) == ir::Family::Dot)
      return;
    for (ir::ValueId v : in.results)
      if (!type(v).shape.empty()) return;
  }
}

// A group result yielded as carry k of a loop can be computed straight into the carry's storage
// when the group is the only reader of the old carry and reads it before producing the result
// (each element is read, then overwritten, by the same loop iteration). Saves the yield's copy.
void Emitter::plan_in_place_yields(const ir::Region& r, const FusionGroup& group, size_t g) {
  if (r.body.empty() || r.body.back().op != ir::Op::Yield) return;
  const ir::Inst& yield = r.body.back();
  for (size_t pos = 0; pos < group.members.size(); ++pos) {
    const ir::ValueId result = group.members[pos]->results[0];
    if (kind(result) != ValueKind::Tile) continue;
    for (ir::ValueId arg : r.args) {
      auto carry = carry_args_.find(arg);
      if (carry == carry_args_.end() || carry->second.region != &r) continue;
      if (yield.operands[carry->second.carry] != result || in_place_.count(result)) continue;
      bool safe = !users(arg).empty();
      for (const ir::Inst* u : users(arg)) {
        auto it = group_of_.find(u);
        if (it == group_of_.end() || it->second != g) safe = false;
        for (size_t later = pos + 1; later < group.members.size(); ++later) safe = safe && group.members[later] != u;
      }
      if (safe) in_place_[result] = arg;
    }
  }
}

void Emitter::plan_region(const ir::Region& r) {
  for (const ir::Inst& in : r.body)
    if (live(in) && in.op == ir::Op::Dot) plan_dot(in, r);
  for (const ir::Inst& in : r.body)
    if (live(in))
      for (const ir::Region& inner : in.regions) plan_region(inner);
  plan_groups(r);
  auto plain = [&](ir::ValueId v) {
    if (kinds_[static_cast<size_t>(v)] == ValueKind::Dead)
      kinds_[static_cast<size_t>(v)] = type(v).shape.empty() ? ValueKind::Scalar : ValueKind::Tile;
  };
  for (ir::ValueId a : r.args) plain(a);
  for (const ir::Inst& in : r.body) {
    if (!live(in) || group_of_.count(&in)) continue;
    for (ir::ValueId v : in.results)
      if (!users(v).empty() || ir::op_family(in.op) == ir::Family::Control) plain(v);
  }
}

// ---------------------------------------------------------------------------------------------
// Output helpers

void Emitter::line(const std::string& text) {
  out_.append(static_cast<size_t>(indent_) * 2, ' ');
  out_ += text;
  out_ += '\n';
}

void Emitter::open(const std::string& head) {
  line(head + (head.empty() ? "{" : " {"));
  ++indent_;
}

void Emitter::close(const std::string& tail) {
  --indent_;
  line("}" + tail);
}

std::string Emitter::fresh(const std::string& prefix) { return prefix + std::to_string(next_fresh_++); }

void Emitter::declare_array(const std::string& array, DType dtype, int64_t elements) {
  const int64_t n = std::max<int64_t>(elements, 1);
  line(std::string("alignas(64) ") + compute_type(dtype) + " " + array + "[" + std::to_string(n) + "];");
  frame_bytes_ += n * compute_size(dtype) + 64;
}

void Emitter::declare_tile(ir::ValueId v) { declare_array(name(v), type(v).dtype, numel(type(v).shape)); }

std::string Emitter::root(ir::ValueId v) const {
  auto it = alias_root_.find(v);
  return it == alias_root_.end() ? name(v) : it->second;
}

void Emitter::emit_region(const ir::Region& r) {
  for (const ir::Inst& in : r.body) {
    if (in.op == ir::Op::Yield) return;
    if (!live(in)) continue;
    if (auto g = group_of_.find(&in); g != group_of_.end()) {
      if (groups_[g->second].members.front() == &in && !deferred_groups_.count(g->second)) emit_group(groups_[g->second]);
      continue;
    }
    emit_inst(in);
  }
}

void Emitter::emit_inst(const ir::Inst& in) {
  switch (ir::op_family(in.op)) {
    case ir::Family::Leaf: case ir::Family::Unary: case ir::Family::Binary: case ir::Family::Compare:
    case ir::Family::Select: case ir::Family::Cast:
      if (deferred_dot_.count(&in)) emit_dot_accumulate(in);
      else emit_scalar_op(in);
      return;
    case ir::Family::Layout:
      if (in.op == ir::Op::Reshape) emit_reshape(in);
      else if (in.op == ir::Op::Transpose && kind(in.results[0]) != ValueKind::FoldedTranspose) emit_transpose(in);
      else if (in.op == ir::Op::Broadcast) emit_scalar_op(in);
      return;
    case ir::Family::Reduce: emit_reduce(in); return;
    case ir::Family::Scan: emit_cumsum(in); return;
    case ir::Family::Dot:
      if (kind(in.results[0]) != ValueKind::DeferredDot) emit_dot(in);
      return;
    case ir::Family::Memory:
      if (in.i1 & ir::kGather) {
        emit_gather(in);
        return;
      }
      if (checks_) emit_access_check(in);
      if (in.op == ir::Op::Load) {
        if (kind(in.results[0]) == ValueKind::MatrixView) emit_matrix_view(in);
        else emit_load(in);
      } else if (in.op == ir::Op::Store) {
        emit_store(in);
      } else {
        emit_atomic(in);
      }
      return;
    case ir::Family::Control:
      if (in.op == ir::Op::For) emit_for(in);
      else if (in.op == ir::Op::While) emit_while(in);
      else if (in.op == ir::Op::If) emit_if(in);
      return;
    case ir::Family::Effect: emit_debug_print(in); return;
  }
}

// ---------------------------------------------------------------------------------------------
// The translation unit

GeneratedKernel Emitter::run() {
  // Index definitions, parents and loop-carry arguments.
  auto index = [&](auto& self, const ir::Region& r) -> void {
    for (const ir::Inst& in : r.body) {
      parent_[&in] = &r;
      for (ir::ValueId v : in.results) def_[static_cast<size_t>(v)] = &in;
      if (in.op == ir::Op::For) {
        for (size_t a = 1; a < in.regions[0].args.size(); ++a) carry_args_[in.regions[0].args[a]] = {&in.regions[0], a - 1};
      } else if (in.op == ir::Op::While) {
        for (size_t a = 0; a < in.regions[1].args.size(); ++a) carry_args_[in.regions[1].args[a]] = {&in.regions[1], a};
      }
      for (const ir::Region& inner : in.regions) self(self, inner);
    }
  };
  index(index, kernel_.body);
  mark_live(kernel_.body);
  // Dot plans, fusion groups, and whether each other live value is a scalar or a tile.
  plan_region(kernel_.body);

  indent_ = 1;
  for (size_t i = 0; i < kernel_.refs.size(); ++i) {
    const ir::RefParam& p = kernel_.refs[i];
    const std::string s = storage_type(p.dtype);
    if (p.is_output)
      line(s + "* const " + ref_pointer(static_cast<int>(i)) + " = static_cast<" + s + "*>(launch.refs[" + std::to_string(i) + "]);");
    else
      line("const " + s + "* const " + ref_pointer(static_cast<int>(i)) + " = static_cast<const " + s + "*>(launch.refs[" +
           std::to_string(i) + "]);");
    line("(void)" + ref_pointer(static_cast<int>(i)) + ";");
  }
  const size_t prologue_end = out_.size();
  emit_region(kernel_.body);
  std::string body = out_.substr(prologue_end);
  out_.resize(prologue_end);
  if (gemm_scratch_a_ > 0) {
    declare_array("gemm_scratch_a", DType::float32, gemm_scratch_a_);
    declare_array("gemm_scratch_b", DType::float32, gemm_scratch_b_);
  }
  const std::string prologue = out_;

  std::string src;
  src += "// Generated by Palladium's cpu backend for kernel '" + comment_safe(kernel_.name) + "'. Do not edit.\n";
  src += "// The IR it implements:\n";
  const std::string ir_text = ir::print(kernel_);
  for (size_t pos = 0; pos < ir_text.size();) {
    size_t end = ir_text.find('\n', pos);
    if (end == std::string::npos) end = ir_text.size();
    src += "//   " + comment_safe(ir_text.substr(pos, end - pos)) + "\n";
    pos = end + 1;
  }
  src += "#include \"cpu/palladium_cpu.h\"\n\nnamespace {\n\n";
  src += "__attribute__((noinline)) void run_program(const pl_cpu::Launch& launch, const int64_t* program) {\n";
  src += "  (void)program;\n" + prologue + body + "}\n\n}  // namespace\n\n";
  src += "PL_EXPORT int palladium_cpu_abi_version() { return pl_cpu::kAbiVersion; }\n\n";
  src += "PL_EXPORT void palladium_cpu_run(const pl_cpu::Launch* launch, int64_t begin, int64_t end) {\n";
  // [begin, end) counts the points of the parallel axes; at each, the programs along the
  // sequential axes (if any) run here in grid order, one after another. A kernel that prints runs
  // every program on one worker in plain grid order (cpu_backend.cc), so it reads as the interpreter's.
  const bool chains = kernel_.any_sequential() && prints_.empty();
  src += "  for (int64_t linear = begin; linear < end; ++linear) {\n";
  const size_t rank = kernel_.grid.size();
  src += "    int64_t program[" + std::to_string(std::max<size_t>(rank, 1)) + "] = {0};\n";
  src += "    int64_t rest = linear;\n";
  for (size_t d = rank; d-- > 0;) {
    if (chains && kernel_.is_sequential(d)) continue;
    const std::string g = std::to_string(kernel_.grid[d]);
    src += "    program[" + std::to_string(d) + "] = rest % " + g + ";\n";
    src += "    rest /= " + g + ";\n";
  }
  src += "    (void)rest;\n";
  if (chains) {
    src += "    for (int64_t step = 0; step < " + std::to_string(kernel_.sequential_programs()) + "; ++step) {\n";
    src += "      int64_t srest = step;\n";
    for (size_t d = rank; d-- > 0;) {
      if (!kernel_.is_sequential(d)) continue;
      const std::string g = std::to_string(kernel_.grid[d]);
      src += "      program[" + std::to_string(d) + "] = srest % " + g + ";\n";
      src += "      srest /= " + g + ";\n";
    }
    src += "      run_program(*launch, program);\n    }\n  }\n";
  } else {
    src += "    run_program(*launch, program);\n  }\n";
  }
  if (uses_streaming_stores_) src += "  pl_cpu::store_fence();\n";
  src += "}\n";

  GeneratedKernel out;
  out.source = std::move(src);
  out.frame_bytes = frame_bytes_;
  out.work_items = chains ? kernel_.parallel_programs() : numel(kernel_.grid);
  out.prints = std::move(prints_);
  out.access_sites = std::move(sites_);
  return out;
}

GeneratedKernel generate(const ir::Kernel& kernel, bool checks) { return Emitter(kernel, checks).run(); }

}  // namespace palladium::cpu
