// Non-elementwise families lowered to generated kernels: reductions tile their kept dimensions and
// hold reduced ones whole; matmul tiles rows and columns (squeezed batch dimensions) and walks K;
// transpose tiles its result; slice and pad tile their result and load masked windows of
// whole-array operands; concatenate copies each operand's tiles to their place; dynamic_slice
// and dynamic_update_slice run one program.
#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>

#include "backends/cpu/cpu_backend.h"
#include "palladium/control.h"
#include "palladium/lang.h"
#include "palladium/ref.h"
#include "program/families.h"
#include "program/kernel_util.h"
#include "program/lower.h"

namespace palladium::program {

namespace {


// Positions of the block's elements along dimension d, as a rank-r tile broadcastable to the block.
Value positions(const Shape& block, size_t d, const Value& start) {
  Shape s(block.size(), 1);
  s[d] = block[d];
  return jnp::iota(DType::int32, s, static_cast<int64_t>(d)) + start;
}

Value all_of(const std::vector<Value>& conds, const Shape& block) {
  Value m;
  for (const Value& c : conds) m = m.valid() ? (m & c) : c;
  return m.valid() ? jnp::broadcast_to(m, block) : m;
}

// A reduction of x (shape `shape`) over `axes` into `out_dtype`, the kept dimensions tiled and
// each block's reduced extent `rblock` (the whole extent where rblock[d] equals it). Reduced
// dimensions split into several blocks become trailing dimensions of the result, one partial
// value per block, for a second reduction.
std::shared_ptr<detail::CallImpl> reduce_call(Prim prim, const Shape& shape, const std::vector<int64_t>& axes,
                                              const Shape& rblock, DType out_dtype, const std::string& backend) {
  const size_t r = shape.size();
  std::vector<bool> reduced(r, false);
  int64_t block_reduced = 1;
  for (int64_t a : axes) {
    reduced[static_cast<size_t>(a)] = true;
    block_reduced *= rblock[static_cast<size_t>(a)];
  }
  Shape kept, chunks;
  std::vector<size_t> split;  // reduced dimensions cut into several blocks
  for (size_t d = 0; d < r; ++d) {
    if (!reduced[d]) kept.push_back(shape[d]);
    else if (rblock[d] < shape[d]) split.push_back(d), chunks.push_back(shape[d] / rblock[d]);
  }
  const Tiling t = tile(kept, std::max<int64_t>(1, block_budget(backend) / std::max<int64_t>(block_reduced, 1)));
  Shape grid = t.grid;
  grid.insert(grid.end(), chunks.begin(), chunks.end());
  std::vector<int64_t> in_block;
  for (size_t d = 0, k = 0; d < r; ++d) in_block.push_back(reduced[d] ? rblock[d] : t.block[k++]);
  const size_t nk = kept.size();
  BlockSpec in = make_spec(in_block, [reduced, split, nk](std::span<const Value> g) {
    Indexer idx;
    for (size_t d = 0, k = 0; d < reduced.size(); ++d) {
      if (!reduced[d]) { idx.args.emplace_back(g[k++]); continue; }
      const auto at = std::find(split.begin(), split.end(), d);
      idx.args.emplace_back(at == split.end() ? Value(0) : g[nk + static_cast<size_t>(at - split.begin())]);
    }
    return idx;
  }, grid.size());
  // The result: the kept tile, then one squeezed entry per split dimension (its block index).
  std::vector<int64_t> out_block(t.block.begin(), t.block.end());
  Shape out_shape = kept;
  for (int64_t c : chunks) out_shape.push_back(c);
  std::vector<BlockDim> out_dims(out_block.begin(), out_block.end());
  for (size_t i = 0; i < chunks.size(); ++i) out_dims.emplace_back(None);
  BlockSpec out = BlockSpec::from_parts(out_dims, [](std::span<const Value> g) {
    Indexer idx;
    for (const Value& v : g) idx.args.emplace_back(v);
    return idx;
  }, grid.size() < 32 ? 1u << grid.size() : detail::kAnyArity);
  auto kernel = [prim, axes](Refs refs) { store(refs[1], reduce_tile(prim, refs[0][all], axes, refs[1].dtype())); };
  return make_kernel(prim_name(prim), kernel, {{out_shape, out_dtype}}, grid, {in}, {out}, backend);
}

// Arg-reductions in two passes: each block of `chunk` positions along `axis` gives its extreme value
// and that value's position in the whole axis; the second call picks, per kept element, the first
// block whose value wins and returns its position. Ties and NaN go to the first position, as in one
// pass: each block's argmax is its first, and the blocks are compared in order.
KernelStep arg_reduce_two_pass(Prim prim, const Shape& shape, int64_t axis, int64_t chunk, DType value_dtype,
                               const std::string& backend) {
  const size_t a = static_cast<size_t>(axis);
  Shape kept;
  for (size_t d = 0; d < shape.size(); ++d)
    if (d != a) kept.push_back(shape[d]);
  const int64_t chunks = shape[a] / chunk;
  const size_t nk = kept.size();
  const bool is_max = prim == Prim::argmax;
  Shape partial = kept;
  partial.push_back(chunks);
  KernelStep s;
  {
    const Tiling t = tile(kept, std::max<int64_t>(1, block_budget(backend) / chunk));
    Shape grid = t.grid;
    grid.push_back(chunks);
    std::vector<int64_t> in_block;
    for (size_t d = 0, k = 0; d < shape.size(); ++d) in_block.push_back(d == a ? chunk : t.block[k++]);
    BlockSpec in = make_spec(in_block, [a, nk](std::span<const Value> g) {
      Indexer idx;
      for (size_t d = 0, k = 0; d <= nk; ++d) idx.args.emplace_back(d == a ? g[nk] : g[k++]);
      return idx;
    }, grid.size());
    std::vector<BlockDim> out_dims(t.block.begin(), t.block.end());
    out_dims.emplace_back(None);
    auto out = [&] {
      return BlockSpec::from_parts(out_dims, [](std::span<const Value> g) {
        Indexer idx;
        for (const Value& v : g) idx.args.emplace_back(v);
        return idx;
      }, grid.size() < 32 ? 1u << grid.size() : detail::kAnyArity);
    };
    auto kernel = [axis, chunk, nk, is_max](Refs refs) {
      Value v = refs[0][all];
      store(refs[1], is_max ? v.max(axis) : v.min(axis));
      store(refs[2], (is_max ? v.argmax(axis) : v.argmin(axis)) + program_id(static_cast<int>(nk)) * chunk);
    };
    s.call = make_kernel(std::string(prim_name(prim)) + "_blocks", kernel,
                         {{partial, value_dtype}, {partial, DType::int32}}, grid, {in}, {out(), out()}, backend);
  }
  {
    const Tiling t = tile(kept, std::max<int64_t>(1, block_budget(backend) / chunks));
    std::vector<int64_t> in_block(t.block.begin(), t.block.end());
    in_block.push_back(chunks);
    auto in = [&] {
      return make_spec(in_block, [nk](std::span<const Value> g) {
        Indexer idx;
        for (size_t k = 0; k < nk; ++k) idx.args.emplace_back(g[k]);
        idx.args.emplace_back(Value(0));
        return idx;
      }, t.grid.size());
    };
    const Shape block = t.block;
    auto kernel = [nk, is_max, chunks, block](Refs refs) {
      Value v = refs[0][all], at = refs[1][all];
      Value best = is_max ? v.argmax(static_cast<int64_t>(nk)) : v.argmin(static_cast<int64_t>(nk));
      Shape full = block;
      full.push_back(chunks);
      Shape keep = block;
      keep.push_back(1);
      Value hit = jnp::iota(DType::int32, full, static_cast<int64_t>(nk)) == jnp::broadcast_to(jnp::reshape(best, keep), full);
      store(refs[2], jnp::where(hit, at, Value(0)).sum(static_cast<int64_t>(nk)).astype(DType::int32));
    };
    s.then = make_kernel(prim_name(prim), kernel, {{kept, DType::int32}}, t.grid, {in(), in()}, {grid_spec(t, std::vector<bool>(nk, false))},
                         backend);
  }
  return s;
}

// A reduced extent larger than a block (a sum over everything, say) is not one program's: it is
// cut into blocks reduced in parallel into partial results (float32 for 16-bit floats), which a
// second call reduces; arg-reductions carry each block's position with its value.
KernelStep lower_reduce(const Program& p, const Eqn& e, const std::string& backend) {
  const Type& x = p.type(e.ins[0]);
  const DType out_dtype = p.type(e.outs[0]).dtype;
  std::vector<int64_t> axes = e.params.axes;
  std::sort(axes.begin(), axes.end());
  int64_t reduced_size = 1;
  for (int64_t a : axes) reduced_size *= x.shape[static_cast<size_t>(a)];
  KernelStep s;
  s.ins = e.ins;
  s.outs = e.outs;
  const int64_t budget = block_budget(backend);
  if (reduced_size > budget && family_of(e.prim) == Family::argreduce) {
    const int64_t L = x.shape[static_cast<size_t>(axes[0])];
    int64_t chunk = 1;
    for (int64_t c = budget; c >= 1; --c)
      if (L % c == 0) { chunk = c; break; }
    if (chunk > 1 && L / chunk <= budget) {  // else the second pass would be as long as one
      KernelStep two = arg_reduce_two_pass(e.prim, x.shape, axes[0], chunk, x.dtype, backend);
      two.ins = e.ins;
      two.outs = e.outs;
      return two;
    }
  }
  const bool two_pass = reduced_size > budget && (e.prim == Prim::reduce_sum || e.prim == Prim::reduce_max ||
                                                  e.prim == Prim::reduce_min);
  Shape rblock = x.shape;
  if (!two_pass) {
    s.call = reduce_call(e.prim, x.shape, axes, rblock, out_dtype, backend);
    return s;
  }
  // Blocks of the reduced extent: the outer reduced dimensions cut to 1, then one cut to a divisor.
  int64_t remaining = reduced_size;
  for (int64_t a : axes) {
    const size_t d = static_cast<size_t>(a);
    if (remaining <= budget) break;
    const int64_t inner = remaining / x.shape[d];
    int64_t b = 1;
    for (int64_t c = std::min(x.shape[d], budget / std::max<int64_t>(inner, 1)); c >= 1; --c)
      if (x.shape[d] % c == 0) { b = c; break; }
    rblock[d] = b;
    remaining = inner * b;
  }
  const DType partial = is_float(out_dtype) && itemsize(out_dtype) == 2 ? DType::float32 : out_dtype;
  s.call = reduce_call(e.prim, x.shape, axes, rblock, partial, backend);
  // The partial results: the kept dimensions, then one per cut dimension, all reduced now.
  Shape pshape;
  std::vector<int64_t> paxes;
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end()) pshape.push_back(x.shape[d]);
  for (int64_t a : axes)
    if (rblock[static_cast<size_t>(a)] < x.shape[static_cast<size_t>(a)]) {
      paxes.push_back(static_cast<int64_t>(pshape.size()));
      pshape.push_back(x.shape[static_cast<size_t>(a)] / rblock[static_cast<size_t>(a)]);
    }
  s.then = reduce_call(e.prim, pshape, paxes, pshape, out_dtype, backend);
  return s;
}

}  // namespace

Value reduce_tile(Prim prim, Value v, std::vector<int64_t> axes, DType out) {
  // Partial sums kept in float32 are summed in float32 (a 16-bit block sum would round first).
  if (prim == Prim::reduce_sum && out == DType::float32 && is_float(v.dtype()) && itemsize(v.dtype()) == 2)
    v = v.astype(DType::float32);
  std::sort(axes.begin(), axes.end());
  for (size_t i = axes.size(); i-- > 0;) {
    const int64_t a = axes[i];
    switch (prim) {
      case Prim::reduce_sum: v = v.sum(a); break;
      case Prim::reduce_max: v = v.max(a); break;
      case Prim::reduce_min: v = v.min(a); break;
      case Prim::argmax: v = v.argmax(a); break;
      case Prim::argmin: v = v.argmin(a); break;
      default: throw InternalError(std::string("reduce_tile: ") + prim_name(prim) + " is not a reduction");
    }
  }
  return v.astype(out);
}

int64_t matmul_tile(const std::string& backend) { return backend == "interpret" ? 256 : 64; }

// The cpu's largest matmul block each way (plan_matmul).
constexpr int64_t kCpuMatmulBlock = 1024;

MatmulPlan plan_matmul(const Shape& a, const Shape& b, DType operand, DType out, const std::string& backend) {
  MatmulPlan mp;
  mp.nb = a.size() - 2;
  mp.m = a[mp.nb];
  mp.k = a[mp.nb + 1];
  mp.n = b[mp.nb + 1];
  mp.bm = std::min(mp.m, matmul_tile(backend));
  mp.bn = std::min(mp.n, matmul_tile(backend));
  mp.bk = mp.k;
  if (mp.k > 512)
    for (int64_t c : {512, 256, 128, 64})
      if (mp.k % c == 0) { mp.bk = c; break; }
  // On CUDA, 16-bit float operands of at least a tile each way take the tiles of the tuned matmul
  // (cuda_bench): 128 x 128 blocks, k in steps of 64 through a 3-stage pipeline, 8 warps (two
  // warpgroups of wgmma on sm_90). Whole-k slices of 512 did not fit the pipeline's shared memory
  // and went through global scratch (a 8192 x 1024 x 3072 product ran at 117 TFLOP/s on an H200).
  if (backend == "cuda" && (operand == DType::bfloat16 || operand == DType::float16) && mp.m >= 128 && mp.n >= 128 &&
      mp.k % 64 == 0) {
    mp.bm = mp.bn = 128;
    mp.bk = 64;
    mp.compiler = {.num_warps = 8, .num_stages = 3};
  }
  // On the cpu, float products with a float32 accumulator go to the library's blocked GEMM, which
  // blocks K and packs its operands itself: one whole-K dot a program (K in slices of 512 repacked
  // both operands and passed over C once a slice), in blocks as large as 1024 x 1024, halved until
  // each worker thread has a program (each program packs its own rows of A and columns of B). With
  // 64 x 64 blocks jit(jnp::matmul) ran 1024^3 at 0.71 and 2048^3 at 0.65 of the pallas_call with
  // 512 and 1024 blocks (cpu_bench, 2 threads, Emerald Rapids, stop 55). Blocks stay at least
  // min(extent, matmul_tile) each way, which fusion counts on to hold a row whole.
  if (backend == "cpu" && (operand == DType::float32 || operand == DType::bfloat16 || operand == DType::float16) &&
      (out == DType::float32 || out == DType::bfloat16 || out == DType::float16)) {
    const int64_t floor_m = std::min(mp.m, matmul_tile(backend)), floor_n = std::min(mp.n, matmul_tile(backend));
    int64_t batch = 1;
    for (size_t i = 0; i < mp.nb; ++i) batch *= a[i];
    mp.bk = mp.k;
    mp.bm = std::min<int64_t>(mp.m, kCpuMatmulBlock);
    mp.bn = std::min<int64_t>(mp.n, kCpuMatmulBlock);
    const int64_t workers = cpu::num_threads();
    while (batch * cdiv(mp.m, mp.bm) * cdiv(mp.n, mp.bn) < workers && (mp.bm > floor_m || mp.bn > floor_n)) {
      if (mp.bm >= mp.bn && mp.bm > floor_m) mp.bm = std::max(floor_m, (mp.bm + 1) / 2);
      else mp.bn = std::max(floor_n, (mp.bn + 1) / 2);
    }
  }
  mp.grid.assign(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(mp.nb));
  mp.grid.push_back(cdiv(mp.m, mp.bm));
  mp.grid.push_back(cdiv(mp.n, mp.bn));
  mp.acc = is_float(out) ? (out == DType::float64 ? DType::float64 : DType::float32) : DType::int32;
  return mp;
}

std::vector<MatmulPlan> matmul_plans(const Shape& a, const Shape& b, DType operand, DType out, const std::string& backend) {
  std::vector<MatmulPlan> plans{plan_matmul(a, b, operand, out, backend)};
  const MatmulPlan tuned = plans[0];  // a copy: the pushes below reallocate `plans`
  // 128 x 256 tiles at 4 and 3 stages: with the producer's registers handed over (setmaxnreg) the
  // 3-stage one ran 8192^3 fastest on an H100 (1.468 ms against 1.499; stop 32 job 1), the 4-stage
  // one 4096^3 (0.201 against 0.206).
  if (tuned.compiler.num_warps == 8 && tuned.n >= 256) {
    for (int stages : {4, 3}) {
      MatmulPlan wide = tuned;
      wide.bn = 256;
      wide.compiler.num_stages = stages;
      wide.grid.back() = cdiv(wide.n, wide.bn);
      plans.push_back(wide);
    }
  }
  return plans;
}

std::string MatmulPlan::label() const {
  std::string s = std::to_string(bm) + "x" + std::to_string(bn) + "x" + std::to_string(bk);
  if (compiler.num_warps) s += " w" + std::to_string(compiler.num_warps);
  if (compiler.num_stages) s += " s" + std::to_string(compiler.num_stages);
  return s;
}

// Batch dimensions squeezed (one program per batch index), then a (rows, cols) block at grid axes
// nb + row_axis and nb + col_axis (-1: block 0).
BlockSpec MatmulPlan::spec(int64_t rows, int64_t cols, int row_axis, int col_axis) const {
  std::vector<BlockDim> dims(nb, BlockDim(None));
  dims.emplace_back(rows);
  dims.emplace_back(cols);
  const size_t batch = nb;
  return BlockSpec::from_parts(dims, [batch, row_axis, col_axis](std::span<const Value> g) {
    Indexer idx;
    for (size_t i = 0; i < batch; ++i) idx.args.emplace_back(g[i]);
    idx.args.emplace_back(row_axis < 0 ? Value(0) : g[batch + static_cast<size_t>(row_axis)]);
    idx.args.emplace_back(col_axis < 0 ? Value(0) : g[batch + static_cast<size_t>(col_axis)]);
    return idx;
  }, 1u << grid.size());
}

Value MatmulPlan::compute(const Ref& a, const Ref& b) const {
  if (bk == k) return dot(a[all], b[all], trans_a, trans_b);
  const int64_t step = bk;
  return fori_loop(Value(0), Value(k / bk), [&](Value i, Value c) {
    Value as = trans_a ? a(ds(i * step, step), slice()) : a(slice(), ds(i * step, step));
    Value bs = trans_b ? b(slice(), ds(i * step, step)) : b(ds(i * step, step), slice());
    return c + dot(as, bs, trans_a, trans_b);
  }, jnp::zeros({bm, bn}, acc));
}

namespace {

// One kernel per candidate tiling; several make an autotune.
KernelStep lower_matmul(const Program& p, const Eqn& e, const std::string& backend) {
  const DType out_t = p.type(e.outs[0]).dtype;
  std::vector<std::string> labels;
  std::vector<std::shared_ptr<detail::CallImpl>> calls;
  for (const MatmulPlan& mp :
       matmul_plans(p.type(e.ins[0]).shape, p.type(e.ins[1]).shape, p.type(e.ins[0]).dtype, out_t, backend)) {
    auto kernel = [mp](Refs refs) { store(refs[2], mp.compute(refs[0], refs[1]).astype(refs[2].dtype())); };
    labels.push_back(mp.label());
    calls.push_back(make_kernel("matmul", kernel, {{p.type(e.outs[0]).shape, out_t}}, mp.grid,
                                {mp.lhs_spec(), mp.rhs_spec()}, {mp.out_spec()}, backend, {}, mp.compiler));
  }
  KernelStep s;
  s.ins = e.ins;
  s.outs = e.outs;
  s.call = calls.size() == 1 ? calls[0] : detail::make_choice("matmul", std::move(labels), std::move(calls));
  return s;
}

KernelStep lower_transpose(const Program& p, const Eqn& e, const std::string& backend) {
  const Shape out = p.type(e.outs[0]).shape;
  const std::vector<int64_t> perm = e.params.axes;
  const Tiling t = tile(out, block_budget(backend));
  std::vector<int64_t> in_block(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) in_block[static_cast<size_t>(perm[k])] = t.block[k];
  BlockSpec in = make_spec(in_block, [perm](std::span<const Value> g) {
    std::vector<Value> idx(perm.size());
    for (size_t k = 0; k < perm.size(); ++k) idx[static_cast<size_t>(perm[k])] = g[k];
    Indexer r;
    for (const Value& v : idx) r.args.emplace_back(v);
    return r;
  }, out.size());
  auto kernel = [perm](Refs refs) { store(refs[1], Value(refs[0][all]).transpose(perm)); };
  KernelStep s;
  s.ins = e.ins;
  s.outs = e.outs;
  s.call = make_kernel("transpose", kernel, {{out, p.type(e.outs[0]).dtype}}, t.grid, {in},
                       {grid_spec(t, std::vector<bool>(out.size(), false))}, backend);
  return s;
}

// A window of a whole-array operand per result block: `start(d, g)` is where the block's first
// element comes from along d, `stride[d]` the step; lanes outside [0, extent) of the operand or
// past the result's end read `fill`.
struct Window {
  std::vector<int64_t> offset, stride;  // source start = offset[d] + g[d] * block[d] * stride[d]
};
Value load_window(const Ref& src, const Window& w, const Shape& block, const Shape& out, std::span<const Value> g,
                  const Value& fill) {
  Indexer idx;
  std::vector<Value> conds;
  const Shape& extent = src.shape();
  for (size_t d = 0; d < block.size(); ++d) {
    Value start = g[d] * (block[d] * w.stride[d]) + w.offset[d];
    idx.args.emplace_back(ds(start, block[d], w.stride[d]));
    Value pos = positions(block, d, Value(0)) * w.stride[d] + start;
    const bool may_underflow = w.offset[d] < 0;
    const bool may_overflow = (out[d] % block[d] != 0) || w.offset[d] + (cdiv(out[d], block[d]) * block[d] - 1) * w.stride[d] >= extent[d];
    if (may_underflow) conds.push_back(pos >= 0);
    if (may_overflow) conds.push_back(pos < extent[d]);
  }
  Value mask = all_of(conds, block);
  if (!mask.valid()) return load(src, idx);
  return load(src, idx, mask, jnp::broadcast_to(fill, block));
}

KernelStep windowed(const Program& p, const Eqn& e, const std::string& backend, const Window& window, double fill) {
  const Shape out = p.type(e.outs[0]).shape;
  const DType dt = p.type(e.outs[0]).dtype;
  const Tiling t = tile(out, block_budget(backend));
  const Shape block = t.block;
  auto kernel = [window, block, out, fill, dt](Refs refs) {
    std::vector<Value> g;
    for (size_t d = 0; d < block.size(); ++d) g.push_back(program_id(static_cast<int>(d)));
    store(refs[1], load_window(refs[0], window, block, out, g, jnp::full(block, fill, dt)));
  };
  KernelStep s;
  s.ins = e.ins;
  s.outs = e.outs;
  s.call = make_kernel(prim_name(e.prim), kernel, {{out, dt}}, t.grid, {BlockSpec()},  // the operand whole
                       {grid_spec(t, std::vector<bool>(out.size(), false))}, backend);
  return s;
}

// Concatenate copies each operand once: grid (operand, tiles of the largest operand); each
// program copies its tile of its operand to the operand's place in the result (masked at the
// operand's edges). The result is one whole-array block that the programs write disjoint parts of.
KernelStep lower_concatenate(const Program& p, const Eqn& e, const std::string& backend) {
  const Type out = p.type(e.outs[0]);
  const size_t axis = static_cast<size_t>(e.params.axis), n = e.ins.size();
  std::vector<Shape> shapes;
  std::vector<int64_t> offsets;
  Shape largest(out.shape.size(), 0);
  int64_t off = 0;
  for (int v : e.ins) {
    shapes.push_back(p.type(v).shape);
    offsets.push_back(off);
    off += shapes.back()[axis];
    for (size_t d = 0; d < largest.size(); ++d) largest[d] = std::max(largest[d], shapes.back()[d]);
  }
  const Tiling t = tile(largest, block_budget(backend));
  Shape grid{static_cast<int64_t>(n)};
  grid.insert(grid.end(), t.grid.begin(), t.grid.end());
  const Shape block = t.block;
  const DType dt = out.dtype;
  auto kernel = [shapes, offsets, block, axis, n, dt](Refs refs) {
    const size_t r = block.size();
    for (size_t j = 0; j < n; ++j) {
      when(program_id(0) == static_cast<int64_t>(j), [&] {
        Indexer from, to;
        std::vector<Value> inside;
        for (size_t d = 0; d < r; ++d) {
          Value start = program_id(static_cast<int>(d + 1)) * block[d];
          from.args.emplace_back(ds(start, block[d]));
          to.args.emplace_back(ds(d == axis ? start + offsets[j] : start, block[d]));
          inside.push_back(positions(block, d, start) < shapes[j][d]);
        }
        const Value mask = all_of(inside, block);
        store(refs[n], to, load(refs[j], from, mask, jnp::zeros(block, dt)), mask);
      });
    }
  };
  KernelStep s;
  s.ins = e.ins;
  s.outs = e.outs;
  s.call = make_kernel("concatenate", kernel, {{out.shape, dt}}, grid, std::vector<BlockSpec>(n), {BlockSpec()}, backend);
  return s;
}

// A static slice whose start offsets are operands (int32 scalars), so that the slices of an
// unrolled loop (x[t] for every t) share one kernel, traced and compiled once per shape.
KernelStep lower_slice(const Program& p, const Eqn& e, const std::string& backend) {
  const Type x = p.type(e.ins[0]), out = p.type(e.outs[0]);
  const std::vector<int64_t> steps = e.params.step;
  const Tiling t = tile(out.shape, block_budget(backend));
  KernelStep s;
  s.ins = e.ins;
  s.outs = e.outs;
  for (int64_t lo : e.params.lo) s.extra.push_back(palladium::full({}, static_cast<double>(lo), DType::int32));
  std::string key = backend + type_str(x) + type_str(out);
  for (int64_t st : steps) key += "," + std::to_string(st);
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<detail::CallImpl>> calls;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = calls.find(key); it != calls.end()) {
    s.call = it->second;
    return s;
  }
  const Shape block = t.block, extent = x.shape;
  const DType dt = out.dtype;
  auto kernel = [block, extent, steps, dt](Refs refs) {
    const size_t r = block.size();
    Indexer idx;
    std::vector<Value> conds;
    for (size_t d = 0; d < r; ++d) {
      Value offset = refs[1 + d][all];
      Value start = program_id(static_cast<int>(d)) * (block[d] * steps[d]) + offset;
      idx.args.emplace_back(ds(start, block[d], steps[d]));
      conds.push_back(positions(block, d, Value(0)) * steps[d] + start < extent[d]);
    }
    Value v = r == 0 ? load(refs[0], idx) : load(refs[0], idx, all_of(conds, block), jnp::zeros(block, dt));
    store(refs[1 + r], v);
  };
  std::vector<BlockSpec> in_specs(1 + block.size());  // whole arrays
  s.call = make_kernel("slice", kernel, {{out.shape, dt}}, t.grid, in_specs,
                       {grid_spec(t, std::vector<bool>(out.shape.size(), false))}, backend);
  calls[key] = s.call;
  return s;
}

// Clamped start indices, as lax.dynamic_slice: start in [0, dim - size].
std::vector<Value> clamped_starts(Refs refs, size_t first, const Shape& dims, const Shape& sizes) {
  std::vector<Value> s;
  for (size_t d = 0; d < dims.size(); ++d) {
    Value v = refs[first + d][all];
    s.push_back(jnp::minimum(jnp::maximum(v.astype(DType::int32), 0), dims[d] - sizes[d]));
  }
  return s;
}

KernelStep lower_dynamic(const Program& p, const Eqn& e, const std::string& backend) {
  const Shape x = p.type(e.ins[0]).shape;
  const Type out = p.type(e.outs[0]);
  KernelStep s;
  s.ins = e.ins;
  s.outs = e.outs;
  if (e.prim == Prim::dynamic_slice) {
    const Shape sizes = e.params.shape;
    auto kernel = [x, sizes](Refs refs) {
      std::vector<Value> st = clamped_starts(refs, 1, x, sizes);
      Indexer idx;
      for (size_t d = 0; d < x.size(); ++d) idx.args.emplace_back(ds(st[d], sizes[d]));
      store(refs[x.size() + 1], load(refs[0], idx));
    };
    s.call = make_kernel("dynamic_slice", kernel, {{out.shape, out.dtype}}, {}, {}, {}, backend);
  } else {
    const Shape sizes = p.type(e.ins[1]).shape;
    auto kernel = [x, sizes](Refs refs) {
      std::vector<Value> st = clamped_starts(refs, 2, x, sizes);
      Indexer idx;
      for (size_t d = 0; d < x.size(); ++d) idx.args.emplace_back(ds(st[d], sizes[d]));
      store(refs[x.size() + 2], idx, refs[1][all]);
    };
    s.call = make_kernel("dynamic_update_slice", kernel, {{out.shape, out.dtype}}, {}, {}, {}, backend, {{0, 0}});
  }
  return s;
}

}  // namespace

int64_t block_budget(const std::string& backend) {
  if (backend == "cuda") return 8192;
  if (backend == "cpu") return 16384;
  return 1 << 16;
}

std::vector<KernelStep> lower_structural(const Program& p, const Eqn& e, const std::string& backend) {
  switch (family_of(e.prim)) {
    case Family::reduce:
    case Family::argreduce:
      return {lower_reduce(p, e, backend)};
    case Family::matmul:
      return {lower_matmul(p, e, backend)};
    case Family::transpose:
      return {lower_transpose(p, e, backend)};
    case Family::slice:
      return {lower_slice(p, e, backend)};
    case Family::pad: {
      Window w;
      for (int64_t l : e.params.lo) w.offset.push_back(-l);
      w.stride.assign(e.params.lo.size(), 1);
      return {windowed(p, e, backend, w, e.params.scalar)};
    }
    case Family::concatenate:
      return {lower_concatenate(p, e, backend)};
    case Family::dynamic_slice:
    case Family::dynamic_update_slice:
      return {lower_dynamic(p, e, backend)};
    default:
      throw InternalError(std::string("lower_structural: no kernel lowering for ") + prim_name(e.prim));
  }
}

}  // namespace palladium::program
