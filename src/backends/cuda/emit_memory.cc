// Loads, stores and atomics on ref blocks. Each slot computes its element's position in the
// block (index starts + coordinate * stride), adds the block origin (from the index_map), and
// checks it against the array: padding reads yield 0 (or `other` where masked off), padding
// writes are dropped, as the interpreter's edge-block rule says.
#include <algorithm>
#include <cstdlib>

#include "backends/cuda/emitter.h"

namespace palladium::cuda {
namespace {

std::string to_register(DType t, const std::string& mem) {
  switch (t) {
    case DType::bool_: return "(" + mem + " != 0)";
    case DType::float16: return "pl_f16_to_f(" + mem + ")";
    case DType::bfloat16: return "pl_bf16_to_f(" + mem + ")";
    default: return mem;
  }
}

std::string to_memory(DType t, const std::string& reg) {
  switch (t) {
    case DType::bool_: return "(pl_u8)(" + reg + " ? 1 : 0)";
    case DType::float16: return "pl_f_to_f16(" + reg + ")";
    case DType::bfloat16: return "pl_f_to_bf16(" + reg + ")";
    default: return reg;
  }
}

// One element loaded into (or stored from) register `reg` at `offset` where `ok` holds; a load
// yields `fallback` elsewhere.
std::string element_access(bool load, DType t, const std::string& ptr, const std::string& offset, const std::string& ok,
                           const std::string& reg, const std::string& fallback) {
  const std::string mem = ptr + "[" + offset + "]";
  if (load) return reg + " = (" + ok + ") ? " + to_register(t, mem) + " : " + fallback + ";";
  return "if (" + ok + ") " + mem + " = " + to_memory(t, reg) + ";";
}

// Where one element of an access lands: per array dimension its global index expression,
// the bounds condition and the flat offset. `coord(j)` gives the value's coordinate j.
struct Address {
  std::vector<std::string> lines;  // declarations, inside the slot loop
  std::string in_bounds;           // condition
  std::string offset;              // flat element offset into the array
};

}  // namespace

static Address address_of(const Emitter& e, const ir::Inst& in, const std::function<std::string(size_t)>& coord) {
  const ir::RefParam& p = e.k_.refs.at(static_cast<size_t>(in.i0));
  const std::vector<int64_t> astride = row_major_strides(p.array_shape);
  const bool wide = numel(p.array_shape) > (int64_t{1} << 31) - 1;
  const std::string it = wide ? "long long" : "int";
  Address a;
  std::vector<std::string> global(p.array_shape.size());
  size_t ref_dim = 0, value_dim = 0;
  for (size_t ad = 0; ad < p.array_shape.size(); ++ad) {
    const std::string origin = e.name(p.origin[ad]) + "[0]";
    if (p.squeezed[ad]) {
      global[ad] = "(" + it + ")" + origin;
      continue;
    }
    const ir::IndexEntry& ix = in.index[ref_dim];
    std::string local = ix.gather ? e.at(in.operands[ref_dim]) : e.name(in.operands[ref_dim]) + "[0]";  // a gather: this slot's own index
    if (!ix.scalar && !ix.gather) {
      std::string c = coord(value_dim++);
      if (ix.stride != 1) c = "(" + c + ") * " + std::to_string(ix.stride);
      local = local + " + " + c;
    }
    global[ad] = "(" + it + ")" + origin + " + (" + local + ")";
    ++ref_dim;
  }
  std::string off;
  for (size_t ad = 0; ad < global.size(); ++ad) {
    const std::string g = "pl_g" + std::to_string(ad);
    a.lines.push_back("const " + it + " " + g + " = " + global[ad] + ";");
    a.in_bounds += (a.in_bounds.empty() ? "" : " && ") + g + " >= 0 && " + g + " < " + std::to_string(p.array_shape[ad]);
    off += (off.empty() ? "" : " + ") + (astride[ad] == 1 ? g : g + " * " + std::to_string(astride[ad]));
  }
  a.in_bounds = a.in_bounds.empty() ? "true" : a.in_bounds;
  a.offset = off.empty() ? "0" : off;
  return a;
}

// Whether the group of k elements from `a` (along the array's innermost dimension) lies inside the
// array and starts `bytes`-aligned at `where`: then it is one wide access.
static std::string whole_group(const ir::RefParam& p, const Address& a, const std::string& where, int k, int64_t bytes) {
  return "(" + a.in_bounds + ") && pl_g" + std::to_string(p.array_shape.size() - 1) + " + " + std::to_string(k - 1) +
         " < " + std::to_string(p.array_shape.back()) + " && (((unsigned long long)(" + where + ")) & " +
         std::to_string(bytes - 1) + ") == 0";
}

void Emitter::emit_memory(const ir::Inst& in) {
  const int ref = static_cast<int>(in.i0);
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(ref));
  const size_t rank = in.index.size();
  size_t next = rank;
  const ir::ValueId value = in.op == ir::Op::Load ? -1 : in.operands[next++];
  const ir::ValueId mask = (in.i1 & ir::kHasMask) ? in.operands[next++] : -1;
  const ir::ValueId other = (in.i1 & ir::kHasOther) ? in.operands[next++] : -1;
  if (params_.checks) emit_access_check(in);
  if (outputs_loaded_.count(ref)) barrier();  // order this access after other threads' earlier ones

  if (in.op == ir::Op::Load && skip_registers.count(in.results[0])) {
    emit_smem_load(in, smem_home.at(in.results[0]));
    return;
  }
  const ir::ValueId shaped = in.op == ir::Op::Store ? value : in.results[0];
  const Layout& l = layout_of(shaped);
  const std::string ptr = "pl_ref" + std::to_string(ref);
  if (in.op != ir::Op::Store) declare(in.results[0]);
  if (mask < 0 && bulk_reduction(in)) {
    emit_bulk_reduction(in, l, value);
    return;
  }
  if ((in.op == ir::Op::Load || in.op == ir::Op::Store || paired_reduction(in)) && mask < 0 &&
      emit_vector_memory(in, l, value))
    return;
  open_slots(l);
  const std::string v = valid(l);
  if (!v.empty()) line("if (!(" + v + ")) continue;");
  Address a = address_of(*this, in, [&](size_t j) { return coord(l, j); });
  for (const std::string& s : a.lines) line(s);
  std::string ok = a.in_bounds;
  if (mask >= 0) ok = at(mask) + " && " + ok;
  const DType t = p.dtype;
  if (in.op == ir::Op::Load) {
    const std::string fallback = other >= 0 ? at(other) : "(" + reg_type(t) + ")0";
    line(element_access(true, t, ptr, a.offset, ok, at(in.results[0]), fallback));
  } else if (in.op == ir::Op::Store) {
    if (l.replicated) ok = owner(l) + " && " + ok;
    line(element_access(false, t, ptr, a.offset, ok, at(value), ""));
  } else {
    if (l.replicated) ok = owner(l) + " && " + ok;
    const std::string fn = std::string("pl_") + ir::op_name(in.op);  // pl_atomic_add, ... (device/cuda/pl_atomics.h)
    // atomic_cas: `value` is the comparand and the stored value follows it.
    const std::string args = at(value) + (in.op == ir::Op::AtomicCas ? ", " + at(in.operands[rank + 1]) : std::string());
    line(at(in.results[0]) + " = (" + ok + ") ? " + fn + "(&" + ptr + "[" + a.offset + "], " + args + ") : (" +
         reg_type(t) + ")0;");
  }
  close();
  // Atomics on a tile several threads hold: only the owner updated memory; share its old values.
  if (in.op != ir::Op::Load && in.op != ir::Op::Store && l.replicated && uses(in.results[0]) > 0) {
    const std::string buf = stage_value(in.results[0]);
    barrier();
    open_slots(l);
    line(at(in.results[0]) + " = " + buf + "[" + elem(l) + "];");
    close();
    barrier();
  }
}

const ir::Inst* Emitter::reloaded_vector(const ir::Inst& broadcast) const {
  // With the transposed products only (their opt-in switch), so that the default kernels stay
  // those measured; any reader of a reshape is asked.
  if (broadcast.op != ir::Op::Broadcast || !transposed_products_on()) return nullptr;
  const ir::ValueId r = broadcast.results[0], x = broadcast.operands[0];
  const ir::Inst* reshape = def(x);
  if (!reshape || reshape->op != ir::Op::Reshape) return nullptr;
  int64_t long_dims = 0;
  for (int64_t n : type(x).shape) long_dims += n != 1;
  if (long_dims > 1) return nullptr;
  const ir::Inst* load = def(reshape->operands[0]);
  if (!load || load->op != ir::Op::Load || (load->i1 & (ir::kHasMask | ir::kGather)) ||
      type(load->results[0]).shape.size() != 1 || skip_registers.count(load->results[0]))
    return nullptr;
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(load->i0));
  if (p.is_output || written_refs_.count(static_cast<int>(load->i0))) return nullptr;
  const Layout& rl = layout_of(r);
  const Layout& xl = layout_of(x);
  // Only where the vector's own layout differs from the one the reshape needs (rows of an mma
  // tile broadcast from a RowSlice cost nothing and keep that path).
  if (rl.kind != LayoutKind::Mma || xl.kind == LayoutKind::RowSlice || xl.kind == LayoutKind::Replicated) return nullptr;
  return load;
}

void Emitter::emit_reloaded_broadcast(const ir::Inst& broadcast, const ir::Inst& load) {
  const ir::ValueId r = broadcast.results[0], x = broadcast.operands[0];
  const Layout& rl = layout_of(r);
  const Shape& xs = type(x).shape;
  // The element of the [1, n] (or [n, 1]) tile, which is the vector's: its one dimension not of size 1.
  std::string flat = "0";
  for (size_t d = 0; d < xs.size(); ++d)
    if (xs[d] != 1) flat = coord(rl, static_cast<size_t>(broadcast.ints[d]));
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(load.i0));
  // Slots s and s ^ 2 of an mma tile hold one column in rows r and r + 8: a vector broadcast
  // down the columns is loaded once per column.
  const bool by_column = xs.size() == 2 && xs[0] == 1 && broadcast.ints[1] == 1;
  declare(r);
  open_slots(rl);
  if (by_column) line("if (s & 2) { " + at(r) + " = " + name(r) + "[s ^ 2]; continue; }");
  Address a = address_of(*this, load, [&](size_t) { return flat; });
  for (const std::string& s : a.lines) line(s);
  line(element_access(true, p.dtype, "pl_ref" + std::to_string(load.i0), a.offset, a.in_bounds, at(r),
                      "(" + reg_type(p.dtype) + ")0"));
  close();
}

// A float32 atomic add whose old values nobody reads, on sm_90: an accumulator's adjacent pairs
// go out as one red.global.add.v2.f32 each (the attention backward's dq: half the reductions).
// PALLADIUM_CUDA_WHOLE_TILE_REDUCTIONS=0: each pair of a paired reduction tested on its own
// (emit_whole_tile_reduction). Read at each generation (tests set it).
static bool whole_tile_reductions_on() {
  const char* env = std::getenv("PALLADIUM_CUDA_WHOLE_TILE_REDUCTIONS");
  return !(env && std::string(env) == "0");
}

bool Emitter::paired_reduction(const ir::Inst& in) const {
  return in.op == ir::Op::AtomicAdd && target_.sm >= 90 && quiet_update(in) &&
         k_.refs.at(static_cast<size_t>(in.i0)).dtype == DType::float32 && layout_of(in.results[0]).kind == LayoutKind::Mma;
}

// PALLADIUM_CUDA_BULK_REDUCE=1: float32 mma tiles added to memory through shared memory and TMA
// bulk reductions (emit_bulk_reduction). Read at each generation (tests set it).
static bool bulk_reductions_on() {
  const char* env = std::getenv("PALLADIUM_CUDA_BULK_REDUCE");
  return env && std::string(env) == "1";
}

// Bytes of the shared staging rows of a bulk reduction of `l`: 8 floats of padding per row put
// the float2 stores of a half warp (four rows, four lanes) in distinct banks.
static int64_t bulk_stage_bytes(const Layout& l) { return l.shape[0] * (l.shape[1] + 8) * 4; }

bool Emitter::bulk_reduction(const ir::Inst& in) const {
  if (!paired_reduction(in) || !bulk_reductions_on() || (in.i1 & ir::kGather) || k_.any_sequential()) return false;
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(in.i0));
  // Written through the async proxy: no other access to the ref in this kernel may need its values.
  if (outputs_loaded_.count(static_cast<int>(in.i0))) return false;
  const Layout& l = layout_of(in.results[0]);
  if (l.shape.size() != 2 || l.shape[1] % 4 != 0) return false;
  const std::vector<ValueDim> dims = value_dims(in, p);
  if (dims.size() != 2 || dims[1].gather || dims[1].stride != 1 || dims[1].array_dim + 1 != p.array_shape.size())
    return false;
  // Its own shared memory beside the homes, the exchange area's headroom and the TMA's barriers
  // (planned before emission; the 8 bytes cover run()'s alignment of the barriers).
  const int64_t need = smem_homes_bytes_ + std::max<int64_t>(smem_stage_bytes_, kExchangeHeadroom) +
                       std::max(bulk_stage_bytes_, bulk_stage_bytes(l)) + tma_barrier_bytes() + 8;
  return need <= target_.max_shared_bytes - kSharedReserve;
}

// A float32 mma tile added into rows of memory whose innermost dimension it covers contiguously,
// as FlashAttention-3 adds the backward's dq: the threads write it to shared memory, and each row
// goes out as one TMA bulk reduction (cp.reduce.async.bulk .add.f32), whole lines at L2 where the
// v2 reductions arrive a 32-byte sector per request (H200, stop 43 job 3: the atomic-dq backward's
// L2 at 81.6% of its peak). Rows outside the array or not 16-byte aligned are added element by
// element from shared memory. The staging rows are rewritten only after their last reduction has
// read them (wait_group.read before the barrier), and every thread waits for its reductions to
// complete before the kernel ends. Opt-in: in that backward (job 4) it cut L2's requests 201M ->
// 88M but ran 2.42 -> 2.81 ms, the staging rows costing a block per SM and its two block-wide
// barriers per iteration stalling the warps; reduced by warp (job 5) it won the causal d64 row
// against the pairs (1.898 vs 2.086 ms fwd+bwd) and lost the others (d128 s2048 3.443 vs 3.078).
void Emitter::emit_bulk_reduction(const ir::Inst& in, const Layout& l, ir::ValueId value) {
  touched_shared_ = true;
  bulk_stage_bytes_ = std::max(bulk_stage_bytes_, bulk_stage_bytes(l));
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(in.i0));
  const int64_t rows = l.shape[0], cols = l.shape[1], stride = cols + 8;
  const std::string ptr = "pl_ref" + std::to_string(in.i0), L = "pl_L" + std::to_string(l.id);
  const std::string stage = "((float*)pl_bulk_s)";
  // Where each warp holds whole rows (warps side by side in rows only), it stages and reduces its
  // own rows, synchronised within the warp: no block-wide barrier.
  const int64_t warp_rows = rows / l.warps_m;
  const bool by_warp = l.warps_n == 1 && warp_rows <= 32 && warp_rows == 16 * int64_t{l.tiles_m};
  auto sync = [&] {
    if (by_warp) line("__syncwarp();");
    else barrier();
  };
  line("// bulk reduction into pl_ref" + std::to_string(in.i0) + ": the staging rows, then a TMA reduction per row" +
       (by_warp ? " (each warp its own rows)" : ""));
  line("pl_bulk_wait_read();");
  sync();
  line("#pragma unroll");
  open("for (int s = 0; s < " + std::to_string(l.slots) + "; s += 2)");
  line("*(float2*)&" + stage + "[" + L + "_row(s) * " + std::to_string(stride) + " + " + L + "_col(s)] = make_float2(" +
       name(value) + "[s], " + name(value) + "[s + 1]);");
  close();
  line("pl_fence_proxy_async();");
  sync();
  if (by_warp) {
    open("if (pl_lane() < " + std::to_string(warp_rows) + ")");
    line("const int pl_r = pl_warp() * " + std::to_string(warp_rows) + " + pl_lane();");
  } else {
    open("for (int pl_r = pl_tid(); pl_r < " + std::to_string(rows) + "; pl_r += " + std::to_string(threads_) + ")");
  }
  line("const float* pl_row = " + stage + " + pl_r * " + std::to_string(stride) + ";");
  const Address a = address_of(*this, in, [](size_t j) { return j == 0 ? std::string("pl_r") : std::string("0"); });
  for (const std::string& s : a.lines) line(s);
  const std::string where = ptr + " + (" + a.offset + ")";
  open("if (" + whole_group(p, a, where, static_cast<int>(cols), 16) + ")");
  line("pl_bulk_reduce_add((float*)(" + where + "), pl_row, " + std::to_string(cols * 4) + "u);");
  close("} else {");
  ++indent_;
  open("for (int pl_c = 0; pl_c < " + std::to_string(cols) + "; ++pl_c)");
  const Address e = address_of(*this, in, [](size_t j) { return j == 0 ? std::string("pl_r") : std::string("pl_c"); });
  for (const std::string& s : e.lines) line(s);
  line("if (" + e.in_bounds + ") (void)pl_atomic_add(&" + ptr + "[" + e.offset + "], pl_row[pl_c]);");
  close();
  close();
  close();
  line("pl_bulk_commit();");
}

bool Emitter::emit_vector_memory(const ir::Inst& in, const Layout& l, ir::ValueId value) {
  // PALLADIUM_CUDA_VECTOR_ACCESS=0 keeps every access element by element (for comparisons).
  static const bool enabled = [] {
    const char* env = std::getenv("PALLADIUM_CUDA_VECTOR_ACCESS");
    return !(env && std::string(env) == "0");
  }();
  // Strided tiles access l.vec consecutive elements per group; an mma accumulator's slots s and
  // s + 1 (s even) are the two adjacent columns of one row (pl_L*_col), so its groups are pairs:
  // a bf16 output written as 4-byte words, a float32 one as 8-byte ones.
  const bool mma_pairs = l.kind == LayoutKind::Mma;
  const int64_t group = mma_pairs ? 2 : l.vec;
  if (!enabled || (l.kind != LayoutKind::Strided && !mma_pairs) || group < 2 || l.replicated || (in.i1 & ir::kGather))
    return false;
  // Not inside loops: the branch between the wide and the element-wise access keeps the compiler
  // from issuing a later iteration's loads early, and a sequential loop (a scan's time steps) then
  // waits a full memory latency per step (the jitted IndRNN scan on an H100: 0.106 -> 0.255 ms).
  // A reduction is not waited on, so it pairs inside loops too.
  const bool reduction = paired_reduction(in);
  for (ir::ValueId v : in.operands)
    if (loop_depth_of(v) > 0 && !reduction) return false;
  for (ir::ValueId v : in.results)
    if (loop_depth_of(v) > 0 && !reduction) return false;
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(in.i0));
  // The value's last dimension must walk the array's innermost dimension with unit stride.
  size_t ref_dim = 0, value_dims = 0, last_array_dim = SIZE_MAX;
  int64_t last_stride = 0;
  bool even_outer_steps = true;  // every step along a value dimension but the last moves an even number of elements
  const std::vector<int64_t> astride = row_major_strides(p.array_shape);
  for (size_t ad = 0; ad < p.array_shape.size(); ++ad) {
    if (p.squeezed[ad]) continue;
    const ir::IndexEntry& ix = in.index[ref_dim++];
    if (ix.gather) return false;
    if (ix.scalar) continue;
    if (value_dims > 0) even_outer_steps = even_outer_steps && (astride[last_array_dim] * last_stride) % 2 == 0;
    ++value_dims;
    last_array_dim = ad;
    last_stride = ix.stride;
  }
  if (value_dims != l.shape.size() || last_array_dim + 1 != p.array_shape.size() || last_stride != 1) return false;
  const DType t = p.dtype;
  const int64_t size = static_cast<int64_t>(itemsize(t));
  const int k = static_cast<int>(std::min<int64_t>(group, 16 / size));  // elements per access
  // A stored 16-bit value rounded from float32 is stored from that float32 source: rounding once
  // more is the same rounding, and the cast is then dead code.
  const ir::ValueId stored =
      in.op == ir::Op::Store && is_16bit_float(t) && type(value).dtype == t ? pack_source(value) : value;
  if (in.op == ir::Op::Store && mma_pairs && is_16bit_float(t) && l.shape.size() == 2 && l.tiles_n % 4 == 0 &&
      threads_ >= 256 && quad_stores_enabled()) {
    emit_quad_store(in, l, stored);
    return true;
  }
  const int64_t bytes = size * k;
  if (bytes < 4 || group % k != 0) return false;
  const std::string vt = bytes == 16 ? "uint4" : bytes == 8 ? "uint2" : "unsigned";
  const std::string mt = mem_type(t);
  const std::string ptr = "pl_ref" + std::to_string(in.i0);
  const bool whole_tile = reduction && k == 2 && even_outer_steps && valid(l).empty() && whole_tile_reductions_on();
  if (whole_tile) emit_whole_tile_reduction(in, l, value);
  line("#pragma unroll");
  open("for (int s = 0; s < " + std::to_string(l.slots) + "; s += " + std::to_string(k) + ")");
  if (const std::string v = valid(l); !v.empty()) line("if (!(" + v + ")) continue;");  // whole groups
  Address a = address_of(*this, in, [&](size_t j) { return coord(l, j); });
  for (const std::string& s : a.lines) line(s);
  const std::string where = ptr + " + (" + a.offset + ")";
  open("if (" + whole_group(p, a, where, k, bytes) + ")");
  if (in.op == ir::Op::Load) {
    const std::string load = p.is_output ? "*(const " + vt + "*)(" + where + ")" : "__ldg((const " + vt + "*)(" + where + "))";
    line("const " + vt + " pl_w = " + load + ";");
    line("const " + mt + "* pl_e = (const " + mt + "*)&pl_w;");
    line("#pragma unroll");
    line("for (int j = 0; j < " + std::to_string(k) + "; ++j) " + name(in.results[0]) + "[s + j] = " + to_register(t, "pl_e[j]") + ";");
  } else if (reduction) {
    line("pl_red_add_pair((float*)(" + where + "), " + name(value) + "[s], " + name(value) + "[s + 1]);");
  } else if (is_16bit_float(t) && k % 2 == 0) {
    // 16-bit floats go out in pairs packed by one conversion each (cvt.rn.bf16x2.f32), from the
    // cast's float32 source where the value is one (pack_source): a matmul's epilogue had rounded
    // each element, widened it back and rounded it again in integer arithmetic before packing.
    // H100, stop 37 job 4, same binary (through a switch since removed), two rounds: the bf16
    // matmul 4096^3 (128 x 256 tiles, 4 stages) 0.204/0.202 -> 0.200/0.199 ms, 31.3M -> 27.1M
    // instructions, tensor pipes 80.0% -> 81.6% busy; 8192^3 (3 stages) 1.452/1.467 -> 1.439/1.436.
    const std::string pack = pack_function(t);
    line(vt + " pl_w;");
    line("unsigned* pl_p = (unsigned*)&pl_w;");
    line("#pragma unroll");
    line("for (int j = 0; j < " + std::to_string(k / 2) + "; ++j) pl_p[j] = " + pack + "(" + name(stored) +
         "[s + 2 * j], " + name(stored) + "[s + 2 * j + 1]);");
    line("*(" + vt + "*)(" + where + ") = pl_w;");
  } else {
    line(vt + " pl_w;");
    line(mt + "* pl_e = (" + mt + "*)&pl_w;");
    line("#pragma unroll");
    line("for (int j = 0; j < " + std::to_string(k) + "; ++j) pl_e[j] = " + to_memory(t, name(value) + "[s + j]") + ";");
    line("*(" + vt + "*)(" + where + ") = pl_w;");
  }
  close("} else {");
  ++indent_;
  // At an edge or a misaligned address: each element with its own check (the scalar code, its
  // slot renamed s). (Deciding once per block that the whole tile is inside and aligned, then
  // accessing with no test per group, measured no faster for loads and stores: H100, stop 36 job
  // 6, matmul epilogues and the attention forward's within noise, `h100_stop36_job6_*`. For paired
  // reductions in a loop it pays, and is done: emit_whole_tile_reduction.)
  line("const int pl_s0 = s;");
  line("#pragma unroll");
  open("for (int j = 0; j < " + std::to_string(k) + "; ++j)");
  line("const int s = pl_s0 + j;");
  Address e = address_of(*this, in, [&](size_t j) { return coord(l, j); });
  for (const std::string& s : e.lines) line(s);
  const bool load = in.op == ir::Op::Load;
  if (reduction)
    line("if (" + e.in_bounds + ") (void)pl_atomic_add(&" + ptr + "[" + e.offset + "], " + at(value) + ");");
  else
    line(element_access(load, t, ptr, e.offset, e.in_bounds, at(load ? in.results[0] : stored), "(" + reg_type(t) + ")0"));
  close();
  close();
  close();
  if (whole_tile) {  // the else branch and the scope emit_whole_tile_reduction opened
    close();
    close();
  }
  return true;
}

// A paired float32 reduction (the atomic-dq backward's dq += ds k, in its loop) decided once for
// the whole tile: its first and last elements inside the array and its first pair 8-byte aligned
// (every pair then is: the caller checked that the steps between rows are even, and a pair's
// column is even, the tiles being 8 columns wide). Then each pair is one red.global.add.v2.f32
// with no test; otherwise (an edge or a misaligned block) the caller's per-pair code, whose bounds
// tests and branches took 10-12 instructions a pair. H200, stop 46 job 31, same binary,
// PALLADIUM_CUDA_WHOLE_TILE_REDUCTIONS=0 -> default, fwd+bwd ms: atomic dq d128 block 64 s2048
// 3.160 -> 3.066, causal 1.840 -> 1.784, s8192 11.072 -> 10.946, causal 5.917 -> 5.724; d64 block
// 64 3.396 -> 3.293, 2.084 -> 1.962, 12.088 -> 11.729, 6.750 -> 6.328; d64 block 128 within 1%.
// Opens `{ bool pl_whole; ... if (pl_whole) {...} else {` (a scope of its own, so that several
// reductions may stand in one block): the caller closes both.
void Emitter::emit_whole_tile_reduction(const ir::Inst& in, const Layout& l, ir::ValueId value) {
  const std::string ptr = "pl_ref" + std::to_string(in.i0);
  open("");
  line("bool pl_whole;");
  open("");
  const Address first = address_of(*this, in, [](size_t) { return std::string("0"); });
  for (const std::string& s : first.lines) line(s);
  line("pl_whole = (" + first.in_bounds + ") && (((unsigned long long)(" + ptr + " + (" + first.offset + "))) & 7) == 0;");
  close();
  open("");
  const Address last = address_of(*this, in, [&](size_t j) { return std::to_string(l.shape[j] - 1); });
  for (const std::string& s : last.lines) line(s);
  line("pl_whole = pl_whole && (" + last.in_bounds + ");");
  close();
  open("if (pl_whole)");
  line("#pragma unroll");
  open("for (int s = 0; s < " + std::to_string(l.slots) + "; s += 2)");
  const Address a = address_of(*this, in, [&](size_t j) { return coord(l, j); });
  for (const std::string& s : a.lines) line(s);
  line("pl_red_add_pair((float*)(" + ptr + " + (" + a.offset + ")), " + name(value) + "[s], " + name(value) + "[s + 1]);");
  close();
  close("} else {");
  ++indent_;
}

// A 16-bit mma accumulator stored 16 bytes a thread. The four threads of a quad hold one row's
// column pairs of four adjacent 8-column groups; transposed within the quad (two rounds of
// shuffles), each holds one group's eight columns. A warp then writes 64 contiguous bytes of each
// of its 8 rows per instruction, a quarter of the 4-byte stores: a matmul's epilogue had its warps
// waiting on those stores' queue (long-scoreboard stalls on the address registers, 15% of the
// 4096^3 bf16 matmul's warp samples; Nsight Compute, H100, stop 37 job 5). Same binary, job 6,
// two rounds: the matmul 4096^3 0.201/0.200 -> 0.179/0.178 ms (cuBLASLt 0.177), 8192^3
// 1.468/1.477 -> 1.398/1.395 (3 stages); the attention forward 1-7% faster, one round (d128
// s2048 0.518 -> 0.501, causal 0.337 -> 0.313; s8192 0.7-2.3%).
// Only in kernels of two or more warpgroups. In the attention backward (one warpgroup, several
// programs to an SM, whose loops cover each other's stores) the transpose's registers made ptxas
// recompute the d128 first loop's swizzled tile addresses each iteration, 529 -> 558 instructions
// (637 -> 682 causal), and stop 36's build ran its forward+backward d128 s8192 8.57/8.51 ms
// against 9.06/8.90 (job 9, two builds in one job).
// PALLADIUM_CUDA_QUAD_STORE=0 stores 4-byte pairs instead.
bool Emitter::quad_stores_enabled() {
  const char* env = std::getenv("PALLADIUM_CUDA_QUAD_STORE");
  return !(env && std::string(env) == "0");
}

void Emitter::emit_quad_store(const ir::Inst& in, const Layout& l, ir::ValueId stored) {
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(in.i0));
  const std::string L = "pl_L" + std::to_string(l.id), ptr = "pl_ref" + std::to_string(in.i0);
  const std::string pack = pack_function(p.dtype);
  const std::string src = name(stored), quads = std::to_string(l.tiles_n / 4), tiles_n = std::to_string(l.tiles_n);
  line("#pragma unroll");
  // Each round: one row tile's half (pl_h) of four column tiles from pl_t0; word i from tile pl_t0 + i.
  open("for (int pl_r = 0; pl_r < " + std::to_string(l.slots / 8) + "; ++pl_r)");
  line("const int pl_h = pl_r & 1, pl_t0 = ((pl_r >> 1) / " + quads + ") * " + tiles_n + " + ((pl_r >> 1) % " + quads +
       ") * 4;");
  line("unsigned pl_w[4];");
  line("#pragma unroll");
  line("for (int i = 0; i < 4; ++i) pl_w[i] = " + pack + "(" + src + "[4 * (pl_t0 + i) + 2 * pl_h], " + src +
       "[4 * (pl_t0 + i) + 2 * pl_h + 1]);");
  // Transpose the quad's 4 x 4 words: swap the off-diagonal 2 x 2 blocks (lanes 2 apart), then the
  // off-diagonal words within each block (lanes 1 apart).
  for (int bit : {2, 1}) {
    const std::string b = "((pl_lane() & " + std::to_string(bit) + ") != 0)";
    for (int j = 0; j < 2; ++j) {
      // A pair of words `bit` apart: the lane with the bit set sends the lower and takes the
      // partner's upper into it; the other lane sends the upper and takes into it.
      const int lower = bit == 2 ? j : 2 * j, upper = lower + bit;
      const std::string lo = "pl_w[" + std::to_string(lower) + "]", hi = "pl_w[" + std::to_string(upper) + "]";
      open("");
      line("const unsigned pl_u = __shfl_xor_sync(0xffffffffu, " + b + " ? " + lo + " : " + hi + ", " +
           std::to_string(bit) + ");");
      line("if (" + b + ") " + lo + " = pl_u; else " + hi + " = pl_u;");
      close();
    }
  }
  // This thread's group: column tile pl_t0 + (lane & 3), its eight columns from the group's first.
  const std::string col0 = "(" + L + "_col(4 * (pl_t0 + (pl_lane() & 3)) + 2 * pl_h) - (pl_lane() & 3) * 2)";
  auto at_column = [&](const std::string& offset) {
    return address_of(*this, in, [&](size_t j) { return j == 0 ? L + "_row(4 * pl_t0 + 2 * pl_h)" : "(" + col0 + offset + ")"; });
  };
  const Address a = at_column("");
  for (const std::string& s : a.lines) line(s);
  const std::string where = ptr + " + (" + a.offset + ")";
  open("if (" + whole_group(p, a, where, 8, 16) + ")");
  line("*(uint4*)(" + where + ") = make_uint4(pl_w[0], pl_w[1], pl_w[2], pl_w[3]);");
  close("} else {");
  ++indent_;
  line("#pragma unroll");
  open("for (int pl_e = 0; pl_e < 8; ++pl_e)");
  const Address e = at_column(" + pl_e");
  for (const std::string& s : e.lines) line(s);
  line("if (" + e.in_bounds + ") " + ptr + "[" + e.offset + "] = (" + mem_type(p.dtype) +
       ")(pl_w[pl_e >> 1] >> (16 * (pl_e & 1)));");
  close();
  close();
  close();
}

std::vector<ValueDim> value_dims(const ir::Inst& in, const ir::RefParam& p) {
  std::vector<ValueDim> out;
  size_t ref_dim = 0;
  for (size_t ad = 0; ad < p.array_shape.size(); ++ad) {
    if (p.squeezed[ad]) continue;
    const ir::IndexEntry& ix = in.index[ref_dim++];
    if (!ix.scalar) out.push_back({ad, ix.stride, ix.gather});
  }
  return out;
}

// A 16-bit tile loaded straight into its shared-memory home: 16-byte chunks through cp.async
// where the row is contiguous, aligned and in bounds, element by element (zero padding) elsewhere.
void Emitter::emit_home_fill(const ir::Inst& in, const SmemTile& tile, const std::string& home) {
  touched_shared_ = true;
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(in.i0));
  const int64_t rows = tile.rows, cols = tile.cols;
  // Is the value's dimension 1 the array's innermost dimension, with unit stride?
  const std::vector<ValueDim> dims = value_dims(in, p);
  const bool contiguous = dims.size() > 1 && dims[1].stride == 1 && dims[1].array_dim == p.array_shape.size() - 1 &&
                          cols % 8 == 0;
  const std::string ptr = "pl_ref" + std::to_string(in.i0);
  // Element offset between consecutive rows of the tile (array stride of the value's dimension 0
  // times its index stride).
  const int64_t row_step = dims.empty() ? 0 : row_major_strides(p.array_shape)[dims[0].array_dim] * dims[0].stride;
  if (contiguous && row_step % 8 == 0) {
    // The whole tile inside the array and 16-byte aligned (the common, interior case): one
    // cp.async per chunk with no per-chunk checks.
    const int64_t chunks = rows * cols / 8;
    line("long long pl_base = 0;");
    line("bool pl_inside = true;");
    for (int corner = 0; corner < 2; ++corner) {
      const std::string r = corner ? std::to_string(rows - 1) : "0", c = corner ? std::to_string(cols - 1) : "0";
      Address a = address_of(*this, in, [&](size_t j) { return j == 0 ? r : c; });
      open("");
      for (const std::string& l : a.lines) line(l);
      line("pl_inside = pl_inside && (" + a.in_bounds + ");");
      if (!corner) line("pl_base = " + a.offset + ";");
      close();
    }
    open("if (pl_inside && (pl_base & 7) == 0)");
    const std::string per = std::to_string(cols / 8);
    if (chunks % threads_ == 0) {
      line("#pragma unroll");
      open("for (int j = 0; j < " + std::to_string(chunks / threads_) + "; ++j)");
      line("const int q = pl_tid() + j * " + std::to_string(threads_) + ";");
    } else {
      open("for (int q = pl_tid(); q < " + std::to_string(chunks) + "; q += " + std::to_string(threads_) + ")");
    }
    line("const int r = q / " + per + ", c = (q % " + per + ") * 8;");
    const std::string dst = tile.swizzled ? "(char*)(" + home + ") + pl_swz_chunk(r, c >> 3, " + std::to_string(rows) + ")"
                                          : home + " + r * " + std::to_string(tile.row_stride()) + " + c";
    line("pl_cp_async16(" + dst + ", " + ptr + " + pl_base + (long long)r * " + std::to_string(row_step) + " + c, 16);");
    close();
    close("} else {");
    ++indent_;
  }
  if (contiguous) {
    const int64_t chunks = rows * cols / 8;
    open("for (int q = pl_tid(); q < " + std::to_string(chunks) + "; q += " + std::to_string(threads_) + ")");
    line("const int r = q / " + std::to_string(cols / 8) + ", c = (q % " + std::to_string(cols / 8) + ") * 8;");
    Address a = address_of(*this, in, [](size_t j) { return j == 0 ? std::string("r") : std::string("c"); });
    for (const std::string& s : a.lines) line(s);
    const std::string last = "pl_g" + std::to_string(p.array_shape.size() - 1);
    line("pl_u16* dst = " + (tile.swizzled ? "(pl_u16*)((char*)(" + home + ") + pl_swz_chunk(r, c >> 3, " + std::to_string(rows) + "))"
                                             : home + " + r * " + std::to_string(tile.row_stride()) + " + c") + ";");
    line("const long long off = " + a.offset + ";");
    open("if ((" + a.in_bounds + ") && " + last + " + 7 < " + std::to_string(p.array_shape.back()) + " && (off & 7) == 0)");
    line("pl_cp_async16(dst, " + ptr + " + off, 16);");
    close("} else {");
    ++indent_;
    open("for (int j = 0; j < 8; ++j)");
    Address aj = address_of(*this, in, [](size_t j) { return j == 0 ? std::string("r") : std::string("(c + j)"); });
    for (const std::string& s : aj.lines) line(s);
    line("dst[j] = (" + aj.in_bounds + ") ? " + ptr + "[" + aj.offset + "] : (pl_u16)0;");
    close();
    close();
    close();
    if (row_step % 8 == 0) close();  // the checked path of the interior test
  } else {
    open("for (int q = pl_tid(); q < " + std::to_string(rows * cols) + "; q += " + std::to_string(threads_) + ")");
    line("const int r = q / " + std::to_string(cols) + ", c = q % " + std::to_string(cols) + ";");
    Address a = address_of(*this, in, [](size_t j) { return j == 0 ? std::string("r") : std::string("c"); });
    for (const std::string& s : a.lines) line(s);
    const std::string dst = tile.swizzled ? "*(pl_u16*)((char*)(" + home + ") + pl_swz_offset(r, c, " + std::to_string(rows) + "))"
                                          : home + "[r * " + std::to_string(tile.row_stride()) + " + c]";
    line(dst + " = (" + a.in_bounds + ") ? " + ptr + "[" + a.offset + "] : (pl_u16)0;");
    close();
  }
}

std::string Emitter::home_expr(ir::ValueId v) const {
  if (auto it = home_override_.find(v); it != home_override_.end()) return it->second;
  if (prefetch.count(v)) return "pl_home" + std::to_string(v);
  return "((pl_u16*)(pl_smem + " + std::to_string(smem_home.at(v).offset) + "))";
}

// The load's index instructions re-emitted for loop index `index` (their values renamed), then
// the copy into `dst`.
void Emitter::emit_prefetch_issue(const ir::Inst& in, const std::string& index, const std::string& dst) {
  touched_shared_ = true;
  const ir::ValueId v = in.results[0];
  const Prefetch& p = prefetch.at(v);
  const ir::Region& body = p.loop->regions[0];
  open("");
  line("const " + reg_type(type(body.args[0]).dtype) + " pl_ix[1] = {" + index + "};");
  std::vector<ir::ValueId> renamed{body.args[0]};
  name_override_[body.args[0]] = "pl_ix";
  for (const ir::Inst* d : p.slice)
    for (ir::ValueId r : d->results) {
      name_override_[r] = name(r) + "_nx";
      renamed.push_back(r);
    }
  for (const ir::Inst* d : p.slice) emit_inst_body(*d);
  if (tma_loads_.count(v)) emit_tma_issue(in, dst);
  else emit_home_fill(in, smem_home.at(v), dst);
  for (ir::ValueId r : renamed) name_override_.erase(r);
  close();
}

// The prefetched loads of a loop, in body order.
std::vector<const ir::Inst*> Emitter::prefetched_loads(const ir::Inst& loop) const {
  std::vector<const ir::Inst*> out;
  for (const ir::Inst& in : loop.regions[0].body)
    if (in.op == ir::Op::Load && prefetch.count(in.results[0])) out.push_back(&in);
  return out;
}

std::string Emitter::home_buffer(ir::ValueId v, const std::string& iteration) const {
  const SmemTile& tile = smem_home.at(v);
  return "((pl_u16*)(pl_smem + " + std::to_string(tile.offset) + ")) + " + ring_slot(*prefetch.at(v).loop, iteration) +
         " * " + std::to_string(tile.bytes() / 2);
}

// Slots at a count of three took ptxas nine uniform instructions each (a 16-bit multiply-shift
// remainder, twice in every iteration of the head_dim 64 forward's loop); carried, a compare and
// a select: that loop 323 -> 316 instructions, the forward about 1% faster without the mask (H200,
// stop 47 job 38, three rounds). Powers of two stay a remainder (a mask).
bool Emitter::carries_slot(const ir::Inst& loop) const {
  const char* env = std::getenv("PALLADIUM_CUDA_CARRIED_SLOTS");
  return !(env && std::string(env) == "0") && (stages_ & (stages_ - 1)) != 0 && !prefetched_loads(loop).empty() &&
         !producer_serves(loop);
}

std::string Emitter::ring_slot(const ir::Inst& loop, const std::string& iteration) const {
  if (auto it = carried_slot_.find(&loop); it != carried_slot_.end()) {
    const std::string i = name(loop.regions[0].args[0]) + "[0]", s = it->second, n = std::to_string(stages_);
    if (iteration == i) return "((int)" + s + ")";
    for (int k = 1; k < stages_; ++k)
      if (iteration == i + " + " + std::to_string(k)) {
        const std::string sum = "(" + s + " + " + std::to_string(k) + "u)";
        return "((int)(" + sum + " >= " + n + "u ? " + sum + " - " + n + "u : " + sum + "))";
      }
  }
  std::string n = iteration + " - " + name(loop.operands[0]) + "[0]";
  if (producer_serves(loop)) n = "pl_base" + std::to_string(tma_ring(loop)->index) + " + " + n;
  return "((" + n + ") % " + std::to_string(stages_) + ")";
}

int Emitter::prefetch_distance(const ir::Inst& loop) const { return stages_ - (pipelined_loop(loop) ? 2 : 1); }

void Emitter::emit_prefetch_round(const ir::Inst& loop, const std::string& var, const std::string& iteration, int group) {
  const std::string hi = name(loop.operands[1]) + "[0]";
  const TmaRing* ring = tma_ring(loop);
  const bool split = ring && ring->split;
  PL_ASSERT(!split || group >= 0, "a split ring's round goes out by groups");
  open("");
  line("const " + reg_type(type(loop.regions[0].args[0]).dtype) + " " + var + " = " + iteration + ";");
  open("if (" + var + " < " + hi + ")");
  // A carried slot is known for the iteration as the counter writes it (i + k), not for `var`.
  const std::string slot_of = carried_slot_.count(&loop) ? iteration : var;
  if (ring) {  // the arrival with the round's byte count goes before its copies
    const int64_t bytes = split ? ring->group_bytes[group] : ring->bytes;
    line("unsigned long long* const pl_bar = &pl_full" + std::to_string(barrier_set(loop, group)) + "[" +
         ring_slot(loop, slot_of) + "];");
    line("if (" + tma_issuer_ + ") pl_mbar_expect_tx(pl_bar, " + std::to_string(bytes) + "u);");
  }
  for (const ir::Inst* in : prefetched_loads(loop))
    if (!split || load_group(loop, *in) == group) emit_prefetch_issue(*in, var, home_buffer(in->results[0], slot_of));
  close();
  close();
  if (!ring || ring->cp_async) line("pl_cp_async_commit();");
}

// The cp.async rounds are committed in iteration order, so at most distance - 1 younger ones may
// stay in flight; the TMA copies complete on their slot's barrier, in the phase whose parity the
// slot's bit holds.
void Emitter::emit_prefetch_wait(const ir::Inst& loop, const std::string& iteration, int group) {
  const TmaRing* ring = tma_ring(loop);
  PL_ASSERT(!ring || !ring->split || group >= 0, "a split ring's rounds are awaited by groups");
  if (!ring || ring->cp_async) line("pl_cp_async_wait<" + std::to_string(prefetch_distance(loop) - 1) + ">();");
  if (ring) {
    const std::string r = std::to_string(barrier_set(loop, group));
    open("if (" + iteration + " < " + name(loop.operands[1]) + "[0])");  // past the end no round was issued
    line("const int pl_s = (int)" + ring_slot(loop, iteration) + ";");
    line("pl_mbar_wait(&pl_full" + r + "[pl_s], (pl_phase" + r + " >> pl_s) & 1u);");
    line("pl_phase" + r + " ^= 1u << pl_s;");
    close();
  }
  // cp.async writes -> tensor-core reads (the TMA's writes are the async proxy's own)
  if (!wgmma_dots_.empty() && (!ring || ring->cp_async)) line("pl_fence_proxy_async();");
  // Served by the producer warp, each thread's own wait makes the tiles visible to it, and the
  // slots come back through the empty barriers, not a block-wide barrier.
  if (producer_serves(loop)) touched_shared_ = true;
  else barrier();
}

// One cp.async.bulk.tensor per 64-column block of the tile, at the block's origin (coordinates
// innermost first; the copy fills with zeros wherever the box leaves the array).
void Emitter::emit_tma_issue(const ir::Inst& in, const std::string& dst) {
  touched_shared_ = true;
  const TmaLoad& t = tma_loads_.at(in.results[0]);
  const SmemTile& tile = smem_home.at(in.results[0]);
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(in.i0));
  const size_t rank = p.array_shape.size();
  Address a = address_of(*this, in, [](size_t) { return std::string("0"); });
  // Shared by the cluster's two blocks (emit_cluster.cc): box j of loop index i goes out from the
  // block of rank (i + j) % 2, into both.
  const bool multicast = multicast_.count(in.results[0]) > 0;
  line("// a tile of pl_ref" + std::to_string(in.i0) + " through pl_tmap" + std::to_string(t.map) +
       (multicast ? ", half of its boxes from each block of the cluster, into both" : ""));
  open("if (" + tma_issuer_ + ")");
  for (const std::string& l : a.lines) line(l);
  for (int64_t j = 0; j < tile.cols / 64; ++j) {
    std::string call = "pl_tma_load_" + std::string(multicast ? "multicast_" : "") + std::to_string(rank) + "d((char*)(" +
                       dst + ") + " + std::to_string(j * tile.rows * 128) + ", &pl_tmap" + std::to_string(t.map);
    for (size_t i = 0; i < rank; ++i) {
      const size_t ad = rank - 1 - i;
      call += ", (int)pl_g" + std::to_string(ad) + (ad == rank - 1 && j > 0 ? " + " + std::to_string(64 * j) : "");
    }
    if (multicast)
      line("if ((((unsigned)pl_ix[0] + " + std::to_string(j) + "u) & 1u) == pl_cta_rank) " + call + ", pl_bar, 3);");
    else
      line(call + ", pl_bar);");
  }
  close();
}

// Before a loop: the rounds of its first prefetch_distance() iterations.
void Emitter::emit_loop_prologue(const ir::Inst& loop) {
  if (prefetched_loads(loop).empty()) return;
  // In a loop, the previous run of this one may still have warps reading the ring's buffers.
  if (loop_depth_of(loop.regions[0].args[0]) > 1) barrier();
  const std::string lo = name(loop.operands[0]) + "[0]";
  if (!producer_serves(loop))
    for (int j = 0; j < prefetch_distance(loop); ++j) emit_prefetch_round(loop, "pl_pre", lo + " + " + std::to_string(j));
  emit_tma_home_waits(loop);
  if (const PipelinedLoop* pipe = pipelined_loop(loop)) emit_pipeline_prologue(*pipe);
}

void Emitter::emit_smem_load(const ir::Inst& in, const SmemTile& tile) {
  const ir::ValueId v = in.results[0];
  auto pf = prefetch.find(v);
  if (auto th = tma_homes_.find(v); th != tma_homes_.end()) {  // awaited by the dots reading it
    if (producer_homes_) return;                                  // issued by the producer
    open("");
    line("unsigned long long* const pl_bar = pl_home_bar" + std::to_string(th->second) + ";");
    line("if (" + tma_issuer_ + ") pl_mbar_expect_tx(pl_bar, " + std::to_string(tile.bytes()) + "u);");
    emit_tma_issue(in, "((pl_u16*)(pl_smem + " + std::to_string(tile.offset) + "))");
    close();
    return;
  }
  if (pf == prefetch.end()) {
    // In a loop, earlier iterations' dots may still read this home: wait for them.
    if (loop_depth_of(v) > 0) barrier();
    open("");
    emit_home_fill(in, tile, "((pl_u16*)(pl_smem + " + std::to_string(tile.offset) + "))");
    close();
    line("pl_cp_async_commit();");
    line("pl_cp_async_wait<0>();");
    if (!wgmma_dots_.empty()) line("pl_fence_proxy_async();");  // cp.async writes -> tensor-core reads
    barrier();
    return;
  }
  // Prefetched: at the loop's first prefetched load, wait for this iteration's round, then, past
  // the barrier, issue round i + distance into the buffer it frees: that of iteration i - 1 (every
  // thread is done with it). Pipelined, that of iteration i - 2: its last dot was retired before
  // that iteration's closing barrier, and this iteration's tiles were made visible before its
  // first dot was issued, at the end of the previous iteration (a K loop, with no first dot,
  // waits here).
  const ir::Inst& loop = *pf->second.loop;
  const std::string i = name(loop.regions[0].args[0]) + "[0]";
  if (prefetched_loads(loop).front() == &in) {
    const PipelinedLoop* pipe = pipelined_loop(loop);
    if (!pipe || !pipe->first_dot) emit_prefetch_wait(loop, i);
    if (round_issue(loop) == RoundIssue::AtLoads)
      emit_prefetch_round(loop, "pl_nx", i + " + " + std::to_string(prefetch_distance(loop)));
  }
  line("pl_u16* const " + home_expr(v) + " = " + home_buffer(v, i) + ";");
}

void Emitter::emit_access_check(const ir::Inst& in) {
  const ir::RefParam& p = k_.refs.at(static_cast<size_t>(in.i0));
  const std::string site = std::to_string(access_sites_.size());
  access_sites_.push_back({in.op, static_cast<int>(in.i0)});
  const size_t rank = in.index.size();
  std::string mask = "(const bool*)0";
  if ((in.i1 & ir::kHasMask) && !(in.i1 & ir::kGather)) {
    const ir::ValueId m = in.operands[rank + (in.op == ir::Op::Load ? 0 : 1)];
    barrier();
    mask = "(const bool*)" + stage_value(m);
    barrier();
  }
  const std::string fail = "pl_check_fail(pl_checks, " + site + ", ";
  open("if (pl_tid() == 0)");
  // The interpreter's order: block origins first, then the selected elements.
  auto scalar = [this](ir::ValueId v) { return "(long long)" + name(v) + "[0]"; };
  for (const std::string& s : backend::origin_check_lines(p, scalar, "ll", fail, "pl_linear", "")) line(s);
  if (in.i1 & ir::kGather) {  // each slot checks its own element (every thread, not only thread 0)
    close();
    const ir::ValueId shaped = in.op == ir::Op::Store ? in.operands[rank] : in.results[0];
    const Layout& l = layout_of(shaped);
    open_slots(l);
    if (const std::string v = valid(l); !v.empty()) line("if (!(" + v + ")) continue;");
    if (in.i1 & ir::kHasMask) line("if (!" + at(in.operands[rank + (in.op == ir::Op::Load ? 0 : 1)]) + ") continue;");
    for (size_t d = 0; d < rank; ++d) {
      const std::string local = in.index[d].gather ? "(long long)" + at(in.operands[d]) : scalar(in.operands[d]);
      line("if (" + local + " < 0 || " + local + " >= " + std::to_string(p.ref_shape[d]) + "ll) " + fail + "0, " +
           std::to_string(d) + ", " + local + ", pl_linear);");
    }
    close();
    return;
  }
  if (rank > 0) {
    const backend::SelectionLists l = backend::selection_lists(in, p, scalar, "ll");
    for (const std::string& s :
         backend::selection_check_lines(l, rank, "long long", "int", "pl_selection_in_bounds", mask, fail, "pl_linear", ""))
      line(s);
  }
  close();
  if ((in.i1 & ir::kHasMask) && !(in.i1 & ir::kGather)) barrier();  // the staged mask is read before the space is reused
}

}  // namespace palladium::cuda
