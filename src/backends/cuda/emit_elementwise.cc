// Leaves and elementwise ops: every operand has the result's shape, hence its layout, so each
// thread computes its own slots with no data movement. Semantics follow the interpreter
// (eval_elementwise.cc); device/cuda/pl_math.h holds the helpers named here.
#include <cmath>
#include <cstdlib>

#include "backends/common/int_bits.h"
#include "backends/common/libm_ops.h"
#include "backends/cuda/emitter.h"

namespace palladium::cuda {
namespace {

bool is_f32_or_narrower(DType t) { return t == DType::float32 || t == DType::float16 || t == DType::bfloat16; }

std::string call(const std::string& f, const std::string& a) { return f + "(" + a + ")"; }
std::string call(const std::string& f, const std::string& a, const std::string& b) {
  return f + "(" + a + ", " + b + ")";
}

// CompilerParams::fast_math for float32 and narrower: the special-function unit (pl_math.h), and
// division by the full-range approximation (2 ulps, as Triton divides).
std::string fast_float_unary(ir::Op op, const std::string& a) {
  switch (op) {
    case ir::Op::Exp: return call("pl_fast_exp", a);
    case ir::Op::Exp2: return call("pl_fast_exp2", a);
    case ir::Op::Log: return call("pl_fast_log", a);
    case ir::Op::Log2: return call("pl_fast_log2", a);
    case ir::Op::Logistic: return call("pl_fast_logistic", a);
    default: return "";
  }
}

std::string float_unary(ir::Op op, bool single, bool fast, const std::string& a) {
  if (single && fast) {
    if (std::string e = fast_float_unary(op, a); !e.empty()) return e;
  }
  const std::string f = single ? "f" : "";
  if (const char* fn = backend::libm_function(op)) return call(fn + f, a);
  switch (op) {
    case ir::Op::Neg: return "-" + a;
    case ir::Op::Abs: return call("fabs" + f, a);
    case ir::Op::Exp: return call("exp" + f, a);
    case ir::Op::Exp2: return call("exp2" + f, a);
    case ir::Op::Log: return call("log" + f, a);
    case ir::Op::Log2: return call("log2" + f, a);
    case ir::Op::Log1p: return call("log1p" + f, a);
    case ir::Op::Sqrt: return call("sqrt" + f, a);
    case ir::Op::Rsqrt: return call("pl_rsqrt", a);
    case ir::Op::Sin: return call("sin" + f, a);
    case ir::Op::Cos: return call("cos" + f, a);
    case ir::Op::Tanh: return call("tanh" + f, a);
    case ir::Op::Logistic: return call("pl_logistic", a);
    case ir::Op::Erf: return call("erf" + f, a);
    case ir::Op::ErfInv: return call("erfinv" + f, a);
    case ir::Op::Floor: return call("floor" + f, a);
    case ir::Op::Ceil: return call("ceil" + f, a);
    case ir::Op::Sign: {
      const std::string one = single ? "1.0f" : "1.0";
      return "(" + a + " > 0 ? " + one + " : (" + a + " < 0 ? -" + one + " : " + a + "))";
    }
    default: return "";
  }
}

std::string float_binary(ir::Op op, bool single, bool fast, const std::string& a, const std::string& b) {
  const std::string f = single ? "f" : "";
  if (single && fast && op == ir::Op::Div) return call("pl_fast_div", a, b);
  if (const char* fn = backend::libm_function(op)) return call(fn + f, a, b);
  switch (op) {
    case ir::Op::Add: return a + " + " + b;
    case ir::Op::Sub: return a + " - " + b;
    case ir::Op::Mul: return a + " * " + b;
    case ir::Op::Div: return a + " / " + b;
    case ir::Op::Rem: return call("fmod" + f, a, b);
    case ir::Op::Pow: return call("pow" + f, a, b);
    case ir::Op::Max: return call("pl_max", a, b);
    case ir::Op::Min: return call("pl_min", a, b);
    default: return "";
  }
}

std::string int_binary(ir::Op op, DType t, const std::string& a, const std::string& b) {
  const std::string T = Emitter::reg_type(t);
  const bool boolean = t == DType::bool_;
  switch (op) {
    case ir::Op::Add: return call("pl_wadd<" + T + ">", a, b);
    case ir::Op::Sub: return call("pl_wsub<" + T + ">", a, b);
    case ir::Op::Mul: return call("pl_wmul<" + T + ">", a, b);
    case ir::Op::Div: return call("pl_idiv<" + T + ">", a, b);
    case ir::Op::Rem: return call("pl_irem<" + T + ">", a, b);
    case ir::Op::Max: return call("pl_max<" + T + ">", a, b);
    case ir::Op::Min: return call("pl_min<" + T + ">", a, b);
    case ir::Op::And: return boolean ? "(" + a + " && " + b + ")" : "(" + T + ")(" + a + " & " + b + ")";
    case ir::Op::Or: return boolean ? "(" + a + " || " + b + ")" : "(" + T + ")(" + a + " | " + b + ")";
    case ir::Op::Xor: return boolean ? "(" + a + " != " + b + ")" : "(" + T + ")(" + a + " ^ " + b + ")";
    case ir::Op::ShiftLeft: case ir::Op::ShiftRightLogical: case ir::Op::ShiftRightArithmetic:
      return backend::int_bit_expr(op, static_cast<int>(itemsize(t) * 8), T, a, b, "__popcll", "__clzll");
    default: return "";
  }
}

std::string compare(ir::Op op, const std::string& a, const std::string& b) {
  const char* sym = op == ir::Op::Eq ? "==" : op == ir::Op::Ne ? "!=" : op == ir::Op::Lt ? "<"
                    : op == ir::Op::Le ? "<=" : op == ir::Op::Gt ? ">" : ">=";
  return "(" + a + " " + sym + " " + b + ")";
}

}  // namespace

void Emitter::emit_leaf(const ir::Inst& in) {
  const ir::ValueId r = in.results[0];
  const ir::Type& t = type(r);
  const Layout& l = layout_of(r);
  declare(r);
  std::string value;
  switch (in.op) {
    case ir::Op::Const: value = literal(t.dtype, in.f, in.i0); break;
    case ir::Op::ProgramId: value = "pl_pid" + std::to_string(in.i0); break;
    case ir::Op::NumPrograms: value = std::to_string(k_.grid.at(static_cast<size_t>(in.i0))); break;
    case ir::Op::Iota: {
      value = "(" + reg_type(t.dtype) + ")" + coord(l, static_cast<size_t>(in.i0));
      if (!round_fn(t.dtype).empty()) value = round_fn(t.dtype) + "(" + value + ")";
      break;
    }
    default: unsupported(in, "has no rule for this leaf op");
  }
  open_slots(l);
  line(at(r) + " = " + value + ";");
  close();
}

// The C++ expression of an elementwise op over operand expressions `a` (one per operand).
std::string Emitter::elementwise_expr(const ir::Inst& in, const std::vector<std::string>& a) const {
  const DType rt = type(in.results[0]).dtype;
  const DType ot = type(in.operands[0]).dtype;
  std::string e;
  bool needs_round = false;  // 16-bit float results round after the float32 computation
  switch (ir::op_family(in.op)) {
    case ir::Family::Unary:
      if (is_float(ot)) {
        e = float_unary(in.op, is_f32_or_narrower(ot), params_.fast_math, a[0]);
        needs_round = true;
      } else if (in.op == ir::Op::Not) {
        e = ot == DType::bool_ ? "!" + a[0] : "(" + reg_type(ot) + ")~" + a[0];
      } else if (in.op == ir::Op::Neg) {
        e = call("pl_wneg<" + reg_type(ot) + ">", a[0]);
      } else if (in.op == ir::Op::Abs) {
        e = call("pl_wabs<" + reg_type(ot) + ">", a[0]);
      } else if (in.op == ir::Op::PopulationCount || in.op == ir::Op::Clz) {
        e = backend::int_bit_expr(in.op, static_cast<int>(itemsize(ot) * 8), reg_type(ot), a[0], "", "__popcll",
                                  "(int)__clzll");
      } else if (in.op == ir::Op::Sign) {
        e = "(" + reg_type(ot) + ")((" + a[0] + " > 0) - (" + a[0] + " < 0))";
      }
      break;
    case ir::Family::Binary:
      if (is_float(ot)) {
        e = float_binary(in.op, is_f32_or_narrower(ot), params_.fast_math, a[0], a[1]);
        needs_round = true;
      } else {
        e = int_binary(in.op, ot, a[0], a[1]);
      }
      break;
    case ir::Family::Compare: e = compare(in.op, a[0], a[1]); break;
    case ir::Family::Select: e = "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")"; break;
    case ir::Family::Cast:
      if (in.op == ir::Op::BitcastConvert) {  // through the memory representations (16-bit floats are float in registers)
        auto bits = [](DType t, const std::string& r) {
          return t == DType::float16 ? "pl_f_to_f16(" + r + ")" : t == DType::bfloat16 ? "pl_f_to_bf16(" + r + ")" : r;
        };
        const std::string m = "pl_bitcast<" + mem_type(rt) + ">(" + bits(ot, a[0]) + ")";
        e = rt == DType::float16 ? "pl_f16_to_f(" + m + ")" : rt == DType::bfloat16 ? "pl_bf16_to_f(" + m + ")" : m;
      } else if (rt == DType::bool_) {
        e = "(" + a[0] + " != 0)";
      } else if (is_float(rt)) {
        if (!round_fn(rt).empty()) {
          // Straight to the 16-bit type from the source (double or 64-bit integers keep one rounding).
          const bool wide = ot == DType::float64 || ot == DType::int64;
          e = round_fn(rt) + "(" + std::string(wide ? "(double)" : "(float)") + a[0] + ")";
        } else {
          e = "(" + reg_type(rt) + ")" + a[0];
        }
      } else if (is_float(ot)) {
        e = call("pl_f2i<" + reg_type(rt) + ">", a[0]);
      } else {
        e = "(" + reg_type(rt) + ")" + a[0];
      }
      break;
    default: break;
  }
  if (e.empty()) unsupported(in, std::string("has no rule for ") + dtype_name(ot) + " operands");
  if (needs_round && !round_fn(rt).empty()) e = round_fn(rt) + "(" + e + ")";
  return e;
}

// Folding the softmax's scale (PALLADIUM_CUDA_FOLD_SCALE=0 turns it off). The seed's attention
// computes s = dot * scale, m = max(s), exp(s - m): per score a multiply, a subtract, the fast
// exp's multiply by log2(e) and the exp2 unit. With fast_math, exp(x * c - b) for a constant c is
// exp2(fma(x, c log2e, -b log2e)), FlashAttention-3's one instruction before the exp2 unit, and the
// row max reads x too (emit_reduce: max(x * c) = max(x) * c exactly, for c > 0, rounding being
// monotonic), so x * c is left without readers and its multiply goes. fast_math's exp already
// errs by |x| 6e-8 relative (its argument's product with log2e is rounded); this form errs by
// (|x c| + |b|) 6e-8, the operands rounded before they cancel. b log2e is clamped to the float
// range (per row: b is a broadcast row value), so that rows whose max lies beyond
// -FLT_MAX / log2e (stop 38 job 4: the seed's mask value, -0.7 FLT_MAX, when this form was applied
// to every exp) get finite exponents, not 2^inf and NaN. A guard that sent rows beyond |b| 1024
// to x * c - b rounded as the interpreter does cost more than the form saved (a per-thread branch
// duplicating the exp loop: stop 39 job 1, H100, d64 s2048 blocks 128 x 128 0.663/0.669 ms ->
// 0.749/0.740, and spills in the head_dim 128 producer kernels). PALLADIUM_CUDA_EXP2_FOLD=0 keeps
// stop 38's exp(fma(x, c, -b)).
bool fold_scale_enabled() {
  const char* env = std::getenv("PALLADIUM_CUDA_FOLD_SCALE");
  return !(env && std::string(env) == "0");
}
bool exp2_fold_enabled() {
  const char* env = std::getenv("PALLADIUM_CUDA_EXP2_FOLD");
  return !(env && std::string(env) == "0");
}

std::optional<double> Emitter::constant_factor(ir::ValueId v, ir::ValueId* x) const {
  const ir::Inst* mul = def(v);
  if (!fold_scale_enabled() || !mul || mul->op != ir::Op::Mul || type(v).dtype != DType::float32) return std::nullopt;
  for (int side : {0, 1}) {
    const ir::Inst* c = def(mul->operands[static_cast<size_t>(side)]);
    const ir::ValueId other = mul->operands[static_cast<size_t>(1 - side)];
    if (c && c->op == ir::Op::Const && std::isfinite(c->f) && type(other).dtype == DType::float32 &&
        layout_of(other).registers()) {
      *x = other;
      return c->f;
    }
  }
  return std::nullopt;
}

std::optional<std::pair<ir::ValueId, ir::ValueId>> Emitter::exp_of_difference(const ir::Inst& in) const {
  if (!fold_scale_enabled() || !params_.fast_math || in.op != ir::Op::Exp || type(in.results[0]).dtype != DType::float32)
    return std::nullopt;
  const ir::Inst* sub = def(in.operands[0]);
  if (!sub || sub->op != ir::Op::Sub) return std::nullopt;
  const ir::ValueId b = sub->operands[1];
  if (type(b).dtype != DType::float32 || !layout_of(b).registers()) return std::nullopt;
  return std::pair{sub->operands[0], b};
}

std::optional<Emitter::Scaled> Emitter::scaled_value(ir::ValueId v) const {
  if (const auto lazy = lazy_scaled_.find(v); lazy != lazy_scaled_.end())
    return Scaled{v, lazy->second.c, lazy->second.flag, lazy->second.exp2_rows};
  ir::ValueId x = v;
  if (const std::optional<double> c = constant_factor(v, &x)) return Scaled{x, *c, ""};
  return std::nullopt;
}

std::string Emitter::scaled_by(const Scaled& s, const std::string& v) const {
  const std::string c = literal(DType::float32, s.c, 0);
  return s.flag.empty() ? v + " * " + c : s.flag + " ? " + v + " * " + c + " : " + v;
}

std::optional<Emitter::ScaledExp> Emitter::scaled_exp(const ir::Inst& in) const {
  const auto d = exp_of_difference(in);
  if (!d) return std::nullopt;
  const std::optional<Scaled> a = scaled_value(d->first);
  if (!a) return std::nullopt;
  return ScaledExp{*a, d->second};
}

// A lazily scaled select's exp: exp(fma(s, flag ? c : 1, -b)) kept the subtraction exact in the
// mixed blocks, but its fast exp multiplies by log2(e) once more, 64 FMULs a thread and iteration
// in the causal forward's loop (Nsight Compute, stop 50 job 56: the head_dim 64 loop issued 501
// instructions a warp and iteration, 100 of them FMUL). Where b is a row vector broadcast over the
// scores' mma rows, the exp2 form's factor and b log2(e) are chosen once a row
// (pl_lazy_exp2_row, pl_math.h: exact for a wholly masked row's max) and each score is one FFMA
// and the exp2 unit. Chosen per score instead (the same helper inlined into the score loop), the
// rows' work was not shared between their scores and the producer kernels ran 20-40% slower (stop
// 50 job 57). Not in a loop whose dots hold more than 128 accumulator registers a thread
// (find_lazy_scales): there the rows' factors tipped the head_dim 128 backward (192) into an
// injected wgmma wait (C7517). PALLADIUM_CUDA_LAZY_EXP2=0 keeps the old form everywhere; so does
// PALLADIUM_CUDA_EXP2_FOLD=0.
void Emitter::emit_scaled_exp(const ir::Inst& in, const ScaledExp& f) {
  const ir::ValueId r = in.results[0];
  const std::string c = literal(DType::float32, f.a.c, 0), c_log2e = literal(DType::float32, f.a.c * 1.4426950408889634, 0);
  const ir::Inst* b_def = def(f.b);
  const std::string row = b_def && f.a.exp2_rows && exp2_fold_enabled() ? mma_row_slot(*b_def) : "";
  const std::string k = "pl_k" + std::to_string(r), bt = "pl_bt" + std::to_string(r);
  if (!row.empty()) {
    const ir::ValueId b = b_def->operands[0];
    const std::string rows = std::to_string(layout_of(b).slots);
    line("float " + k + "[" + rows + "], " + bt + "[" + rows + "];");
    open_slots(layout_of(b));
    line("pl_lazy_exp2_row(" + at(b) + ", " + f.a.flag + ", " + c_log2e + ", " + k + "[s], " + bt + "[s]);");
    close();
  }
  declare(r);
  open_slots(layout_of(r));
  if (!row.empty())
    line(at(r) + " = pl_fast_exp2(fmaf(" + at(f.a.x) + ", " + k + "[" + row + "], -" + bt + "[" + row + "]));");
  else if (!exp2_fold_enabled() || !f.a.flag.empty())
    line(at(r) + " = " + fast_float_unary(ir::Op::Exp, "fmaf(" + at(f.a.x) + ", " +
                                           (f.a.flag.empty() ? c : f.a.flag + " ? " + c + " : 1.0f") + ", -" + at(f.b) + ")") + ";");
  else
    line(at(r) + " = pl_fast_exp2(fmaf(" + at(f.a.x) + ", " + c_log2e + ", -pl_scaled_log2e(" + at(f.b) + ")));");
  close();
}

void Emitter::emit_elementwise(const ir::Inst& in) {
  const ir::ValueId r = in.results[0];
  if (alias_of.count(r)) return;  // an add folded into its dot's accumulator (emit_dot.cc)
  if (uniform_selects_.count(&in)) return emit_uniform_select(in);
  if (lazy_muls_.count(&in)) return;  // x * c of a lazily scaled select, in its mixed branch (lazy_scale.cc)
  if (const std::optional<ScaledExp> f = scaled_exp(in)) return emit_scaled_exp(in, *f);
  std::vector<std::string> a;
  for (ir::ValueId v : in.operands) a.push_back(at(v));
  declare(r);
  open_slots(layout_of(r));
  line(at(r) + " = " + elementwise_expr(in, a) + ";");
  close();
}

}  // namespace palladium::cuda
