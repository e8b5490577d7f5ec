// Ops that move elements between threads: broadcast, reshape, transpose, reductions, cumsum and
// debug_print. The general rule stages the source as a row-major buffer (shared memory, or the
// value's own scratch buffer), then each result slot reads what it needs, between barriers.
// Register-local fast paths: scalar broadcasts, same-order reshapes, and the rows of mma
// accumulators (broadcast from and reduce to a RowSlice), which use quad shuffles.
#include <algorithm>
#include <cstdlib>

#include "backends/cuda/emitter.h"

namespace palladium::cuda {
namespace {

// sum_i coord[i] * stride[i] as C++ text, skipping zero terms.
std::string flat_index(const std::vector<std::string>& coord, const Shape& shape) {
  const std::vector<int64_t> st = row_major_strides(shape);
  std::string out;
  for (size_t d = 0; d < coord.size(); ++d) {
    if (coord[d] == "0" || shape[d] == 1) continue;
    std::string term = st[d] == 1 ? coord[d] : coord[d] + " * " + std::to_string(st[d]);
    out += (out.empty() ? "" : " + ") + term;
  }
  return out.empty() ? "0" : out;
}

}  // namespace

std::string Emitter::recompute(ir::ValueId v, const std::vector<std::string>& coords, int& budget) const {
  if (--budget < 0) return "";
  // A scalar: every thread holds it (it is in scope here, as it dominates its users).
  if (numel(type(v).shape) == 1 && layout_of(v).kind == LayoutKind::Replicated && !skip_registers.count(v))
    return name(v) + "[0]";
  const ir::Inst* d = def(v);
  if (!d || !d->regions.empty() || d->results.size() != 1 || d->results[0] != v) return "";
  const Shape& shape = type(v).shape;
  switch (ir::op_family(d->op)) {
    case ir::Family::Leaf:
      if (d->op == ir::Op::Const) return literal(type(v).dtype, d->f, d->i0);
      if (d->op == ir::Op::Iota) {
        std::string e = "(" + reg_type(type(v).dtype) + ")(" + coords[static_cast<size_t>(d->i0)] + ")";
        return round_fn(type(v).dtype).empty() ? e : round_fn(type(v).dtype) + "(" + e + ")";
      }
      return "";
    case ir::Family::Unary: case ir::Family::Binary: case ir::Family::Compare: case ir::Family::Select:
    case ir::Family::Cast: {
      if (alias_of.count(v)) return "";
      std::vector<std::string> ops;
      for (ir::ValueId o : d->operands) {
        std::string e = recompute(o, coords, budget);
        if (e.empty()) return "";
        ops.push_back("(" + e + ")");
      }
      return elementwise_expr(*d, ops);
    }
    case ir::Family::Layout: {
      const ir::ValueId x = d->operands[0];
      const Shape& xs = type(x).shape;
      std::vector<std::string> xc(xs.size());
      if (d->op == ir::Op::Broadcast) {
        for (size_t i = 0; i < xs.size(); ++i) xc[i] = xs[i] == 1 ? "0" : coords[static_cast<size_t>(d->ints[i])];
      } else if (d->op == ir::Op::Reshape) {
        const std::string flat = "(" + flat_index(coords, shape) + ")";
        int64_t inner = 1;
        for (size_t i = xs.size(); i-- > 0;) {
          xc[i] = xs[i] == 1 ? "0" : "((" + flat + " / " + std::to_string(inner) + ") % " + std::to_string(xs[i]) + ")";
          inner *= xs[i];
        }
      } else {
        for (size_t i = 0; i < d->ints.size(); ++i) xc[static_cast<size_t>(d->ints[i])] = coords[i];
      }
      return recompute(x, xc, budget);
    }
    default: return "";
  }
}

// result[slot] = buffer_of(source)[flat] where `flat` is C++ text over the result's slot `s`.
void Emitter::emit_gather(ir::ValueId result, ir::ValueId source, const std::vector<std::string>& flat) {
  const Layout& rl = layout_of(result);
  const bool from_registers = layout_of(source).registers();
  if (!from_registers) barrier();  // the source's scratch buffer is complete
  const std::string buf = stage_value(source);
  if (from_registers) barrier();
  declare(result);
  open_slots(rl);
  const std::string v = valid(rl);
  line((v.empty() ? "" : "if (" + v + ") ") + at(result) + " = " + buf + "[" + flat[0] + "];");
  close();
  barrier();  // the staging area (or the source's buffer) may be reused after this
}

namespace {

// Whether two layouts of tiles with the same element count put each row-major element in the same
// thread and slot (a reshape between them moves nothing).
bool same_order(const Layout& rl, const Layout& xl) {
  return (rl.kind == xl.kind && rl.kind == LayoutKind::Strided && rl.vec == xl.vec) ||
         (rl.kind == xl.kind && rl.kind == LayoutKind::Memory) ||
         (rl.kind == xl.kind && rl.kind == LayoutKind::Replicated) ||
         (rl.kind == xl.kind && rl.kind == LayoutKind::RowSlice && rl.shape[0] == xl.shape[0] && rl.warps_m == xl.warps_m);
}

}  // namespace

std::string Emitter::mma_row_slot(const ir::Inst& broadcast) const {
  if (broadcast.op != ir::Op::Broadcast) return "";
  const Layout& rl = layout_of(broadcast.results[0]);
  const Layout& xl = layout_of(broadcast.operands[0]);
  if (xl.kind != LayoutKind::RowSlice || rl.kind != LayoutKind::Mma || broadcast.ints[0] != 0 || rl.warps_n != 1 ||
      rl.warps_m != xl.warps_m || rl.shape[0] != xl.shape[0])
    return "";
  return "((s >> 2) / " + std::to_string(rl.tiles_n) + ") * 2 + ((s >> 1) & 1)";
}

void Emitter::emit_broadcast(const ir::Inst& in) {
  const ir::ValueId r = in.results[0], x = in.operands[0];
  const Layout& rl = layout_of(r);
  const Layout& xl = layout_of(x);
  // A broadcast that only adds dimensions of size 1 (a weight row (n,) as (1, n)) is a reshape.
  {
    const Shape& xs = type(x).shape;
    bool reshape = numel(xs) == numel(type(r).shape);
    int64_t last = -1;
    for (size_t d = 0; d < xs.size() && reshape; ++d) {
      if (xs[d] == 1) continue;
      reshape = in.ints[d] > last;
      last = in.ints[d];
    }
    if (reshape && same_order(rl, xl)) {
      declare(r);
      open_slots(rl);
      line(at(r) + " = " + at(x) + ";");
      close();
      return;
    }
  }
  if (xl.kind == LayoutKind::Replicated) {
    declare(r);
    open_slots(rl);
    line(at(r) + " = " + name(x) + "[0];");
    close();
    return;
  }
  // Rows of an mma accumulator layout: each thread already holds the rows it needs.
  if (const std::string row = mma_row_slot(in); !row.empty()) {
    declare(r);
    open_slots(rl);
    line(at(r) + " = " + name(x) + "[" + row + "];");
    close();
    return;
  }
  if (const ir::Inst* load = reloaded_vector(in)) {
    emit_reloaded_broadcast(in, *load);
    return;
  }
  const Shape& xs = type(x).shape;
  std::vector<std::string> src(xs.size());
  for (size_t d = 0; d < xs.size(); ++d)
    src[d] = xs[d] == 1 ? "0" : coord(rl, static_cast<size_t>(in.ints[d]));
  // Index arithmetic (iota-based masks and positions) is recomputed in the result's layout
  // rather than moved between threads.
  int budget = 24;
  if (std::string e = recompute(x, src, budget); !e.empty()) {
    declare(r);
    open_slots(rl);
    line(at(r) + " = " + e + ";");
    close();
    return;
  }
  emit_gather(r, x, {flat_index(src, xs)});
}

void Emitter::emit_reshape(const ir::Inst& in) {
  const ir::ValueId r = in.results[0], x = in.operands[0];
  // Read only by broadcasts that load the vector again in their own layout: nothing to move.
  const std::vector<const ir::Inst*>& readers = users(r);
  if (!readers.empty() && std::all_of(readers.begin(), readers.end(), [&](const ir::Inst* u) { return reloaded_vector(*u); }))
    return;
  const Layout& rl = layout_of(r);
  const Layout& xl = layout_of(x);
  if (same_order(rl, xl)) {
    declare(r);
    open_slots(rl);
    line(at(r) + " = " + at(x) + ";");
    close();
    return;
  }
  // Index arithmetic is recomputed in the result's layout rather than moved between threads, as in
  // emit_broadcast: the causal mask's key span made a row cost an exchange and two barriers in
  // every iteration of the attention loops. PALLADIUM_CUDA_RECOMPUTE_INDEX=0 exchanges it.
  static const bool recompute_reshapes = [] {
    const char* env = std::getenv("PALLADIUM_CUDA_RECOMPUTE_INDEX");
    return !(env && std::string(env) == "0");
  }();
  std::vector<std::string> coords;
  for (size_t d = 0; d < rl.shape.size(); ++d) coords.push_back(coord(rl, d));
  int budget = 24;
  if (std::string e = recompute_reshapes ? recompute(r, coords, budget) : ""; !e.empty()) {
    declare(r);
    open_slots(rl);
    line(at(r) + " = " + e + ";");
    close();
    return;
  }
  emit_gather(r, x, {elem(rl)});  // row-major order is unchanged: the flat index carries over
}

void Emitter::emit_transpose(const ir::Inst& in) {
  const ir::ValueId r = in.results[0], x = in.operands[0];
  if (folded_transpose.count(r)) return;  // read transposed by the dot that uses it
  const Layout& rl = layout_of(r);
  const Shape& xs = type(x).shape;
  std::vector<std::string> src(xs.size());
  for (size_t d = 0; d < in.ints.size(); ++d) src[static_cast<size_t>(in.ints[d])] = coord(rl, d);
  emit_gather(r, x, {flat_index(src, xs)});
}

namespace {

struct Reduction {
  std::string acc_type, init_first, step, finish;
  bool arg = false;
};

// Accumulation for one reduction op over values `v` at index `k` into `acc` (and `best`).
Reduction reduction_for(ir::Op op, DType t, const std::string& round) {
  Reduction r;
  const std::string T = Emitter::reg_type(t);
  const bool fl = is_float(t);
  r.arg = op == ir::Op::ArgMax || op == ir::Op::ArgMin;
  if (op == ir::Op::ReduceSum) {
    r.acc_type = fl ? T : "pl_i64";
    r.step = "acc += v;";
    r.finish = fl ? (round.empty() ? "acc" : round + "(acc)") : "(" + T + ")acc";
  } else if (op == ir::Op::ReduceMax || op == ir::Op::ReduceMin) {
    r.acc_type = T;
    r.step = std::string("acc = ") + (op == ir::Op::ReduceMax ? "pl_max" : "pl_min") + (fl ? "" : "<" + T + ">") + "(acc, v);";
    r.finish = "acc";
  } else {
    r.acc_type = T;
    r.step = std::string(op == ir::Op::ArgMax ? "pl_argmax_step" : "pl_argmin_step") + "(v, k, acc, best);";
    r.finish = "best";
  }
  return r;
}

}  // namespace

bool Emitter::mma_row_reduce(const ir::Inst& in) const {
  if (ir::op_family(in.op) != ir::Family::Reduce || in.i0 != 1) return false;
  const Layout& rl = layout_of(in.results[0]);
  const Layout& xl = layout_of(in.operands[0]);
  return xl.kind == LayoutKind::Mma && xl.warps_n == 1 && rl.kind == LayoutKind::RowSlice && rl.warps_m == xl.warps_m;
}

void Emitter::emit_reduce(const ir::Inst& in) {
  const ir::ValueId r = in.results[0], x = in.operands[0];
  const int axis = static_cast<int>(in.i0);
  const Layout& rl = layout_of(r);
  const Layout& xl = layout_of(x);
  const DType t = type(x).dtype;
  const Reduction red = reduction_for(in.op, t, round_fn(t));
  const std::string T = reg_type(t);

  // Row reductions of mma accumulators: each thread folds its columns, then its quad (the four
  // lanes holding one row) combines through shuffles. One chain per row: folding into eight
  // partial results, then pairwise, ran no faster in the attention forward (H100, stop 36 job 1,
  // `h100_stop36_job1_attn_tree*` against `_base*`: every row within noise).
  if (mma_row_reduce(in)) {
    const std::string tn = std::to_string(xl.tiles_n);
    // The max (or min) of x * c, c > 0, is the max of x times c, exactly (scaled_exp).
    std::optional<Scaled> scaled;
    if (in.op == ir::Op::ReduceMax || in.op == ir::Op::ReduceMin) scaled = scaled_value(x);
    const bool rescale = scaled && scaled->c > 0 && layout_of(scaled->x).kind == LayoutKind::Mma &&
                         layout_of(scaled->x).id == xl.id;
    const ir::ValueId read = rescale ? scaled->x : x;
    declare(r);
    line("#pragma unroll");
    open("for (int s = 0; s < " + std::to_string(rl.slots) + "; ++s)");
    line("const int tm = s >> 1, h = s & 1;");
    line(red.acc_type + " acc = " + (in.op == ir::Op::ReduceSum ? "0" : name(read) + "[(tm * " + tn + ") * 4 + h * 2]") + ";");
    line("int best = (pl_lane() & 3) * 2;");
    line("(void)best;");
    line("#pragma unroll");
    open("for (int q = 0; q < " + std::to_string(xl.tiles_n * 2) + "; ++q)");
    line("const " + T + " v = " + name(read) + "[(tm * " + tn + " + (q >> 1)) * 4 + h * 2 + (q & 1)];");
    line("const int k = (q >> 1) * 8 + (pl_lane() & 3) * 2 + (q & 1);");
    line("(void)k;");
    line(red.step);
    close();
    line("#pragma unroll");
    open("for (int m = 1; m <= 2; m <<= 1)");
    line("const " + red.acc_type + " v = __shfl_xor_sync(0xffffffffu, acc, m);");
    if (red.arg) {
      line("const int k = __shfl_xor_sync(0xffffffffu, best, m);");
      line(std::string(in.op == ir::Op::ArgMax ? "pl_argmax_merge" : "pl_argmin_merge") + "(v, k, acc, best);");
    } else {
      line(red.step);
    }
    close();
    line(at(r) + " = " + (rescale ? scaled_by(*scaled, red.finish) : red.finish) + ";");
    close();
    return;
  }

  static const bool shared_rows = [] {  // PALLADIUM_CUDA_ROW_REDUCE=0: one thread per result (comparisons)
    const char* env = std::getenv("PALLADIUM_CUDA_ROW_REDUCE");
    return !(env && std::string(env) == "0");
  }();
  const Shape& rs = type(r).shape;
  const int64_t results = numel(rs);
  const bool from_registers = xl.registers();
  const int64_t acc_bytes = red.acc_type == "pl_i64" ? 8 : reg_size(t);

  // One result (a whole row of a one-row block, or a whole tile): each thread folds the elements
  // it holds, the warp combines them through shuffles, then one thread the warps' partials.
  if (shared_rows && results == 1 && from_registers && !red.arg) {
    const std::string warps = std::to_string(threads_ / 32);
    const int64_t part_bytes = (threads_ / 32 * acc_bytes + 15) / 16 * 16, flag_bytes = (threads_ / 32 * 4 + 15) / 16 * 16;
    const std::string part = stage_space(part_bytes, red.acc_type, 0);
    const std::string flag = stage_space(flag_bytes, "int", part_bytes);
    const std::string out = stage_space(16, T, part_bytes + flag_bytes);
    const std::string fold = "if (!pl_has) { acc = v; pl_has = true; } else { " + red.step + " }";
    open("");
    line(red.acc_type + " acc = 0;");
    line("bool pl_has = false;");
    open_slots(xl);
    line("if (!(" + owner(xl) + ")) continue;");
    line("const " + red.acc_type + " v = " + at(x) + ";");
    line(fold);
    close();
    line("#pragma unroll");
    open("for (int m = 16; m >= 1; m >>= 1)");
    line("const " + red.acc_type + " v = __shfl_xor_sync(0xffffffffu, acc, m);");
    line("if (__shfl_xor_sync(0xffffffffu, (int)pl_has, m) != 0) { " + fold + " }");
    close();
    line("if (pl_lane() == 0) { " + part + "[pl_tid() >> 5] = acc; " + flag + "[pl_tid() >> 5] = (int)pl_has; }");
    barrier();
    open("if (pl_tid() == 0)");
    line("pl_has = false;");
    line("for (int j = 0; j < " + warps + "; ++j) if (" + flag + "[j]) { const " + red.acc_type + " v = " + part + "[j]; " +
         fold + " }");
    line(out + "[0] = " + red.finish + ";");
    close();
    close();
    barrier();
    declare(r);
    open_slots(rl);
    line(at(r) + " = " + out + "[0];");
    close();
    barrier();
    return;
  }

  // General: stage, then each result slot walks its row of the source along `axis`.
  const Shape& xs = type(x).shape;
  const std::vector<int64_t> st = row_major_strides(xs);
  if (!from_registers) barrier();
  const std::string buf = stage_value(x);
  if (from_registers) barrier();
  const std::string step = std::to_string(st[static_cast<size_t>(axis)]);
  const std::string len = std::to_string(xs[static_cast<size_t>(axis)]);

  // Few results over long rows (a row statistic of a whole-row block): `group` threads per result,
  // each folding every group-th element, then shuffles within the warp and, for groups of several
  // warps, their partials through shared memory. One thread per result walked 4096-element rows.
  int64_t group = 1;
  while (group * 2 <= xs[static_cast<size_t>(axis)] && results * group * 2 <= threads_) group *= 2;
  if (shared_rows && group >= 8 && !red.arg) {
    const int64_t lanes = std::min<int64_t>(group, 32), warps = group / lanes;
    const int64_t part_offset = staged_bytes(x);
    const int64_t part_bytes = warps > 1 ? (results * warps * acc_bytes + 15) / 16 * 16 : 0;
    const std::string part = warps > 1 ? stage_space(part_bytes, red.acc_type, part_offset) : "";
    const std::string out = stage_space((results * reg_size(t) + 15) / 16 * 16, T, part_offset + part_bytes);
    const std::string g = std::to_string(group), n = std::to_string(results), w = std::to_string(warps);
    open("");
    line("const int pl_re = pl_tid() / " + g + ", pl_rp = pl_tid() % " + g + ";");
    line(red.acc_type + " acc = 0;");
    open("if (pl_re < " + n + ")");
    line("int pl_rr = pl_re;");
    line("(void)pl_rr;");
    std::string base = "0";
    for (size_t d = rs.size(); d-- > 0;) {
      const size_t xd = static_cast<int>(d) < axis ? d : d + 1;
      line("const int pl_c" + std::to_string(d) + " = pl_rr % " + std::to_string(rs[d]) + ";");
      line("pl_rr /= " + std::to_string(rs[d]) + ";");
      base += " + pl_c" + std::to_string(d) + " * " + std::to_string(st[xd]);
    }
    line("const int base = " + base + ";");
    if (in.op == ir::Op::ReduceSum) {
      line("for (int k = pl_rp; k < " + len + "; k += " + g + ") { const " + T + " v = " + buf + "[base + k * " + step +
           "]; " + red.step + " }");
    } else {
      line("acc = " + buf + "[base + pl_rp * " + step + "];");
      line("for (int k = pl_rp + " + g + "; k < " + len + "; k += " + g + ") { const " + T + " v = " + buf + "[base + k * " +
           step + "]; " + red.step + " }");
    }
    close();
    line("#pragma unroll");
    open("for (int m = " + std::to_string(lanes / 2) + "; m >= 1; m >>= 1)");
    line("const " + red.acc_type + " v = __shfl_xor_sync(0xffffffffu, acc, m);");
    line(red.step);
    close();
    if (warps == 1) {
      line("if (pl_rp == 0 && pl_re < " + n + ") " + out + "[pl_re] = " + red.finish + ";");
    } else {
      line("if ((pl_rp & 31) == 0 && pl_re < " + n + ") " + part + "[pl_re * " + w + " + (pl_rp >> 5)] = acc;");
      barrier();
      open("if (pl_tid() < " + n + ")");
      line("acc = " + part + "[pl_tid() * " + w + "];");
      line("for (int j = 1; j < " + w + "; ++j) { const " + red.acc_type + " v = " + part + "[pl_tid() * " + w +
           " + j]; " + red.step + " }");
      line(out + "[pl_tid()] = " + red.finish + ";");
      close();
    }
    close();
    barrier();
    declare(r);
    open_slots(rl);
    std::vector<std::string> coords;
    for (size_t d = 0; d < rs.size(); ++d) coords.push_back(coord(rl, d));
    const std::string v = valid(rl);
    if (!v.empty()) line("if (!(" + v + ")) continue;");
    line(at(r) + " = " + out + "[" + (rs.empty() ? std::string("0") : flat_index(coords, rs)) + "];");
    close();
    barrier();
    return;
  }

  declare(r);
  open_slots(rl);
  std::vector<std::string> src(xs.size());
  for (size_t d = 0, rd = 0; d < xs.size(); ++d) src[d] = static_cast<int>(d) == axis ? "0" : coord(rl, rd++);
  const std::string v = valid(rl);
  if (!v.empty()) line("if (!(" + v + ")) continue;");
  line("const int base = " + flat_index(src, xs) + ";");
  if (in.op == ir::Op::ReduceSum) {
    line(red.acc_type + " acc = 0;");
    line("for (int k = 0; k < " + len + "; ++k) { const " + T + " v = " + buf + "[base + k * " + step + "]; " +
         red.step + " }");
  } else {
    line(red.acc_type + " acc = " + buf + "[base];");
    line("int best = 0;");
    line("(void)best;");
    line("for (int k = 1; k < " + len + "; ++k) { const " + T + " v = " + buf + "[base + k * " + step + "]; " +
         red.step + " }");
  }
  line(at(r) + " = " + red.finish + ";");
  close();
  barrier();
}

void Emitter::emit_cumsum(const ir::Inst& in) {
  const ir::ValueId r = in.results[0], x = in.operands[0];
  const size_t axis = static_cast<size_t>(in.i0);
  const Layout& rl = layout_of(r);
  const DType t = type(x).dtype;
  const Shape& xs = type(x).shape;
  const std::vector<int64_t> st = row_major_strides(xs);
  const bool from_registers = layout_of(x).registers();
  if (!from_registers) barrier();
  const std::string buf = stage_value(x);
  if (from_registers) barrier();
  declare(r);
  open_slots(rl);
  const std::string v = valid(rl);
  if (!v.empty()) line("if (!(" + v + ")) continue;");
  line("const int e = " + elem(rl) + ";");
  line("const int pos = (e / " + std::to_string(st[axis]) + ") % " + std::to_string(xs[axis]) + ";");
  line("const int base = e - pos * " + std::to_string(st[axis]) + ";");
  const std::string acc = is_float(t) ? "double" : "pl_i64";
  line(acc + " acc = 0;");
  line("for (int k = 0; k <= pos; ++k) acc += " + buf + "[base + k * " + std::to_string(st[axis]) + "];");
  std::string out = "(" + reg_type(t) + ")acc";
  if (!round_fn(t).empty()) out = round_fn(t) + "(acc)";
  line(at(r) + " = " + out + ";");
  close();
  barrier();
}

// debug_print: thread 0 appends a record (op, sequence number, program, staged values) to a
// device buffer; the host formats the records after the kernel exactly as the interpreter prints,
// ordered by program (see cuda_backend.cc).
void Emitter::emit_debug_print(const ir::Inst& in) {
  DebugPrintInfo info;
  info.text = in.text;
  std::vector<std::string> bufs;
  int64_t offset = 0, payload = 0;
  barrier();
  for (ir::ValueId v : in.operands) {
    info.operands.push_back(type(v));
    bufs.push_back(stage_value(v, offset));
    offset += staged_bytes(v);
    payload += (numel(type(v).shape) * reg_size(type(v).dtype) + 7) / 8 * 8;
  }
  barrier();
  const int64_t bytes = kDebugRecordHeader + payload;
  open("if (pl_tid() == 0 && pl_debug)");
  line("const unsigned long long off = atomicAdd((unsigned long long*)pl_debug, " + std::to_string(bytes) + "ull);");
  open("if (off + " + std::to_string(bytes) + "ull <= ((unsigned long long*)pl_debug)[1])");
  line("unsigned char* rec = pl_debug + 16 + off;");
  line("((unsigned*)rec)[0] = " + std::to_string(debug_prints_.size()) + "u;");
  line("((unsigned*)rec)[1] = pl_debug_seq;");
  line("((long long*)rec)[1] = pl_linear;");
  int64_t at_byte = kDebugRecordHeader;
  for (size_t i = 0; i < in.operands.size(); ++i) {
    const ir::Type& t = type(in.operands[i]);
    const std::string rt = reg_type(t.dtype);
    line("for (int k = 0; k < " + std::to_string(numel(t.shape)) + "; ++k) ((" + rt + "*)(rec + " +
         std::to_string(at_byte) + "))[k] = " + bufs[i] + "[k];");
    at_byte += (numel(t.shape) * reg_size(t.dtype) + 7) / 8 * 8;
  }
  close();
  line("++pl_debug_seq;");
  close();
  barrier();
  debug_prints_.push_back(std::move(info));
}

}  // namespace palladium::cuda
