// The seed's fused attention kernels, one for one. Python's `x[:, None]` is `x(pl::slice(), pl::None)`,
// functools.partial's static parameters are lambda captures, and None refs test false.
#include "ops/attention.h"

#include "palladium/transforms.h"

#include "ops/call_cache.h"

#include <cmath>
#include <limits>
#include <numeric>

#include "palladium/palladium.h"

namespace palladium::ops {
namespace {

namespace pl = palladium;
using pl::Ref;
using pl::Value;

const float kDefaultMaskValue = -0.7f * std::numeric_limits<float>::max();

Value segment_mask(const Value& q_segment_ids, const Value& kv_segment_ids) {
  // [T, 1] == [1, S]
  Value q = jnp::expand_dims(q_segment_ids, -1);
  Value kv = kv_segment_ids.ndim() == 1 ? jnp::expand_dims(kv_segment_ids, 0) : jnp::expand_dims(kv_segment_ids, 1);
  return jnp::equal(q, kv).astype(pl::bool_);
}

void mha_forward_kernel(Ref q_ref, Ref k_ref, Ref v_ref,  // input arrays
                        Ref segment_ids_ref,              // segment_id array, or None
                        Ref o_ref,                        // output
                        pl::Refs residual_refs,           // residual outputs
                        float sm_scale, bool causal, int64_t block_q, int64_t block_d, int64_t block_k) {
  const int64_t seq_len = k_ref.shape()[0];
  Value start_q = pl::program_id(0);

  // m_i and l_i (see the FlashAttention paper) are updated during the k, v loop; o accumulates.
  Value m_i = jnp::zeros({block_q}, pl::f32) - INFINITY;
  Value l_i = jnp::zeros({block_q}, pl::f32);
  Value o = jnp::zeros({block_q, block_d}, pl::f32);

  pl::DSlice curr_q_slice = pl::dslice(start_q * block_q, block_q);
  Value q = q_ref[pl::all];
  Value q_segment_ids;
  if (segment_ids_ref) q_segment_ids = pl::load(segment_ids_ref, pl::idx(curr_q_slice));

  // The loop over blocks of q is the grid; here we loop over blocks of kv.
  auto body = [&](Value start_k, std::tuple<Value, Value, Value> carry) {
    auto [o_prev, m_prev, l_prev] = carry;
    pl::DSlice curr_k_slice = pl::dslice(start_k * block_k, block_k);

    Value k = pl::load(k_ref, pl::idx(curr_k_slice, pl::slice()));
    Value qk = pl::dot(q, k.T());  // [block_q, block_k]
    if (sm_scale != 1.0f) qk *= sm_scale;

    if (causal || segment_ids_ref) {
      Value mask;
      if (segment_ids_ref) {
        Value kv_segment_ids = pl::load(segment_ids_ref, pl::idx(curr_k_slice));
        mask = segment_mask(q_segment_ids, kv_segment_ids);
      }
      if (causal) {
        Value span_q = start_q * block_q + jnp::arange(block_q);
        Value span_k = start_k * block_k + jnp::arange(block_k);
        Value causal_mask = span_q(pl::slice(), pl::None) >= span_k(pl::None, pl::slice());
        mask = mask.valid() ? jnp::logical_and(mask, causal_mask) : causal_mask;
      }
      qk = jnp::where(mask, qk, kDefaultMaskValue);
    }

    Value m_curr = qk.max(-1);
    Value m_next = jnp::maximum(m_prev, m_curr);
    Value correction = jnp::exp(m_prev - m_next);
    Value l_prev_corr = correction * l_prev;
    // m_next instead of m_curr avoids a correction on l_curr.
    Value s_curr = jnp::exp(qk - m_next(pl::slice(), pl::None));
    Value l_curr = s_curr.sum(-1);
    Value l_next = l_prev_corr + l_curr;
    Value o_prev_corr = correction(pl::slice(), pl::None) * o_prev;
    Value v = pl::load(v_ref, pl::idx(curr_k_slice, pl::dslice(block_d)));
    Value o_curr = pl::dot(s_curr.astype(v.dtype()), v);
    Value o_next = o_prev_corr + o_curr;
    return std::tuple{o_next, m_next, l_next};
  };

  Value upper_bound = causal ? pl::lax::div(block_q * (start_q + 1) + block_k - 1, block_k)
                             : Value(pl::cdiv(seq_len, block_k));
  std::tie(o, m_i, l_i) = pl::lax::fori_loop(0, upper_bound, body, std::tuple{o, m_i, l_i});

  // o was kept unscaled during the loop; dividing by the last l_i gives the output.
  o /= l_i(pl::slice(), pl::None);
  if (!residual_refs.empty()) {
    Ref lse_ref = residual_refs[0];
    lse_ref[pl::all] = m_i + jnp::log(l_i);
  }
  o_ref[pl::all] = o.astype(o_ref.dtype());
}

void preprocess_backward_kernel(Ref out_ref, Ref dout_ref, Ref delta_ref) {
  Value o = out_ref[pl::all].astype(pl::f32);
  Value dout = dout_ref[pl::all].astype(pl::f32);
  Value delta = jnp::sum(o * dout, 1);
  delta_ref[pl::all] = delta.astype(delta_ref.dtype());
}

// Scan #1 of the backward: keep a block of K and V, iterate over Q blocks to accumulate dK and dV.
// With a dq_accumulator_ref (a float32 output aliased to zeros), each step also adds its share of
// dQ, ds @ k, to dQ's rows with atomic adds: five dots per block pair instead of the seven of the
// two scans, as FlashAttention-2's backward does (scan #2 then does not run).
void backward_dkdv_scan(Ref q_ref, Ref k_ref, Ref v_ref, Ref segment_ids_ref, Ref do_scaled_ref, Ref lse_ref,
                        Ref delta_ref, Ref dq_accumulator_ref, Ref dk_ref, Ref dv_ref, float sm_scale, bool causal,
                        int64_t block_q1, int64_t block_k1, int64_t block_d) {
  const int64_t seq_len = q_ref.shape()[0];
  Value start_k = pl::program_id(2);
  pl::DSlice curr_k_slice = pl::dslice(start_k * block_k1, block_k1);
  Value dv = jnp::zeros({block_k1, block_d}, pl::f32);
  Value dk = jnp::zeros({block_k1, block_d}, pl::f32);
  Value v = pl::load(v_ref, pl::idx(curr_k_slice, pl::slice()));
  Value k = pl::load(k_ref, pl::idx(curr_k_slice, pl::slice()));
  Value span_k = start_k * block_k1 + jnp::arange(block_k1);
  Value kv_segment_ids;
  if (segment_ids_ref) kv_segment_ids = pl::load(segment_ids_ref, pl::idx(curr_k_slice));

  auto inner_loop_dkdv = [&](Value start_q, std::tuple<Value, Value> carry) {
    auto [dv_, dk_] = carry;
    pl::DSlice curr_q_slice = pl::dslice(start_q * block_q1, block_q1);
    Value q = pl::load(q_ref, pl::idx(curr_q_slice, pl::slice()));
    Value qk = pl::dot(q, k.T());
    if (sm_scale != 1.0f) qk *= sm_scale;
    if (causal || segment_ids_ref) {
      Value mask;
      if (segment_ids_ref) {
        Value q_segment_ids = pl::load(segment_ids_ref, pl::idx(curr_q_slice));
        mask = segment_mask(q_segment_ids, kv_segment_ids);
      }
      if (causal) {
        Value span_q = start_q * block_q1 + jnp::arange(block_q1);
        Value causal_mask = span_q(pl::slice(), pl::None) >= span_k(pl::None, pl::slice());
        mask = mask.valid() ? jnp::logical_and(mask, causal_mask) : causal_mask;
      }
      qk = jnp::where(mask, qk, kDefaultMaskValue);
    }
    Value lse = pl::load(lse_ref, pl::idx(curr_q_slice));
    Value di = pl::load(delta_ref, pl::idx(curr_q_slice));
    Value dout = pl::load(do_scaled_ref, pl::idx(curr_q_slice, pl::slice()));

    Value p = jnp::exp(qk - lse(pl::slice(), pl::None));
    dv_ = dv_ + pl::dot(p.astype(dout.dtype()).T(), dout);
    Value dp = jnp::zeros({block_q1, block_k1}, pl::f32) - di(pl::slice(), pl::None);
    dp = dp + pl::dot(dout, v.T());
    Value ds = p * dp;
    if (sm_scale != 1.0f) ds = ds * sm_scale;
    Value ds_low = ds.astype(q_ref.dtype());
    dk_ = dk_ + pl::dot(ds_low.T(), q);
    if (dq_accumulator_ref) pl::atomic_add(dq_accumulator_ref, pl::idx(curr_q_slice, pl::slice()), pl::dot(ds_low, k));
    return std::tuple{dv_, dk_};
  };
  Value lower_bound = causal ? pl::lax::div(start_k * block_k1, block_q1) : Value(0);
  std::tie(dv, dk) = pl::lax::fori_loop(lower_bound, pl::cdiv(seq_len, block_q1), inner_loop_dkdv, std::tuple{dv, dk});
  dv_ref[pl::all] = dv.astype(dv_ref.dtype());
  dk_ref[pl::all] = dk.astype(dk_ref.dtype());
}

// dK, dV and dQ in parallel across the sequence.
void mha_backward_kernel(Ref q_ref, Ref k_ref, Ref v_ref, Ref segment_ids_ref, Ref out_ref, Ref do_scaled_ref,
                         Ref lse_ref, Ref delta_ref,  // inputs
                         Ref dq_ref, Ref dk_ref, Ref dv_ref,  // outputs
                         float sm_scale, bool causal, int64_t block_q1, int64_t block_k1, int64_t block_q2,
                         int64_t block_k2, int64_t block_d) {
  (void)out_ref;  // not needed
  const int64_t seq_len = q_ref.shape()[0];
  backward_dkdv_scan(q_ref, k_ref, v_ref, segment_ids_ref, do_scaled_ref, lse_ref, delta_ref, Ref(), dk_ref, dv_ref,
                     sm_scale, causal, block_q1, block_k1, block_d);

  // Scan #2: dQ. Keep a block of Q; iterate over K and V blocks to accumulate dQ.
  Value start_q = pl::program_id(2);
  pl::DSlice curr_q_slice = pl::ds(start_q * block_q2, block_q2);
  Value span_q = start_q * block_q2 + jnp::arange(block_q2);
  Value dq = jnp::zeros({block_q2, block_d}, pl::f32);
  Value q = pl::load(q_ref, pl::idx(curr_q_slice, pl::slice()));
  Value q_segment_ids;
  if (segment_ids_ref) q_segment_ids = pl::load(segment_ids_ref, pl::idx(curr_q_slice));
  Value lse = pl::load(lse_ref, pl::idx(curr_q_slice));
  Value dout = pl::load(do_scaled_ref, pl::idx(curr_q_slice, pl::slice()));
  Value di = pl::load(delta_ref, pl::idx(curr_q_slice));

  auto inner_loop_dq = [&](Value start_k2, Value dq_) {
    pl::DSlice curr_k2_slice = pl::dslice(start_k2 * block_k2, block_k2);
    Value k2 = pl::load(k_ref, pl::idx(curr_k2_slice, pl::slice()));
    Value v2 = pl::load(v_ref, pl::idx(curr_k2_slice, pl::slice()));
    Value qk = pl::dot(q, k2.T());
    if (sm_scale != 1.0f) qk *= sm_scale;
    if (causal || segment_ids_ref) {
      Value mask;
      if (segment_ids_ref) {
        Value kv_ids = pl::load(segment_ids_ref, pl::idx(curr_k2_slice));
        mask = segment_mask(q_segment_ids, kv_ids);
      }
      if (causal) {
        Value span_k2 = start_k2 * block_k2 + jnp::arange(block_k2);
        Value causal_mask = span_q(pl::slice(), pl::None) >= span_k2(pl::None, pl::slice());
        mask = mask.valid() ? jnp::logical_and(mask, causal_mask) : causal_mask;
      }
      qk = jnp::where(mask, qk, kDefaultMaskValue);
    }
    Value p = jnp::exp(qk - lse(pl::slice(), pl::None));
    Value dp = jnp::zeros({block_q2, block_k2}, pl::f32) - di(pl::slice(), pl::None);
    dp = dp + pl::dot(dout, v2.T());
    Value ds = p * dp;
    if (sm_scale != 1.0f) ds = ds * sm_scale;
    return dq_ + pl::dot(ds.astype(k2.dtype()), k2).astype(dq_.dtype());
  };
  Value upper_bound = causal ? pl::lax::div((start_q + 1) * block_q2, block_k2) : Value(pl::cdiv(seq_len, block_k2));
  dq = pl::lax::fori_loop(0, upper_bound, inner_loop_dq, dq);
  dq_ref[pl::all] = dq.astype(dq_ref.dtype());
}

struct Dims {
  int64_t batch, seq_len, num_heads, head_dim, block_q, block_k;
};

Dims check_inputs(const char* name, const Array& q, const Array& k, const Array& v, const Array& segment_ids,
                  const MhaOptions& o) {
  PL_CHECK(q.ndim() == 4, name, ": q must be (batch, seq_len, num_heads, head_dim), got ", shape_str(q.shape()));
  PL_CHECK(k.shape() == q.shape() && v.shape() == q.shape(), name, ": q, k, v shapes differ: ", shape_str(q.shape()),
           ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  PL_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), name, ": q, k, v dtypes differ");
  Dims d{q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3], std::min(o.block_q, q.shape()[1]),
         std::min(o.block_k, q.shape()[1])};
  if (segment_ids.defined())
    PL_CHECK(segment_ids.shape() == Shape({d.batch, d.seq_len}) && segment_ids.dtype() == i32, name,
             ": segment_ids must be int32 (batch, seq_len) = ", shape_str({d.batch, d.seq_len}), ", got ",
             dtype_name(segment_ids.dtype()), shape_str(segment_ids.shape()));
  PL_CHECK(d.block_q > 0 && d.block_k > 0, name, ": block sizes must be positive, got block_q ", o.block_q,
           " and block_k ", o.block_k);
  // The seed's kernels read whole blocks of k and v: a partial last block would read past the end.
  PL_CHECK(d.seq_len % d.block_q == 0 && d.seq_len % d.block_k == 0, name, ": seq_len (", d.seq_len,
           ") must be a multiple of block_q (", d.block_q, ") and block_k (", d.block_k, ")");
  return d;
}

// The kernel parameters that the Callables capture (their blocks and masks), for call_key.
std::string params_key(const Dims& d, const MhaOptions& o) {
  return detail::cat(d.batch, ",", d.seq_len, ",", d.num_heads, ",", d.head_dim, ",", d.block_q, ",", d.block_k, ",",
                     exact(o.sm_scale), ",", o.causal);
}

CallOptions call_options(const char* name, Shape grid, const MhaOptions& o, int num_stages) {
  CallOptions c;
  c.name = name;
  c.grid = std::move(grid);
  c.backend = o.backend;
  c.debug = o.debug;
  c.compiler_params.fast_math = o.fast_math;
  c.compiler_params.num_warps = o.num_warps;
  c.compiler_params.num_stages = num_stages;
  return c;
}

BlockSpec q_block(const Dims& d) {
  return BlockSpec({None, d.block_q, None, d.head_dim}, [](Index i, Index j, Index h) { return idx(j, i, h, 0); });
}
BlockSpec kv_block(const Dims& d) {
  return BlockSpec({None, d.seq_len, None, d.head_dim}, [](Index, Index j, Index h) { return idx(j, 0, h, 0); });
}
BlockSpec seg_block(const Dims& d, const Array& segment_ids) {
  if (!segment_ids.defined()) return BlockSpec();
  return BlockSpec({None, d.seq_len}, [](Index, Index j, Index) { return idx(j, 0); });
}

// The forward's pallas_call for these blocks, and its key.
std::pair<std::string, Callable<std::vector<Array>>> forward_call(const Array& q, const Array& k, const Array& v,
                                                                  const Array& seg, const MhaOptions& o, bool residual) {
  Dims d = check_inputs(residual ? "mha_forward" : "mha", q, k, v, seg, o);
  CallOptions c = call_options("mha_forward", {cdiv(d.seq_len, d.block_q), d.batch, d.num_heads}, o, o.num_stages);
  c.in_specs = {q_block(d), kv_block(d), kv_block(d), seg_block(d, seg)};
  c.out_specs = {q_block(d)};
  std::vector<ShapeDtype> outs{{q.shape(), q.dtype()}};
  if (residual) {
    c.out_specs.push_back(BlockSpec({None, None, d.block_q}, [](Index i, Index j, Index h) { return idx(j, h, i); }));
    outs.push_back({{d.batch, d.num_heads, d.seq_len}, f32});
  }
  auto kernel = [o, d](Refs r) {
    mha_forward_kernel(r[0], r[1], r[2], r[3], r[4], r.subspan(5), o.sm_scale, o.causal, d.block_q, d.head_dim,
                       d.block_k);
  };
  const std::string key = call_key(params_key(d, o) + (residual ? ",lse" : "") + (seg.defined() ? ",seg" : ""), c, outs);
  return {key, cached_call<std::vector<Array>>(key, [&] { return pallas_call(kernel, outs, c); })};
}

std::vector<Array> forward(const Array& q, const Array& k, const Array& v, const Array& seg, const MhaOptions& o,
                           bool residual) {
  if (!o.autotune) return forward_call(q, k, v, seg, o, residual).second.call({q, k, v, seg});
  // The block shapes that divide the sequence, timed once per signature and device (autotune).
  std::string key = "autotune";
  std::vector<std::pair<std::string, Callable<std::vector<Array>>>> candidates;
  for (auto [bq, bk] : {std::pair<int64_t, int64_t>{128, 128}, {128, 64}, {64, 128}, {64, 64}}) {
    if (q.ndim() != 4 || k.ndim() != 4 || q.shape()[1] % bq != 0 || k.shape()[1] % bk != 0) continue;
    MhaOptions c = o;
    c.block_q = bq;
    c.block_k = bk;
    c.autotune = false;
    auto [ck, call] = forward_call(q, k, v, seg, c, residual);
    key += "|" + ck;
    candidates.emplace_back("block_q " + std::to_string(bq) + ", block_k " + std::to_string(bk), call);
  }
  if (candidates.empty()) return forward_call(q, k, v, seg, o, residual).second.call({q, k, v, seg});  // its error
  return cached_call<std::vector<Array>>(key, [&] {
           return autotune<std::vector<Array>>(residual ? "mha_forward" : "mha", candidates);
         }).call({q, k, v, seg});
}

}  // namespace

// The seed's wiring: mha = jax.custom_vjp(mha), mha.defvjp(_mha_forward, _mha_backward), so that
// grad of a loss over mha runs the backward kernels. segment_ids are not differentiated (a none
// Array is not an argument of the custom_vjp function at all).
Array mha(const Array& q, const Array& k, const Array& v, const Array& segment_ids, const MhaOptions& options) {
  const Array seg = segment_ids;
  auto primal = [options, seg](const Array& q_, const Array& k_, const Array& v_) {
    return forward(q_, k_, v_, seg, options, false)[0];
  };
  auto fwd = [options, seg](const Array& q_, const Array& k_, const Array& v_) {
    auto [out, lse] = mha_forward(q_, k_, v_, seg, options);
    return std::make_pair(out, std::make_tuple(q_, k_, v_, out, lse));
  };
  auto bwd = [options, seg](const std::tuple<Array, Array, Array, Array, Array>& res, const Array& dout) {
    const auto& [q_, k_, v_, out, lse] = res;
    return mha_backward(q_, k_, v_, seg, out, lse, dout, options);
  };
  return custom_vjp("mha", primal, fwd, bwd)(q, k, v);
}

std::tuple<Array, Array> mha_forward(const Array& q, const Array& k, const Array& v, const Array& segment_ids,
                                     const MhaOptions& options) {
  auto r = forward(q, k, v, segment_ids, options, true);
  return {r[0], r[1]};
}

Array mha_preprocess_backward(const Array& out, const Array& dout, const MhaOptions& o) {
  PL_CHECK(out.ndim() == 4 && dout.shape() == out.shape(), "mha_preprocess_backward: out and dout must have one (batch, seq_len, num_heads, head_dim) shape, got ",
           shape_str(out.shape()), " and ", shape_str(dout.shape()));
  Dims d{out.shape()[0], out.shape()[1], out.shape()[2], out.shape()[3], std::min(o.block_q, out.shape()[1]), 0};
  PL_CHECK(d.block_q > 0 && d.seq_len % d.block_q == 0, "mha_preprocess_backward: seq_len (", d.seq_len,
           ") must be a positive multiple of block_q (", d.block_q, ")");
  CallOptions c = call_options("mha_preprocess_backward", {cdiv(d.seq_len, d.block_q), d.batch, d.num_heads}, o,
                               o.backward_num_stages);
  c.in_specs = {q_block(d), q_block(d)};
  c.out_specs = {BlockSpec({None, None, d.block_q}, [](Index i, Index j, Index h) { return idx(j, h, i); })};
  const ShapeDtype result({d.batch, d.num_heads, d.seq_len}, f32);
  const std::string key = call_key(detail::cat(d.batch, ",", d.seq_len, ",", d.num_heads, ",", d.head_dim, ",", d.block_q), c, {result});
  return cached_call<Array>(key, [&] { return pallas_call(preprocess_backward_kernel, result, c); })(out, dout);
}

std::tuple<Array, Array, Array> mha_backward(const Array& q, const Array& k, const Array& v, const Array& segment_ids,
                                             const Array& out, const Array& lse, const Array& dout,
                                             const MhaOptions& options) {
  PL_CHECK(options.backward_block >= 0, "mha_backward: backward_block must be positive, or 0 for the forward's "
           "blocks, got ", options.backward_block);
  const bool atomic_dq = options.backward_dq == MhaBackwardDq::Atomic;
  PL_CHECK(options.backward_block_q >= 0, "mha_backward: backward_block_q must be positive, or 0 for backward_block, got ",
           options.backward_block_q);
  PL_CHECK(options.backward_block_q == 0 || (options.backward_block > 0 && atomic_dq),
           "mha_backward: backward_block_q (", options.backward_block_q, ") needs backward_dq = Atomic and a "
           "positive backward_block (the seed's separate dq scan takes its query and key blocks equal), got "
           "backward_block ", options.backward_block);
  MhaOptions o = options;  // the backward's blocks
  if (o.backward_block > 0) {
    o.block_k = o.backward_block;
    o.block_q = o.backward_block_q > 0 ? o.backward_block_q : o.backward_block;
  }
  Dims d = check_inputs("mha_backward", q, k, v, segment_ids, o);
  PL_CHECK(atomic_dq || d.block_q == d.block_k, "mha_backward: block_q (", d.block_q, ") must equal block_k (", d.block_k,
           "): as in the seed, dq is computed in blocks of block_q over the grid of key blocks (or set backward_block)");
  // The preprocess in blocks of 16 rows (of the backward's when smaller): at 64 rows its programs
  // held too many elements per thread for more than two to fit an SM (H100, d128: 0.163 -> 0.070 ms;
  // stop 30, job 8).
  MhaOptions pre = o;
  pre.block_q = std::gcd<int64_t>(d.block_q, 16);
  Array delta = mha_preprocess_backward(out, dout, pre);
  CallOptions c = call_options(atomic_dq ? "mha_backward_atomic_dq" : "mha_backward",
                               {d.batch, d.num_heads, cdiv(d.seq_len, d.block_k)}, o, o.backward_num_stages);
  auto full = BlockSpec({None, d.seq_len, None, d.head_dim}, [](Index i, Index j, Index) { return idx(i, 0, j, 0); });
  auto row = BlockSpec({None, None, d.seq_len}, [](Index i, Index j, Index) { return idx(i, j, 0); });
  BlockSpec seg = segment_ids.defined()
                      ? BlockSpec({None, d.seq_len}, [](Index i, Index, Index) { return idx(i, 0); })
                      : BlockSpec();
  c.in_specs = {full, full, full, seg, full, full, row, row};
  auto grad_block = [](int64_t block, int64_t head_dim) {
    return BlockSpec({None, block, None, head_dim}, [](Index i, Index j, Index h) { return idx(i, h, j, 0); });
  };
  c.out_specs = {grad_block(d.block_q, d.head_dim), grad_block(d.block_k, d.head_dim), grad_block(d.block_k, d.head_dim)};
  std::vector<ShapeDtype> outs{{q.shape(), q.dtype()}, {k.shape(), k.dtype()}, {v.shape(), v.dtype()}};
  std::vector<Array> args{q, k, v, segment_ids, out, dout, lse, delta};
  std::function<void(Refs)> kernel = [o, d](Refs r) {
    mha_backward_kernel(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], o.sm_scale, o.causal,
                        d.block_q, d.block_k, d.block_q, d.block_k, d.head_dim);
  };
  if (atomic_dq) {  // dq accumulates in float32 zeros (input 8, aliased to output 0)
    c.in_specs.push_back(full);
    c.out_specs[0] = full;  // every program adds to the rows of all its head's q blocks
    c.input_output_aliases = {{8, 0}};
    outs[0] = {q.shape(), f32};
    args.push_back(jnp::full_like(q, 0.0, f32));
    kernel = [o, d](Refs r) {  // r[8] is the aliased input, r[9] the dq output it became
      backward_dkdv_scan(r[0], r[1], r[2], r[3], r[5], r[6], r[7], r[9], r[10], r[11], o.sm_scale, o.causal,
                         d.block_q, d.block_k, d.head_dim);
    };
  }
  const std::string key = call_key(params_key(d, o) + (segment_ids.defined() ? ",seg" : ""), c, outs);
  auto r = cached_call<std::vector<Array>>(key, [&] { return pallas_call(kernel, outs, c); }).call(args);
  return {atomic_dq ? jnp::astype(r[0], q.dtype()) : r[0], r[1], r[2]};
}

MhaVjp mha_vjp(const Array& q, const Array& k, const Array& v, const Array& segment_ids, const MhaOptions& options) {
  auto [out, lse] = mha_forward(q, k, v, segment_ids, options);
  MhaVjp r;
  r.out = out;
  r.backward = [=, out = out, lse = lse](const Array& dout) {
    return mha_backward(q, k, v, segment_ids, out, lse, dout, options);
  };
  return r;
}

}  // namespace palladium::ops
