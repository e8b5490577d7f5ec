// cpu codegen: loads, stores and atomics (the interpreter's Machine::memory), with the edge-block
// rules of device/cpu/tile_memory.h: elements outside the array read `other` (or 0) and are not
// written. Index arithmetic is per access and per row, never per element.
#include "backends/cpu/emitter.h"

namespace palladium::cpu {

// Names the generated code declares for one access: `p_off` is the array offset of the first
// selected element (k = 0 in every dimension); per selected dimension d, `p_lo<d>`/`p_hi<d>` bound
// the k inside the array, `counts[d]` is its size and `steps[d]` its element step in memory.
struct Emitter::Access {
  std::string prefix;
  std::vector<int64_t> counts, steps;
  std::string lo(size_t d) const { return prefix + "_lo" + std::to_string(d); }
  std::string hi(size_t d) const { return prefix + "_hi" + std::to_string(d); }
  std::string off() const { return prefix + "_off"; }
  std::string ok() const { return prefix + "_ok"; }
};

namespace {

// The pl_cpu::AtomicOp of a read-modify-write op (all but atomic_cas, which has its own helper).
std::string atomic_op_name(ir::Op op) {
  const char* kind = op == ir::Op::AtomicAdd ? "add" : op == ir::Op::AtomicMax ? "max" : op == ir::Op::AtomicMin ? "min"
                     : op == ir::Op::AtomicXchg ? "xchg" : op == ir::Op::AtomicAnd ? "bit_and"
                     : op == ir::Op::AtomicOr ? "bit_or" : "bit_xor";
  return std::string("pl_cpu::AtomicOp::") + kind;
}

}  // namespace

Emitter::Access Emitter::plan_access(const ir::Inst& in) {
  const ir::RefParam& p = kernel_.refs[static_cast<size_t>(in.i0)];
  const std::vector<int64_t> strides = row_major_strides(p.array_shape);
  Access a;
  a.prefix = fresh("a");
  std::string offset = "0", ok = "true";
  std::vector<std::string> range_calls;
  size_t ref_dim = 0;
  for (size_t dim = 0; dim < p.array_shape.size(); ++dim) {
    const std::string origin = as_int64(p.origin[dim]);
    const std::string extent = std::to_string(p.array_shape[dim]);
    if (p.squeezed[dim]) {  // the block has one element here, at the origin itself
      offset += " + " + origin + " * " + std::to_string(strides[dim]);
      ok += " && " + origin + " >= 0 && " + origin + " < " + extent;
      continue;
    }
    const size_t d = ref_dim++;
    const ir::IndexEntry& e = in.index[d];
    const std::string start = a.prefix + "_g" + std::to_string(d);
    line("const int64_t " + start + " = " + origin + " + " + as_int64(in.operands[d]) + ";");
    offset += " + " + start + " * " + std::to_string(strides[dim]);
    if (e.scalar) {
      ok += " && " + start + " >= 0 && " + start + " < " + extent;
      continue;
    }
    const size_t s = a.counts.size();
    a.counts.push_back(e.size);
    a.steps.push_back(e.stride * strides[dim]);
    range_calls.push_back("pl_cpu::valid_range(" + start + ", " + std::to_string(e.stride) + ", " + std::to_string(e.size) +
                          ", " + extent + ", " + a.lo(s) + ", " + a.hi(s) + ");");
  }
  line("const int64_t " + a.off() + " = " + offset + ";");
  line("const bool " + a.ok() + " = " + ok + ";");
  for (size_t s = 0; s < a.counts.size(); ++s) {
    line("int64_t " + a.lo(s) + ", " + a.hi(s) + ";");
    line(range_calls[s]);
  }
  // Scalar indices or squeezed dimensions outside the array: nothing is selected.
  if (!a.counts.empty()) line("if (!" + a.ok() + ") " + a.lo(0) + " = " + a.hi(0) + " = 0;");
  return a;
}

// Loops over all but the last selected dimension, then `row(flat, off, lo, hi)` with the tile
// offset of the row, its array offset and the valid range of its elements.
void Emitter::emit_rows(const Access& a, const RowEmitter& row) {
  const size_t rank = a.counts.size();
  std::string flat = "0", offset = a.off(), inside = "true";
  for (size_t d = 0; d + 1 < rank; ++d) {
    const std::string k = a.prefix + "_k" + std::to_string(d);
    open("for (int64_t " + k + " = 0; " + k + " < " + std::to_string(a.counts[d]) + "; ++" + k + ")");
    flat = "(" + flat + " + " + k + ") * " + std::to_string(a.counts[d + 1]);
    offset += " + " + k + " * " + std::to_string(a.steps[d]);
    inside += " && " + k + " >= " + a.lo(d) + " && " + k + " < " + a.hi(d);
  }
  const std::string lo = a.lo(rank - 1), hi = a.hi(rank - 1);
  if (rank > 1) {
    line("const bool " + a.prefix + "_row = " + inside + ";");
    row(flat, offset, a.prefix + "_row ? " + lo + " : 0", a.prefix + "_row ? " + hi + " : 0");
  } else {
    row(flat, offset, lo, hi);
  }
  for (size_t d = 0; d + 1 < rank; ++d) close();
}

void Emitter::emit_load(const ir::Inst& in) {
  const ir::ValueId r = in.results[0];
  const DType t = type(r).dtype;
  const std::string ct = compute_type(t);
  const std::string base = ref_pointer(static_cast<int>(in.i0));
  size_t next = in.index.size();
  const std::string mask = (in.i1 & ir::kHasMask) ? name(in.operands[next++]) : "";
  const std::string other = (in.i1 & ir::kHasOther) ? name(in.operands[next++]) : "";
  if (kind(r) == ValueKind::Scalar) {
    const Access a = plan_access(in);
    const std::string active = a.ok() + (mask.empty() ? "" : " && " + mask);
    line("const " + ct + " " + name(r) + " = " + active + " ? " + ct + "(pl_cpu::to_compute(" + base + "[" + a.off() + "])) : " +
         (other.empty() ? ct + "(0)" : other) + ";");
    return;
  }
  // In place: vN points at the block inside the array when all of it is there (decided at run
  // time), else at a copy. Copying first made an add at one thread read its two inputs one after
  // the other instead of together: half the bandwidth of the same loop over the arrays.
  const bool in_place = reads_in_place(in);
  const std::string tile = in_place ? name(r) + "_copy" : name(r);
  if (in_place) {
    line("const " + ct + "* " + name(r) + ";");
    declare_array(tile, t, numel(type(r).shape));
  } else {
    declare_tile(r);
  }
  open("");
  const Access a = plan_access(in);
  const std::string step = std::to_string(a.steps.back()), count = std::to_string(a.counts.back());
  bool contiguous = in_place && a.steps.back() == 1;
  for (size_t d = 0; contiguous && d + 1 < a.counts.size(); ++d) contiguous = a.steps[d] == a.steps[d + 1] * a.counts[d + 1];
  if (contiguous) {
    std::string whole = a.ok();
    for (size_t d = 0; d < a.counts.size(); ++d)
      whole += " && " + a.lo(d) + " == 0 && " + a.hi(d) + " == " + std::to_string(a.counts[d]);
    line("if (" + whole + ") " + name(r) + " = " + base + " + " + a.off() + ";");
    open("else");
  }
  emit_rows(a, [&](const std::string& flat, const std::string& off, const std::string& lo, const std::string& hi) {
    if (mask.empty()) {
      line("pl_cpu::load_row<" + ct + ">(" + tile + " + " + flat + ", " + base + ", " + off + ", " + step + ", " + count +
           ", " + lo + ", " + hi + ");");
    } else {
      line("pl_cpu::load_row_masked<" + ct + ">(" + name(r) + " + " + flat + ", " + base + ", " + off + ", " + step + ", " +
           count + ", " + lo + ", " + hi + ", " + mask + " + " + flat + ", " +
           (other.empty() ? "static_cast<const " + ct + "*>(nullptr)" : other + " + " + flat) + ");");
    }
  });
  if (in_place) line(name(r) + " = " + tile + ";");
  if (contiguous) close();
  close();
}

bool Emitter::reads_in_place(const ir::Inst& load) const {
  const ir::ValueId r = load.results[0];
  const ir::RefParam& p = kernel_.refs[static_cast<size_t>(load.i0)];
  // Inputs only (they never change during a call; aliased outputs are copies), no mask or
  // gather, storage read as it is, and only elementwise loops reading it (they index vN[i]).
  if (p.is_output || load.i1 != 0 || kind(r) != ValueKind::Tile) return false;
  if (std::string(compute_type(p.dtype)) != storage_type(p.dtype)) return false;
  for (const ir::Inst* u : users(r))
    if (!group_of_.count(u)) return false;
  return !users(r).empty();
}

void Emitter::emit_matrix_view(const ir::Inst& in) {
  const ir::ValueId r = in.results[0];
  const ir::RefParam& p = kernel_.refs[static_cast<size_t>(in.i0)];
  const Access a = plan_access(in);
  line(std::string("const pl_cpu::MatrixIn<") + storage_type(p.dtype) + "> " + name(r) + " = {" +
       ref_pointer(static_cast<int>(in.i0)) + ", " + a.off() + ", " + std::to_string(a.steps[0]) + ", " +
       std::to_string(a.steps[1]) + ", " + a.lo(0) + ", " + a.hi(0) + ", " + a.lo(1) + ", " + a.hi(1) + "};");
}

void Emitter::emit_store(const ir::Inst& in) {
  const ir::RefParam& p = kernel_.refs[static_cast<size_t>(in.i0)];
  const std::string st = storage_type(p.dtype);
  const std::string base = ref_pointer(static_cast<int>(in.i0));
  const ir::ValueId value = in.operands[in.index.size()];
  const std::string mask = (in.i1 & ir::kHasMask) ? name(in.operands[in.index.size() + 1]) : "";
  open("");
  const Access a = plan_access(in);
  // Outputs much larger than the caches are streamed past them (see store_row_streaming).
  constexpr int64_t kStreamingBytes = int64_t{64} << 20;
  const bool streaming = mask.empty() && p.dtype == DType::float32 && !a.counts.empty() && a.steps.back() == 1 &&
                         numel(p.array_shape) * 4 >= kStreamingBytes;
  uses_streaming_stores_ = uses_streaming_stores_ || streaming;
  if (auto f = fused_store_.find(&in); f != fused_store_.end()) {
    const FusionGroup& g = groups_[f->second];
    if (!a.counts.empty() && a.steps.back() == 1) {
      emit_fused_rows(in, a, g, streaming);
      close();
      return;
    }
    emit_group(g);  // not a unit-stride row: the group's own loop, then the plain store below
  }
  if (auto it = deferred_dot_.find(&in); it != deferred_dot_.end()) {
    // The dot writes its result straight into the output array.
    emit_gemm(*it->second,
              "pl_cpu::MatrixOut<float>{" + base + ", " + a.off() + ", " + std::to_string(a.steps[0]) + ", " +
                  std::to_string(a.steps[1]) + ", " + a.lo(0) + ", " + a.hi(0) + ", " + a.lo(1) + ", " + a.hi(1) + "}",
              false);
  } else if (a.counts.empty()) {
    line("if (" + a.ok() + (mask.empty() ? "" : " && " + mask) + ") " + base + "[" + a.off() + "] = pl_cpu::to_storage<" + st +
         ">(" + name(value) + ");");
  } else {
    const std::string step = std::to_string(a.steps.back()), count = std::to_string(a.counts.back());
    emit_rows(a, [&](const std::string& flat, const std::string& off, const std::string& lo, const std::string& hi) {
      if (streaming)
        line("pl_cpu::store_row_streaming(" + base + ", " + off + ", " + lo + ", " + hi + ", " + name(value) + " + " + flat + ");");
      else if (mask.empty())
        line("pl_cpu::store_row(" + base + ", " + off + ", " + step + ", " + count + ", " + lo + ", " + hi + ", " + name(value) +
             " + " + flat + ");");
      else
        line("pl_cpu::store_row_masked(" + base + ", " + off + ", " + step + ", " + lo + ", " + hi + ", " + name(value) + " + " +
             flat + ", " + mask + " + " + flat + ");");
    });
  }
  close();
}

// The store of a fused group's result (plan_fused_store), computed row by row straight into the
// output: element i of the value is computed where it is stored, and only the row's part inside
// the array is computed. An output streamed past the caches is written in chunks of 64 elements
// (the first one up to the output's next 64-byte boundary, so that the others fill whole lines),
// each computed into a small local array and then streamed out. Computing the whole block into a
// block-sized array first, then streaming it, read that array back from L2: on the Zen 4 an add of
// 2^26 float32 at one thread ran 38-40 ms that way against 22-25 ms in chunks (stop 32). The
// whole chunks between the row's first and last are a loop of constant trip count streamed
// without checks (store_chunk_streaming): one thread, block 65536, same binary, 52.5 -> 42.5 ms
// on the H100 machine's Xeon (stop 33 job 4), 22.0 -> 20.4 ms on the Zen 4 (block 16384).
void Emitter::emit_fused_rows(const ir::Inst& in, const Access& a, const FusionGroup& g, bool streaming) {
  const ir::RefParam& p = kernel_.refs[static_cast<size_t>(in.i0)];
  const std::string base = ref_pointer(static_cast<int>(in.i0));
  const std::string result = temp(in.operands[in.index.size()]);
  // A loop (`header`) over elements of the row at `flat`, the element at `index` in the row each
  // computed and handed to `store`.
  auto elements = [&](const std::string& header, const std::string& flat, const std::string& index,
                      const std::string& store) {
    line("PL_NO_ALIAS_LOOP");
    open(header);
    line("const int64_t i = " + flat + " + " + index + ";");
    emit_group_body(g, false);
    line(store);
    close();
  };
  // Elements [from, to) of the row, by pl_k.
  auto range = [](const std::string& from, const std::string& to) {
    return "for (int64_t pl_k = " + from + "; pl_k < (" + to + "); ++pl_k)";
  };
  emit_rows(a, [&](const std::string& flat, const std::string& off, const std::string& lo, const std::string& hi) {
    if (!streaming) {
      elements(range(lo, hi), flat, "pl_k",
               base + "[" + off + " + pl_k] = pl_cpu::to_storage<" + storage_type(p.dtype) + ">(" + result + ");");
      return;
    }
    open("");
    line("const int64_t pl_lo = " + lo + ", pl_hi = " + hi + ";");
    // Integer arithmetic on the address: the row's part may be empty and lie past the array.
    line("const int64_t pl_head = static_cast<int64_t>((64 - ((reinterpret_cast<uintptr_t>(" + base +
         ") + static_cast<uintptr_t>((" + off + ") + pl_lo) * 4) & 63)) & 63) / 4;  // elements before the next line");
    line("alignas(64) float pl_chunk[64];");
    line("int64_t pl_c = pl_lo;");
    // The part of a chunk from pl_c to `end`: computed, then streamed with the row's checks.
    auto part = [&](const std::string& end) {
      line("const int64_t pl_ce = " + end + ";");
      elements(range("pl_c", "pl_ce"), flat, "pl_k", "pl_chunk[pl_k - pl_c] = " + result + ";");
      line("pl_cpu::store_row_streaming(" + base + ", (" + off + ") + pl_c, 0, pl_ce - pl_c, pl_chunk);");
      line("pl_c = pl_ce;");
    };
    open("if (pl_head > 0 && pl_c < pl_hi)");  // up to the next line
    part("pl_c + pl_head < pl_hi ? pl_c + pl_head : pl_hi");
    close();
    // Whole chunks, 64-byte aligned: a loop of constant trip count and four lines streamed as they
    // are, the inputs read element by element prefetched ahead (where the flags ask for it).
    const std::vector<ir::ValueId> prefetched = indexed_inputs(g);
    if (!prefetched.empty()) line("const bool pl_prefetch = pl_cpu::stream_prefetch(launch);");
    open("for (; pl_c + 64 <= pl_hi; pl_c += 64)");
    for (ir::ValueId input : prefetched)
      line("if (pl_prefetch) pl_cpu::prefetch_chunk_inputs(" + name(input) + " + " + flat + " + pl_c);");
    elements("for (int64_t pl_j = 0; pl_j < 64; ++pl_j)", flat, "pl_c + pl_j", "pl_chunk[pl_j] = " + result + ";");
    line("pl_cpu::store_chunk_streaming(" + base + " + (" + off + ") + pl_c, pl_chunk);");
    close();
    open("if (pl_c < pl_hi)");  // the rest of the row
    part("pl_hi");
    close();
    close();
  });
}

void Emitter::emit_atomic(const ir::Inst& in) {
  const ir::ValueId r = in.results[0];
  const std::string ct = compute_type(type(r).dtype);
  const std::string base = ref_pointer(static_cast<int>(in.i0));
  const ir::ValueId value = in.operands[in.index.size()];
  const std::string mask = (in.i1 & ir::kHasMask) ? name(in.operands[in.index.size() + 1]) : "";
  const bool cas = in.op == ir::Op::AtomicCas;  // value is cmp; the stored value follows it
  const std::string swap = cas ? name(in.operands[in.index.size() + 1]) : "";
  const std::string op = atomic_op_name(in.op);
  if (type(r).shape.empty()) {
    const Access a = plan_access(in);
    const std::string call = cas ? "pl_cpu::atomic_cas(" + base + " + " + a.off() + ", " + name(value) + ", " + swap + ")"
                                 : "pl_cpu::atomic_update<" + op + ">(" + base + " + " + a.off() + ", " + name(value) + ")";
    line("const " + ct + " " + name(r) + " = (" + a.ok() + (mask.empty() ? "" : " && " + mask) + ") ? " + call + " : " + ct + "(0);");
    return;
  }
  declare_tile(r);  // the old values, even when unused: the row helper writes them
  open("");
  const Access a = plan_access(in);
  const std::string step = std::to_string(a.steps.back()), count = std::to_string(a.counts.back());
  emit_rows(a, [&](const std::string& flat, const std::string& off, const std::string& lo, const std::string& hi) {
    if (cas) {
      line("pl_cpu::atomic_cas_row(" + base + ", " + off + ", " + step + ", " + count + ", " + lo + ", " + hi + ", " + name(value) +
           " + " + flat + ", " + swap + " + " + flat + ", " + name(r) + " + " + flat + ");");
      return;
    }
    line("pl_cpu::atomic_row<" + op + ">(" + base + ", " + off + ", " + step + ", " + count + ", " + lo + ", " + hi + ", " +
         name(value) + " + " + flat + ", " + (mask.empty() ? "static_cast<const bool*>(nullptr)" : mask + " + " + flat) + ", " +
         name(r) + " + " + flat + ");");
  });
  close();
}

void Emitter::emit_gather(const ir::Inst& in) {
  const ir::RefParam& p = kernel_.refs[static_cast<size_t>(in.i0)];
  const std::vector<int64_t> strides = row_major_strides(p.array_shape);
  const size_t rank = in.index.size();
  size_t next = rank;
  const bool load = in.op == ir::Op::Load, store = in.op == ir::Op::Store;
  const std::string value = load ? "" : name(in.operands[next++]);
  const std::string swap = in.op == ir::Op::AtomicCas ? name(in.operands[next++]) : "";
  const std::string mask = (in.i1 & ir::kHasMask) ? name(in.operands[next++]) : "";
  const std::string other = (in.i1 & ir::kHasOther) ? name(in.operands[next++]) : "";
  const ir::Type& t = store ? type(in.operands[rank]) : type(in.results[0]);
  const std::string ct = compute_type(t.dtype), base = ref_pointer(static_cast<int>(in.i0));
  if (!store) declare_tile(in.results[0]);
  const std::string site = std::to_string(sites_.size());
  if (checks_) sites_.push_back({in.op, static_cast<int>(in.i0)});
  open("");
  if (checks_)
    for (const std::string& s : backend::origin_check_lines(p, as_int64, "", "{ launch.fail(launch.host, " + site + ", ",
                                                            "program", " return; }"))
      line(s);
  open("for (int64_t e = 0; e < " + std::to_string(numel(t.shape)) + "; ++e)");
  line("const bool active = " + (mask.empty() ? std::string("true") : mask + "[e]") + ";");
  std::string offset = "0", inside = "true";
  size_t d = 0;
  for (size_t a = 0; a < p.array_shape.size(); ++a) {
    const std::string origin = as_int64(p.origin[a]);
    std::string global = origin;
    if (!p.squeezed[a]) {
      const std::string local = "l" + std::to_string(d);
      line("const int64_t " + local + " = " + (in.index[d].gather ? "static_cast<int64_t>(" + name(in.operands[d]) + "[e])" : as_int64(in.operands[d])) + ";");
      if (checks_)
        line("if (active && (" + local + " < 0 || " + local + " >= " + std::to_string(p.ref_shape[d]) + ")) { launch.fail(launch.host, " +
             site + ", 0, " + std::to_string(d) + ", " + local + ", program); return; }");
      global = "(" + origin + " + " + local + ")";
      ++d;
    }
    inside += " && " + global + " >= 0 && " + global + " < " + std::to_string(p.array_shape[a]);
    offset += " + " + global + " * " + std::to_string(strides[a]);
  }
  line("const bool hit = active && " + inside + ";");  // outside the array: padding, as for slices
  line("const int64_t off = " + offset + ";");
  if (load) {
    line(name(in.results[0]) + "[e] = hit ? " + ct + "(pl_cpu::to_compute(" + base + "[off])) : " +
         (other.empty() ? ct + "(0)" : other + "[e]") + ";");
  } else if (store) {
    line("if (hit) " + base + "[off] = pl_cpu::to_storage<" + storage_type(p.dtype) + ">(" + value + "[e]);");
  } else {
    const std::string call = in.op == ir::Op::AtomicCas
                                 ? "pl_cpu::atomic_cas(" + base + " + off, " + value + "[e], " + swap + "[e])"
                                 : "pl_cpu::atomic_update<" + atomic_op_name(in.op) + ">(" + base + " + off, " + value + "[e])";
    line(name(in.results[0]) + "[e] = hit ? " + call + " : " + ct + "(0);");
  }
  close();
  close();
}

void Emitter::emit_access_check(const ir::Inst& in) {
  const ir::RefParam& p = kernel_.refs[static_cast<size_t>(in.i0)];
  const std::string site = std::to_string(sites_.size());
  sites_.push_back({in.op, static_cast<int>(in.i0)});
  const std::string fail = "{ launch.fail(launch.host, " + site + ", ";
  open("");
  // The interpreter's order: block origins first, then the selected elements.
  for (const std::string& s : backend::origin_check_lines(p, as_int64, "", fail, "program", " return; }")) line(s);
  const size_t rank = in.index.size();
  if (rank > 0) {
    const backend::SelectionLists l = backend::selection_lists(in, p, as_int64, "");
    size_t next = rank + (in.op == ir::Op::Load ? 0 : 1);
    std::string mask = "nullptr";
    if (in.i1 & ir::kHasMask) {
      const ir::ValueId m = in.operands[next];
      mask = kind(m) == ValueKind::Scalar ? "&" + name(m) : name(m);
    }
    for (const std::string& s :
         backend::selection_check_lines(l, rank, "int64_t", "int32_t", "pl_cpu::selection_in_bounds", mask, fail, "program", " return; }"))
      line(s);
  }
  close();
}

}  // namespace palladium::cpu
