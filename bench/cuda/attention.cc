// cuda_bench's attention benchmarks: the seed attention forward and forward + backward (ops::mha
// and its custom VJP) on the peers' problems, the backward's preprocess alone, jit(grad) through
// it, the autotuner's choice against the default blocks, the launches Nsight Compute profiles, and
// the paged-attention decode. Every row is checked against float64 before it is reported.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <palladium/device.h>
#include <palladium/palladium.h>

#include "bench/cuda/harness.h"
#include "ops/attention.h"
#include "ops/paged_attention.h"

namespace pl = palladium;

namespace pl_bench {
namespace {

// ---------------------------------------------------------------- attention

// The attention problems of the peers' tables: bf16, batch * seq = 16384 tokens, hidden 2048,
// head_dim 64 and 128, seq 2048 and 8192, causal and not; fresh random q, k, v, dout on the GPU.
struct AttentionCase {
  int64_t d, seq, batch, heads;
  bool causal;
  pl::Array q, k, v, dout;
  double forward_flops() const { return 4.0 * batch * heads * seq * seq * d / (causal ? 2 : 1); }
  std::string tag() const {
    return "b" + std::to_string(batch) + " s" + std::to_string(seq) + " h" + std::to_string(heads) + " d" +
           std::to_string(d) + " c" + std::to_string(causal);
  }
};
// Head 0 of batch 0 of a (batch, seq, heads, d) array, on the host: (1, seq, 1, d).
pl::Array first_head(const pl::Array& a) {
  const pl::Array h = pl::to_host(a);
  const int64_t seq = h.shape()[1], heads = h.shape()[2], d = h.shape()[3];
  pl::Array out({1, seq, 1, d}, h.dtype());
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t e = 0; e < d; ++e) out.set(t * d + e, h.get((t * heads) * d + e));
  return out;
}

// PL_BENCH_ATTN_D and PL_BENCH_ATTN_SEQ restrict the cases to one head size or sequence length.
void for_each_attention_case(const std::function<void(const AttentionCase&)>& run) {
  auto only = [](const char* var, int64_t x) {
    const char* v = std::getenv(var);
    return !v || !*v || std::atoll(v) == x;
  };
  for (int64_t d : {64, 128}) {
    if (!only("PL_BENCH_ATTN_D", d)) continue;
    for (int64_t seq : {2048, 8192}) {
      if (!only("PL_BENCH_ATTN_SEQ", seq)) continue;
      AttentionCase c{d, seq, 16384 / seq, 2048 / d, false, {}, {}, {}, {}};
      const pl::Shape shape{c.batch, seq, c.heads, d};
      c.q = pl::to_device(pl::random::normal(pl::random::key(5), shape, pl::bf16), gpu());
      c.k = pl::to_device(pl::random::normal(pl::random::key(6), shape, pl::bf16), gpu());
      c.v = pl::to_device(pl::random::normal(pl::random::key(7), shape, pl::bf16), gpu());
      c.dout = pl::to_device(pl::random::normal(pl::random::key(9), shape, pl::bf16), gpu());
      for (bool causal : {false, true}) {
        c.causal = causal;
        run(c);
      }
    }
  }
}

}  // namespace

// MhaOptions::autotune against the default blocks (128 x 128), forward, seq 2048, both head sizes:
// the tuned call's first run times its candidates (PALLADIUM_AUTOTUNE_VERBOSE=1 prints them).
void bench_autotune() {
  for_each_attention_case([&](const AttentionCase& c) {
    if (c.seq != 2048) return;
    double base_ms = 0;
    for (bool tuned : {false, true}) {
      pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d))),
                            .causal = c.causal, .block_q = 128, .block_k = 128, .backend = "cuda"};
      o.autotune = tuned;
      try {
        pl::Array out;
        const double ms = kernel_ms([&] { out = pl::ops::mha(c.q, c.k, c.v, pl::Array(), o); }, 2, 10);
        if (!tuned) base_ms = ms;
        report("attn fwd", c.tag(), tuned ? "palladium mha, autotuned blocks" : "palladium mha, blocks 128 x 128", ms,
               tflops(c.forward_flops(), ms) + (tuned ? "; " + fixed(base_ms / ms) + "x the default" : ""));
        auto ref = pl::ops::mha_reference(first_head(c.q), first_head(c.k), first_head(c.v), pl::Array(), o.sm_scale,
                                          c.causal);
        check("attn fwd " + c.tag() + (tuned ? " autotuned" : " default") + " head 0 vs float64",
              pl::rel_error(first_head(out), ref.out), 5e-3);
      } catch (const std::exception& e) {
        fail("attention autotune " + c.tag() + ": " + e.what());
      }
    }
  });
}

// One launch of each kernel the profile looks at (tools/gpu_run.sh profile runs Nsight Compute on
// them): the bf16 matmul 4096^3 at 128 x 256 tiles and 4 stages, then for the first attention case
// (PL_BENCH_ATTN_D / PL_BENCH_ATTN_SEQ pick it; PL_BENCH_PROFILE_CAUSAL=1 masks it) the forward at
// blocks 128 x 128 and the forward and backward at the defaults of the fwd+bwd rows (128, backward 64).
void bench_profile_launches() {
  const int64_t n = 4096;
  const pl::Array a = pl::to_device(pl::random::normal(pl::random::key(1), {n, n}, pl::bf16), gpu());
  const pl::Array b = pl::to_device(pl::random::normal(pl::random::key(2), {n, n}, pl::bf16), gpu());
  pl::Array out = matmul_call(n, 128, 256, 64, 8, 4)(a, b);
  bool done = false;
  for_each_attention_case([&](const AttentionCase& c) {
    if (done) return;
    done = true;
    const char* causal = std::getenv("PL_BENCH_PROFILE_CAUSAL");
    pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d))),
                          .causal = causal && std::string(causal) == "1", .block_q = 128, .block_k = 128,
                          .backend = "cuda"};
    out = pl::ops::mha(c.q, c.k, c.v, pl::Array(), o);
    o.backward_block = 64;
    (void)pl::ops::mha_vjp(c.q, c.k, c.v, pl::Array(), o).backward(c.dout);
  });
  pl::to_host(out);
}

void bench_attention() {
  // fast_math (the default of ops::mha, as Triton's exp); PL_BENCH_EXACT_EXP=1 adds the exact
  // libdevice exp for comparison.
  const char* exact_env = std::getenv("PL_BENCH_EXACT_EXP");
  const bool exact_too = exact_env && std::string(exact_env) == "1";
  for_each_attention_case([&](const AttentionCase& c) {
    for (int64_t bk : {64, 128}) {
      for (bool fast : {true, false}) {
        if (!fast && !exact_too) continue;
        pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d))),
                              .causal = c.causal, .block_q = 128, .block_k = bk, .backend = "cuda", .fast_math = fast};
        const std::string name = "palladium mha bq128 bk" + std::to_string(bk) + (fast ? "" : " exact-exp");
        try {
          pl::Array out;
          const double ms = kernel_ms([&] { out = pl::ops::mha(c.q, c.k, c.v, pl::Array(), o); }, 2, 10);
          report("attn fwd", c.tag(), name, ms, tflops(c.forward_flops(), ms));
          if (c.seq == 2048) {  // head 0 against float64 (the float64 reference at 8192 takes too long)
            auto ref = pl::ops::mha_reference(first_head(c.q), first_head(c.k), first_head(c.v), pl::Array(),
                                              o.sm_scale, c.causal);
            check("attn fwd " + c.tag() + " " + name + " head 0 vs float64", pl::rel_error(first_head(out), ref.out),
                  5e-3);
          }
        } catch (const std::exception& e) {
          fail("attention " + c.tag() + " " + name + ": " + e.what());
        }
      }
    }
  });
}

// Forward + backward through the custom VJP (forward with residuals, preprocess, dq/dk/dv),
// counted as 3.5x the forward's flops like the peers.
void bench_attention_backward() {
  // Forward blocks, backward blocks, backward stages (0: the default, the seed's 2).
  // The defaults are forward 128 and backward 64. On an H100 (stop 26) a third backward stage
  // (one program per SM instead of two) ran at 0.73-0.93x these, and backward blocks of 128 at
  // 0.75-1.0x; 8 warps at block 64 had measured 0.55-0.7x the backend's 4.
  // "atomic" (PL_BENCH_ATTN_ATOMIC=1): dq by atomic adds in the dk/dv scan (MhaBackwardDq::Atomic),
  // five dots per block pair instead of the seed's seven (0.74-0.87x the seed's way on an H100,
  // stop 30; 0.75-0.85x in stop 31 job 5). Left out by default: with it the stage ran past
  // gpu_run.sh's 150 s on a fresh machine (stop 31 job 5).
  struct Config {
    int64_t fwd_block, bwd_block;
    int stages;
    pl::ops::MhaBackwardDq dq;
    int64_t bwd_block_q = 0;  // atomic only: a query block other than bwd_block (its key block)
  };
  using Dq = pl::ops::MhaBackwardDq;
  const char* atomic_env = std::getenv("PL_BENCH_ATTN_ATOMIC");
  std::vector<Config> configs{{128, 64, 0, Dq::SeparateLoop}, {64, 64, 0, Dq::SeparateLoop}};
  if (atomic_env && std::string(atomic_env) == "1") configs.push_back({128, 64, 0, Dq::Atomic});
  // PL_BENCH_ATTN_BWD_CONFIGS="fwd/bwd/stages[/atomic],...", e.g. "128/64/0,128/128/0/atomic", replaces the list
  // (to try other backward blocks within one stage's time); bwd may be QxK with atomic, e.g.
  // "128/64x128/0/atomic" for 64 query rows by 128 keys.
  if (const char* list = std::getenv("PL_BENCH_ATTN_BWD_CONFIGS"); list && *list) {
    configs.clear();
    std::stringstream items(list);
    for (std::string item; std::getline(items, item, ',');) {
      Config cfg{0, 0, 0, Dq::SeparateLoop};
      char dq[16] = "";
      int fields = std::sscanf(item.c_str(), "%ld/%ldx%ld/%d/%15s", &cfg.fwd_block, &cfg.bwd_block_q, &cfg.bwd_block,
                               &cfg.stages, dq);
      if (fields >= 4) {
        --fields;  // counted as fwd/bwd/stages[/atomic]
      } else {
        cfg.bwd_block_q = 0;
        fields = std::sscanf(item.c_str(), "%ld/%ld/%d/%15s", &cfg.fwd_block, &cfg.bwd_block, &cfg.stages, dq);
      }
      const std::string dq_name = dq;
      if (fields < 3 || cfg.fwd_block <= 0 || cfg.bwd_block <= 0 || cfg.stages < 0 || cfg.bwd_block_q < 0 ||
          (fields == 4 && dq_name != "atomic") || (cfg.bwd_block_q > 0 && dq_name != "atomic")) {
        fail("PL_BENCH_ATTN_BWD_CONFIGS: '" + item +
             "' is not fwd/bwd/stages[/atomic] (positive blocks, bwd as QxK only with atomic, stages 0 for the default)");
        return;
      }
      if (dq_name == "atomic") cfg.dq = Dq::Atomic;
      configs.push_back(cfg);
    }
  }
  for_each_attention_case([&configs](const AttentionCase& c) {
    for (const Config& cfg : configs) {
      pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d))),
                            .causal = c.causal, .block_q = cfg.fwd_block, .block_k = cfg.fwd_block, .backend = "cuda"};
      o.backward_block = cfg.bwd_block;
      o.backward_block_q = cfg.bwd_block_q;
      o.backward_dq = cfg.dq;
      if (cfg.stages) o.backward_num_stages = cfg.stages;
      const std::string blocks = (cfg.bwd_block_q ? std::to_string(cfg.bwd_block_q) + "x" : "") + std::to_string(cfg.bwd_block);
      const std::string name = "palladium mha_vjp f" + std::to_string(cfg.fwd_block) + " b" + blocks +
                               (cfg.stages ? " s" + std::to_string(cfg.stages) : "") + (cfg.dq == Dq::Atomic ? " atomic" : "");
      try {
        const double ms = events_ms([&] { (void)pl::ops::mha_vjp(c.q, c.k, c.v, pl::Array(), o).backward(c.dout); }, 3);
        report("attn fwd+bwd", c.tag(), name, ms, tflops(3.5 * c.forward_flops(), ms));
        if (c.seq == 2048) {  // the gradients of head 0 against float64
          auto [dq, dk, dv] = pl::ops::mha_vjp(c.q, c.k, c.v, pl::Array(), o).backward(c.dout);
          auto [rq, rk, rv] = pl::ops::mha_reference_backward(first_head(c.q), first_head(c.k), first_head(c.v),
                                                              pl::Array(), first_head(c.dout), o.sm_scale, c.causal);
          const double err = std::max({pl::rel_error(first_head(dq), rq), pl::rel_error(first_head(dk), rk),
                                       pl::rel_error(first_head(dv), rv)});
          check("attn fwd+bwd " + c.tag() + " " + name + " head 0 gradients vs float64", err, 1e-2);
        }
      } catch (const std::exception& e) {
        fail("attention bwd " + c.tag() + " " + name + ": " + e.what());
      }
    }
  });
}

// The backward's preprocess, delta = sum(out * dout, -1), alone at several row blocks (the
// backward passes its own, 64 by default), in GB/s of the two bf16 inputs read, each result
// checked against float64 first.
void bench_attention_preprocess() {
  for_each_attention_case([](const AttentionCase& c) {
    if (c.causal) return;  // the preprocess does not depend on the mask
    // Head 0 of batch 0 in float64, on the host.
    const pl::Array ref = pl::jnp::reshape(
        pl::jnp::sum(first_head(c.q).astype(pl::f64) * first_head(c.dout).astype(pl::f64), {-1}), {1, 1, c.seq});
    for (int64_t block : {16, 32, 64, 128}) {
      pl::ops::MhaOptions o{.block_q = block, .backend = "cuda"};
      const std::string name = "palladium preprocess b" + std::to_string(block);
      try {
        const pl::Array delta = pl::to_host(pl::ops::mha_preprocess_backward(c.q, c.dout, o));
        pl::Array head0({1, 1, c.seq}, pl::f32);
        for (int64_t t = 0; t < c.seq; ++t) head0.set(t, delta.get(t));
        check("attn preprocess " + c.tag() + " " + name + " head 0 vs float64", pl::rel_error(head0, ref), 1e-5);
        const double ms = events_ms([&] { (void)pl::ops::mha_preprocess_backward(c.q, c.dout, o); }, 10);
        report("attn preprocess", c.tag(), name, ms, gbps(2.0 * 2.0 * c.batch * c.seq * c.heads * c.d, ms));
      } catch (const std::exception& e) {
        fail("attention preprocess " + c.tag() + " " + name + ": " + e.what());
      }
    }
  });
}

// grad of the attention loss sum(mha(q, k, v) * dout) through the custom VJP (eager and under jit)
// against the forward and backward kernels called by hand (mha_vjp(...).backward(dout)): the
// program level's overhead. The loss adds one multiply and one sum over the output.
void bench_grad_attention() {
  for_each_attention_case([](const AttentionCase& c) {
    if (c.seq != 2048) return;
    pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d))), .causal = c.causal,
                          .block_q = 128, .block_k = 128, .backend = "cuda"};
    const pl::Array dout = c.dout;
    auto loss = [o, dout](const pl::Array& q, const pl::Array& k, const pl::Array& v) {
      return pl::jnp::sum(pl::ops::mha(q, k, v, pl::Array(), o) * dout);
    };
    auto grad = pl::grad<0, 1, 2>(loss);
    auto jitted = pl::jit(pl::grad<0, 1, 2>(loss));
    try {
      const double by_hand = events_ms([&] { (void)pl::ops::mha_vjp(c.q, c.k, c.v, pl::Array(), o).backward(c.dout); }, 3);
      const double eager = events_ms([&] { (void)grad(c.q, c.k, c.v); }, 3);
      const double jit = events_ms([&] { (void)jitted(c.q, c.k, c.v); }, 3);
      auto [dq, dk, dv] = jitted(c.q, c.k, c.v);
      auto [hq, hk, hv] = pl::ops::mha_vjp(c.q, c.k, c.v, pl::Array(), o).backward(c.dout);
      check("grad attention " + c.tag() + " jit(grad) vs by hand",
            std::max({pl::rel_error(pl::to_host(dq).astype(pl::f64), pl::to_host(hq).astype(pl::f64)),
                      pl::rel_error(pl::to_host(dk).astype(pl::f64), pl::to_host(hk).astype(pl::f64)),
                      pl::rel_error(pl::to_host(dv).astype(pl::f64), pl::to_host(hv).astype(pl::f64))}),
            1e-2);
      report("attn grad", c.tag(), "mha_vjp forward+backward by hand", by_hand, "");
      report("attn grad", c.tag(), "grad(loss), eager", eager, std::to_string(by_hand / eager).substr(0, 4) + "x by hand");
      report("attn grad", c.tag(), "jit(grad(loss))", jit, std::to_string(by_hand / jit).substr(0, 4) + "x by hand");
    } catch (const std::exception& e) {
      fail("grad attention " + c.tag() + ": " + e.what());
    }
  });
}

// Paged attention decode, bf16: batch 64, 32 query heads on 8 kv heads, head_dim 128, pages of 16
// tokens, up to 128 pages (2048 tokens) per sequence, random lengths; the peer
// (bench/peers/paged_attention_torch.py) gathers the pages and calls SDPA on the same shapes.
// Rate: the bytes of the keys and values the sequences really hold.
void bench_paged() {
  const int64_t batch = 64, heads = 32, kv_heads = 8, hd = 128, page = 16, per_seq = 128, pool = batch * per_seq;
  auto keys = pl::random::split(pl::random::key(41), 5);
  // Lengths from one formula that the torch peer uses too (so both attend over the same tokens).
  pl::Array lengths({batch}, pl::i32);
  for (int64_t b = 0; b < batch; ++b) lengths.set(b, static_cast<double>(1 + (b * 977) % (per_seq * page)));
  // Each sequence's pages are a random slice of a shuffled pool (no page shared).
  pl::Array perm = pl::random::uniform(keys[1], {pool}, pl::f64, 0, 1);
  std::vector<std::pair<double, int64_t>> order;
  for (int64_t i = 0; i < pool; ++i) order.emplace_back(perm.get(i), i);
  std::sort(order.begin(), order.end());
  pl::Array table({batch, per_seq}, pl::i32);
  for (int64_t i = 0; i < pool; ++i) table.set(i, static_cast<double>(order[static_cast<size_t>(i)].second));
  pl::Array q = pl::random::normal(keys[2], {batch, heads, hd}, pl::bf16);
  pl::Array k = pl::random::normal(keys[3], {kv_heads, pool, page, hd}, pl::bf16);
  pl::Array v = pl::random::normal(keys[4], {kv_heads, pool, page, hd}, pl::bf16);
  double tokens = 0;
  for (int64_t b = 0; b < batch; ++b) tokens += static_cast<double>(lengths.get_int(b));
  const double bytes = tokens * static_cast<double>(kv_heads * hd * 2 * 2);
  pl::Array dq = pl::to_device(q, gpu()), dk = pl::to_device(k, gpu()), dv = pl::to_device(v, gpu());
  pl::Array dl = pl::to_device(lengths, gpu()), dt = pl::to_device(table, gpu());
  pl::ops::PagedAttentionOptions o{.backend = "cuda"};
  pl::Array out = pl::ops::paged_attention(dq, dk, dv, dl, dt, o);
  {
    // Four sequences against the float64 reference (the whole batch would take minutes on the host).
    const int64_t n = 4;
    pl::Array q4({n, heads, hd}, pl::f64), l4({n}, pl::i32), t4({n, per_seq}, pl::i32);
    for (int64_t i = 0; i < n * heads * hd; ++i) q4.set(i, q.get(i));
    for (int64_t i = 0; i < n; ++i) l4.set(i, lengths.get(i));
    for (int64_t i = 0; i < n * per_seq; ++i) t4.set(i, table.get(i));
    pl::Array want = pl::ops::paged_attention_reference(q4, k.astype(pl::f64), v.astype(pl::f64), l4, t4);
    pl::Array got = pl::to_host(out).astype(pl::f64);
    double num = 0, den = 0;
    for (int64_t i = 0; i < 4 * heads * hd; ++i) {
      num += std::pow(got.get(i) - want.get(i), 2);
      den += want.get(i) * want.get(i);
    }
    check("paged attention vs float64 (4 sequences)", std::sqrt(num / den), 1e-2);
  }
  const double ms = kernel_ms([&] { out = pl::ops::paged_attention(dq, dk, dv, dl, dt, o); }, 2, 10);
  report("paged attention decode", "bf16 b64 h32/8 d128 p16 x128", "palladium", ms, gbps(bytes, ms));
}

}  // namespace pl_bench
