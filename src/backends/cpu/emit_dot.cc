// cpu codegen: dot. float32 results (float16/bfloat16/float32 operands) go through the library's
// precompiled GEMM (Launch::gemm_f32, device/cpu/gemm.h); float64 and integer products through
// gemm.h's plain loop.
//
// Copies are avoided where the IR allows: an operand loaded from an input ref only for this dot
// is packed straight from the array (MatrixView), a 2-D transpose feeding only this dot becomes a
// stride swap (FoldedTranspose), a dot whose only user stores it writes the output array
// directly, and `acc + dot(a, b)` accumulates into acc's copy (into the loop-carried buffer
// itself when acc is a loop carry used nowhere else).
#include <algorithm>

#include "backends/cpu/emitter.h"
#include "device/cpu/gemm.h"

namespace palladium::cpu {

namespace {

bool is_f32_dot(DType operand) { return operand == DType::float16 || operand == DType::bfloat16 || operand == DType::float32; }

}  // namespace

void Emitter::plan_dot(const ir::Inst& dot, const ir::Region& region) {
  for (ir::ValueId u : dot.operands) {
    ir::ValueId w = u;
    const ir::Inst* d = def_[static_cast<size_t>(u)];
    if (d && d->op == ir::Op::Transpose && users(u).size() == 1) {
      kinds_[static_cast<size_t>(u)] = ValueKind::FoldedTranspose;
      w = d->operands[0];
    }
    const ir::Inst* load = def_[static_cast<size_t>(w)];
    // Inputs only: they never change during the call, so reading at the dot equals reading at the load.
    if (load && load->op == ir::Op::Load && load->i1 == 0 && users(w).size() == 1 &&
        !kernel_.refs[static_cast<size_t>(load->i0)].is_output)
      kinds_[static_cast<size_t>(w)] = ValueKind::MatrixView;
  }
  const ir::ValueId r = dot.results[0];
  if (users(r).size() != 1 || type(r).dtype != DType::float32) return;
  const ir::Inst* user = users(r)[0];
  if (parent_.at(user) != &region) return;  // computing it elsewhere could change how often it runs
  if (user->op == ir::Op::Store) {
    const bool value_is_dot = user->operands[user->index.size()] == r;
    if (value_is_dot && !(user->i1 & (ir::kHasMask | ir::kGather)) && kernel_.refs[static_cast<size_t>(user->i0)].dtype == DType::float32) {
      kinds_[static_cast<size_t>(r)] = ValueKind::DeferredDot;
      deferred_dot_[user] = &dot;
    }
  } else if (user->op == ir::Op::Add && user->operands[0] != user->operands[1]) {
    kinds_[static_cast<size_t>(r)] = ValueKind::DeferredDot;
    deferred_dot_[user] = &dot;
    const ir::ValueId acc = user->operands[0] == r ? user->operands[1] : user->operands[0];
    auto carry = carry_args_.find(acc);
    if (carry != carry_args_.end() && users(acc).size() == 1) {
      const ir::Inst& yield = carry->second.region->body.back();
      if (yield.operands[carry->second.carry] == user->results[0]) in_place_[user->results[0]] = acc;
    }
  }
}

std::string Emitter::matrix_operand(ir::ValueId v, bool transposed) const {
  if (kind(v) == ValueKind::FoldedTranspose) {
    v = def_[static_cast<size_t>(v)]->operands[0];
    transposed = !transposed;
  }
  if (kind(v) == ValueKind::MatrixView) return transposed ? "pl_cpu::transpose(" + name(v) + ")" : name(v);
  const Shape& s = type(v).shape;
  return std::string("pl_cpu::dense_in<") + compute_type(type(v).dtype) + ">(" + name(v) + ", " + std::to_string(s[0]) +
         ", " + std::to_string(s[1]) + ", " + (transposed ? "true" : "false") + ")";
}

void Emitter::emit_gemm(const ir::Inst& dot, const std::string& out, bool accumulate) {
  const Shape& rs = type(dot.results[0]).shape;
  const Shape& as = type(dot.operands[0]).shape;
  const int64_t m = rs[0], n = rs[1], k = dot.i0 ? as[0] : as[1];
  const DType operand = type(dot.operands[0]).dtype;
  const std::string a = matrix_operand(dot.operands[0], dot.i0 != 0);
  const std::string b = matrix_operand(dot.operands[1], dot.i1 != 0);
  const std::string sizes = std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k);
  const std::string acc = accumulate ? "true" : "false";
  if (is_f32_dot(operand)) {
    gemm_scratch_a_ = std::max(gemm_scratch_a_, pl_cpu::gemm_packed_a_floats(m, k));
    gemm_scratch_b_ = std::max(gemm_scratch_b_, pl_cpu::gemm_packed_b_floats(n, k));
    line("pl_cpu::gemm_f32(launch, " + a + ", " + b + ", " + out + ", " + sizes + ", " + acc + ", gemm_scratch_a, gemm_scratch_b);");
  } else {
    // float64 accumulates in double; integers in int64, wrapped to the result width on the store.
    const char* accumulator = operand == DType::float64 ? "double" : "int64_t";
    line(std::string("pl_cpu::gemm_simple<") + accumulator + ">(" + a + ", " + b + ", " + out + ", " + sizes + ", " + acc + ");");
  }
}

void Emitter::emit_dot(const ir::Inst& in) {
  const ir::ValueId r = in.results[0];
  const Shape& s = type(r).shape;
  declare_tile(r);
  emit_gemm(in, std::string("pl_cpu::dense_out<") + compute_type(type(r).dtype) + ">(" + name(r) + ", " +
                    std::to_string(s[0]) + ", " + std::to_string(s[1]) + ")",
            false);
}

void Emitter::emit_dot_accumulate(const ir::Inst& add) {
  const ir::Inst& dot = *deferred_dot_.at(&add);
  const ir::ValueId r = add.results[0];
  const ir::ValueId acc = add.operands[0] == dot.results[0] ? add.operands[1] : add.operands[0];
  const Shape& s = type(r).shape;
  if (auto it = in_place_.find(r); it != in_place_.end()) {
    line("float* const " + name(r) + " = " + name(acc) + ";  // accumulates into the loop-carried buffer");
    alias_root_[r] = root(acc);
  } else {
    declare_tile(r);
    line("pl_cpu::copy(" + name(r) + ", " + name(acc) + ", " + std::to_string(numel(s)) + ");");
  }
  emit_gemm(dot, "pl_cpu::dense_out<float>(" + name(r) + ", " + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ")", true);
}

}  // namespace palladium::cpu
