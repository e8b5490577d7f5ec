// Benchmarks over every GPU of this machine (issue 9's figures), each against its peer in the same
// run:
//   - all-reduce and all-gather bus bandwidth of a shard_map psum / all_gather (Palladium's NCCL
//     engine) against NCCL called directly from this binary (ncclAllReduce / ncclAllGather over
//     ncclCommInitAll, one thread driving every GPU);
//   - a bf16 matmul 16384^3 split by rows over the GPUs (jit with NamedShardings) against the same
//     jitted matmul on one GPU;
//   - the seed attention forward+backward (jit(grad) through the custom VJP) sharded over heads
//     against one GPU;
//   - a data-parallel training step (grad of an attention layer's loss over a split batch, the
//     gradients all-reduced) against one GPU.
// Times are host wall clock over a loop of calls, all GPUs synchronised before and after (the peer
// is timed the same way); the median of five such loops. Usage: multi_gpu_bench [section...] with
// sections collectives, matmul, attention, step (default: all). `PALLADIUM_NCCL=0 multi_gpu_bench
// step` runs the step with collectives staged through the host instead of the NCCL engine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <palladium/device.h>
#include <palladium/palladium.h>

#include "ops/attention.h"
#include "sharding/nccl_api.h"

namespace pl = palladium;
namespace jnp = palladium::jnp;
using pl::Array;
using pl::P;

namespace {

using Clock = std::chrono::steady_clock;

int gpus() { return pl::cuda_device_count(); }

void sync_all() {
  for (int i = 0; i < gpus(); ++i) pl::synchronize(pl::cuda_device(i));
}

double wall_ms(const std::function<void()>& work, int iters) {
  work();
  work();
  sync_all();
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) work();
    sync_all();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters);
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

bool any_failure = false;
void report(const std::string& what, const std::string& shape, const std::string& system, double ms,
            const std::string& rate) {
  std::printf("ROW %-16s %-26s %-40s %9.3f ms %s\n", what.c_str(), shape.c_str(), system.c_str(), ms, rate.c_str());
  std::fflush(stdout);
}
void check(const std::string& what, double err, double tol) {
  std::printf("CHECK %s: %.2e (limit %.0e)\n", what.c_str(), err, tol);
  if (!(err <= tol)) {
    any_failure = true;
    std::printf("FAIL %s\n", what.c_str());
  }
}
std::string fixed(double v, int digits = 2) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

pl::Mesh all_gpus() {
  std::vector<pl::Device> ds;
  for (int i = 0; i < gpus(); ++i) ds.push_back(pl::cuda_device(i));
  return pl::Mesh(ds, {static_cast<int64_t>(ds.size())}, {"d"});
}

// ---- collectives: Palladium's engine against NCCL called directly ----------------------------

struct DirectNccl {
  const pl::sharding::NcclApi* api = nullptr;
  std::vector<pl::sharding::NcclComm> comms;
  DirectNccl() {
    std::string why;
    api = pl::sharding::nccl(&why);
    if (!api) {
      std::printf("NOTE direct NCCL unavailable: %s\n", why.c_str());
      return;
    }
    std::vector<int> devs;
    for (int i = 0; i < gpus(); ++i) devs.push_back(i);
    comms.resize(devs.size());
    pl::sharding::check_nccl(api->ncclCommInitAll(comms.data(), static_cast<int>(devs.size()), devs.data()),
                             "ncclCommInitAll");
  }
  // One collective on every GPU from this thread, in one NCCL group.
  void all_reduce(const std::vector<Array>& in, std::vector<Array>& out) const {
    api->ncclGroupStart();
    for (size_t i = 0; i < in.size(); ++i)
      api->ncclAllReduce(in[i].data(), out[i].data(), static_cast<size_t>(in[i].size()),
                         pl::sharding::NcclType::float32, pl::sharding::NcclOp::sum, comms[i], nullptr);
    pl::sharding::check_nccl(api->ncclGroupEnd(), "direct ncclAllReduce");
  }
  void all_gather(const std::vector<Array>& in, std::vector<Array>& out) const {
    api->ncclGroupStart();
    for (size_t i = 0; i < in.size(); ++i)
      api->ncclAllGather(in[i].data(), out[i].data(), static_cast<size_t>(in[i].size()),
                         pl::sharding::NcclType::float32, comms[i], nullptr);
    pl::sharding::check_nccl(api->ncclGroupEnd(), "direct ncclAllGather");
  }
};

void bench_collectives() {
  const int n = gpus();
  const pl::Mesh mesh = all_gpus();
  DirectNccl direct;
  auto psum = pl::shard_map([](const Array& b) { return pl::psum(b, "d"); }, mesh, {P("d")}, {P("d")});
  auto gather = pl::shard_map([](const Array& b) { return pl::all_gather(b, "d", 0, true); }, mesh, {P("d")}, {P()});
  // Random float32 values: one 64 MiB block drawn, repeated to the larger sizes with a different
  // offset per block (so that every GPU's piece differs).
  const int64_t block = 64 * (1 << 20) / 4;
  const Array drawn = pl::random::normal(pl::random::key(60), {block});
  for (int64_t mib : {64, 256, 1024}) {
    const int64_t per_device = mib * (1 << 20) / 4;  // float32 elements on each GPU
    Array host({n * per_device}, pl::f32);
    for (int64_t at = 0; at < n * per_device; at += block) {
      float* to = host.data_as<float>() + at;
      const float* from = drawn.data_as<float>();
      const float offset = static_cast<float>(at / block);
      for (int64_t j = 0; j < block; ++j) to[j] = from[j] + offset;
    }
    const Array x = pl::device_put(host, pl::NamedSharding(mesh, P("d")));
    const std::string shape = std::to_string(mib) + " MiB f32 per GPU";
    const double bytes = static_cast<double>(per_device) * 4.0;
    const double bus = 2.0 * (n - 1) / n;  // all-reduce: bytes each GPU sends and receives, per byte
    const int iters = mib >= 1024 ? 5 : 20;
    // Correctness on the smallest size: every piece is the sum of the pieces.
    if (mib == 64) {
      const Array got = pl::to_host(psum(x));
      Array ref({per_device}, pl::f64);
      for (int64_t i = 0; i < per_device; i += 4099) {
        double s = 0;
        for (int d = 0; d < n; ++d) s += host.get(d * per_device + i);
        ref.set(i, s);
      }
      double worst = 0;
      for (int d = 0; d < n; ++d)
        for (int64_t i = 0; i < per_device; i += 4099)
          worst = std::max(worst, std::abs(got.get(d * per_device + i) - ref.get(i)) / (std::abs(ref.get(i)) + 1e-3));
      check("psum over " + std::to_string(n) + " GPUs, sampled elements vs float64", worst, 1e-5);
      check("all_gather over " + std::to_string(n) + " GPUs vs the input",
            pl::rel_error(pl::to_host(gather(x)), host.astype(pl::f64)), 0);
    }
    const double mine = wall_ms([&] { (void)psum(x); }, iters);
    report("all-reduce", shape, "palladium psum (shard_map, NCCL engine)", mine, fixed(bytes * bus / mine / 1e6, 0) + " GB/s bus");
    double peer_ms = 0;
    if (direct.api) {
      std::vector<Array> in, out;
      for (int d = 0; d < n; ++d) {
        in.push_back(x.sharded()->pieces[static_cast<size_t>(d)]);
        out.push_back(pl::empty({per_device}, pl::f32, pl::cuda_device(d)));
      }
      peer_ms = wall_ms([&] { direct.all_reduce(in, out); }, iters);
      report("all-reduce", shape, "NCCL ncclAllReduce called directly", peer_ms,
             fixed(bytes * bus / peer_ms / 1e6, 0) + " GB/s bus; palladium at " + fixed(100.0 * peer_ms / mine, 1) + "%");
    }
    // all-gather: each GPU ends with every GPU's piece; bus bytes (n-1)/n of the result.
    const double gbus = static_cast<double>(n - 1);
    const double gmine = wall_ms([&] { (void)gather(x); }, iters);
    report("all-gather", shape, "palladium all_gather (shard_map, NCCL)", gmine, fixed(bytes * gbus / gmine / 1e6, 0) + " GB/s bus");
    if (direct.api) {
      std::vector<Array> in, out;
      for (int d = 0; d < n; ++d) {
        in.push_back(x.sharded()->pieces[static_cast<size_t>(d)]);
        out.push_back(pl::empty({n * per_device}, pl::f32, pl::cuda_device(d)));
      }
      const double g = wall_ms([&] { direct.all_gather(in, out); }, iters);
      report("all-gather", shape, "NCCL ncclAllGather called directly", g,
             fixed(bytes * gbus / g / 1e6, 0) + " GB/s bus; palladium at " + fixed(100.0 * g / gmine, 1) + "%");
    }
  }
}

// ---- a matmul split by rows -----------------------------------------------------------------

void bench_matmul() {
  const int n = gpus();
  const pl::Mesh mesh = all_gpus();
  const int64_t m = 16384;
  const double flops = 2.0 * m * m * m;
  const Array ha = pl::random::normal(pl::random::key(31), {m, m}, pl::bf16);
  const Array hb = pl::random::normal(pl::random::key(32), {m, m}, pl::bf16);
  auto mm = [](const Array& a, const Array& b) { return jnp::matmul(a, b); };
  const Array a1 = pl::to_device(ha, pl::cuda_device(0)), b1 = pl::to_device(hb, pl::cuda_device(0));
  auto one = pl::jit(mm);
  const double t1 = wall_ms([&] { (void)one(a1, b1); }, 3);
  report("matmul bf16", "16384^3", "jit(matmul) on one GPU", t1, fixed(flops / t1 / 1e9, 0) + " TFLOP/s");
  const pl::NamedSharding rows(mesh, P("d", pl::None)), whole(mesh, P());
  auto split = pl::jit(mm, pl::JitShardings{{rows, whole}, rows});
  const Array as = pl::device_put(ha, rows), bs = pl::device_put(hb, whole);
  const double tn = wall_ms([&] { (void)split(as, bs); }, 3);
  report("matmul bf16", "16384^3", "jit(matmul) rows over " + std::to_string(n) + " GPUs", tn,
         fixed(flops / tn / 1e9, 0) + " TFLOP/s; " + fixed(t1 / tn) + "x one GPU");
  // Sampled elements of both results against float64 dot products of the bf16 inputs.
  const Array r1 = pl::to_host(one(a1, b1)), rn = pl::to_host(split(as, bs));
  double worst1 = 0, worstn = 0;
  for (int64_t s = 0; s < 64; ++s) {
    const int64_t i = (s * 7919) % m, j = (s * 104729) % m;
    double ref = 0, scale = 0;
    for (int64_t k = 0; k < m; ++k) {
      ref += ha.get(i * m + k) * hb.get(k * m + j);
      scale += std::abs(ha.get(i * m + k) * hb.get(k * m + j));
    }
    worst1 = std::max(worst1, std::abs(r1.get(i * m + j) - ref) / scale);
    worstn = std::max(worstn, std::abs(rn.get(i * m + j) - ref) / scale);
  }
  // The output is bfloat16: its rounding alone may reach 2^-8 of the value, which is at most the
  // sum of the terms' magnitudes.
  check("matmul on one GPU, 64 sampled elements vs float64 (error / sum of |terms|)", worst1, 4e-3);
  check("matmul rows over the GPUs, 64 sampled elements vs float64", worstn, 4e-3);
}

// ---- attention forward+backward over heads --------------------------------------------------

void bench_attention() {
  const int n = gpus();
  const pl::Mesh mesh = all_gpus();
  for (int64_t d : {64, 128}) {
    const int64_t seq = 2048, batch = 16384 / seq, heads = 2048 / d;
    const pl::Shape shape{batch, seq, heads, d};
    pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))), .causal = false,
                          .block_q = 128, .block_k = 128, .backend = "cuda"};
    auto loss = [o](const Array& q, const Array& k, const Array& v, const Array& dout) {
      return jnp::sum(pl::ops::mha(q, k, v, Array(), o).astype(pl::f32) * dout.astype(pl::f32));
    };
    auto step = [loss](const Array& q, const Array& k, const Array& v, const Array& dout) {
      return pl::grad<0, 1, 2>(loss)(q, k, v, dout);
    };
    std::vector<Array> host;
    for (uint64_t s = 0; s < 4; ++s) host.push_back(pl::random::normal(pl::random::key(40 + s), shape, pl::bf16));
    std::vector<Array> on1, onn;
    const pl::NamedSharding by_heads(mesh, P(pl::None, pl::None, "d", pl::None));
    for (const Array& h : host) on1.push_back(pl::to_device(h, pl::cuda_device(0))), onn.push_back(pl::device_put(h, by_heads));
    auto one = pl::jit(step);
    auto split = pl::jit(step, pl::JitShardings{{by_heads, by_heads, by_heads, by_heads}, by_heads});
    const double flops = 3.5 * 4.0 * batch * heads * seq * seq * d;
    const std::string tag = "b" + std::to_string(batch) + " s" + std::to_string(seq) + " h" + std::to_string(heads) +
                            " d" + std::to_string(d);
    try {
      const double t1 = wall_ms([&] { (void)one(on1[0], on1[1], on1[2], on1[3]); }, 3);
      report("attn fwd+bwd", tag, "jit(grad) on one GPU", t1, fixed(flops / t1 / 1e9, 0) + " TFLOP/s");
      const double tn = wall_ms([&] { (void)split(onn[0], onn[1], onn[2], onn[3]); }, 3);
      report("attn fwd+bwd", tag, "jit(grad) heads over " + std::to_string(n) + " GPUs", tn,
             fixed(flops / tn / 1e9, 0) + " TFLOP/s; " + fixed(t1 / tn) + "x one GPU");
      auto [q1, k1, v1] = one(on1[0], on1[1], on1[2], on1[3]);
      auto [qn, kn, vn] = split(onn[0], onn[1], onn[2], onn[3]);
      check("attention gradients over heads equal one GPU's " + tag,
            std::max({pl::rel_error(pl::to_host(qn).astype(pl::f64), pl::to_host(q1).astype(pl::f64)),
                      pl::rel_error(pl::to_host(kn).astype(pl::f64), pl::to_host(k1).astype(pl::f64)),
                      pl::rel_error(pl::to_host(vn).astype(pl::f64), pl::to_host(v1).astype(pl::f64))}),
            1e-6);
      const std::string low = split.lower(onn[0], onn[1], onn[2], onn[3]);
      const bool moves = low.find("= all_gather") != std::string::npos || low.find("= all_to_all") != std::string::npos;
      std::printf("NOTE attention over heads %s\n", moves ? "gathers operands (communication)" : "runs with no communication");
    } catch (const std::exception& e) {
      any_failure = true;
      std::printf("FAIL attention %s: %s\n", tag.c_str(), e.what());
    }
  }
}

// ---- a data-parallel training step ----------------------------------------------------------

// `seq` sets the step's work per GPU; the gradients all-reduced (the weights) are the same size at
// every seq, so the ratio shows what the communication that cannot overlap costs.
void bench_step(int64_t seq) {
  const int n = gpus();
  const pl::Mesh mesh = all_gpus();
  // One attention layer with its projections: x (batch, seq, hidden) -> q, k, v -> mha -> output
  // projection; the loss is the mean square against a target. The batch is split over the GPUs.
  const int64_t batch = 8 * n, hidden = 1024, heads = 8, d = hidden / heads;
  pl::ops::MhaOptions o{.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))), .causal = true,
                        .block_q = 128, .block_k = 128, .backend = "cuda"};
  auto loss = [=](const Array& wqkv, const Array& wo, const Array& x, const Array& y) {
    Array qkv = jnp::matmul(x, wqkv);  // (batch, seq, 3 * hidden)
    const int64_t b = qkv.shape()[0];
    auto part = [&](int64_t i) {
      return jnp::reshape(pl::lax::slice(qkv, {0, 0, i * hidden}, {b, seq, (i + 1) * hidden}), {b, seq, heads, d});
    };
    Array att = jnp::reshape(pl::ops::mha(part(0), part(1), part(2), Array(), o), {b, seq, hidden});
    Array out = jnp::matmul(att, wo).astype(pl::f32);
    return jnp::mean(jnp::square(out - y));
  };
  auto step = [loss](const Array& wqkv, const Array& wo, const Array& x, const Array& y) {
    return pl::grad<0, 1>(loss)(wqkv, wo, x, y);
  };
  const Array wqkv = (pl::random::normal(pl::random::key(51), {hidden, 3 * hidden}) * 0.03).astype(pl::bf16);
  const Array wo = (pl::random::normal(pl::random::key(52), {hidden, hidden}) * 0.03).astype(pl::bf16);
  const Array x = pl::random::normal(pl::random::key(53), {batch, seq, hidden}, pl::bf16);
  const Array y = pl::random::normal(pl::random::key(54), {batch, seq, hidden});
  const std::string tag = "b" + std::to_string(batch) + " s" + std::to_string(seq) + " hidden" + std::to_string(hidden);
  try {
    auto one = pl::jit(step);
    const pl::Device g0 = pl::cuda_device(0);
    const Array w1 = pl::to_device(wqkv, g0), o1 = pl::to_device(wo, g0), x1 = pl::to_device(x, g0), y1 = pl::to_device(y, g0);
    // Ten steps a loop, as a training loop runs them back to back: the GPUs' idle start of each
    // timed loop (host latency to the first kernel) is not a step's cost.
    constexpr int steps = 10;
    const double t1 = wall_ms([&] { (void)one(w1, o1, x1, y1); }, steps);
    report("dp step", tag, "jit(grad) on one GPU", t1, "");
    const pl::NamedSharding repl(mesh, P()), by_batch(mesh, P("d"));
    auto split = pl::jit(step, pl::JitShardings{{repl, repl, by_batch, by_batch}, repl});
    const Array wn = pl::device_put(wqkv, repl), on = pl::device_put(wo, repl), xn = pl::device_put(x, by_batch),
                yn = pl::device_put(y, by_batch);
    const double tn = wall_ms([&] { (void)split(wn, on, xn, yn); }, steps);
    report("dp step", tag, "jit(grad) batch over " + std::to_string(n) + " GPUs", tn, fixed(t1 / tn) + "x one GPU");
    // Where the rest goes: one GPU on its share of the batch alone (the bound without any
    // communication or coordination), and the host's time to queue one step (no waiting for the GPUs).
    const Array xs = pl::to_device(pl::lax::slice(x, {0, 0, 0}, {batch / n, seq, hidden}), g0),
                ys = pl::to_device(pl::lax::slice(y, {0, 0, 0}, {batch / n, seq, hidden}), g0);
    const double ts = wall_ms([&] { (void)one(w1, o1, xs, ys); }, steps);
    report("dp step", tag, "jit(grad) one GPU, its share b" + std::to_string(batch / n), ts,
           fixed(t1 / ts) + "x one GPU (the bound)");
    auto queue_ms = [&](const std::function<void()>& work) {
      sync_all();
      const auto t0 = Clock::now();
      work();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      sync_all();
      return ms;
    };
    std::printf("NOTE host time to queue one step: one GPU %.3f ms, over %d GPUs %.3f ms\n",
                queue_ms([&] { (void)one(w1, o1, x1, y1); }), n, queue_ms([&] { (void)split(wn, on, xn, yn); }));
    // Whether the host keeps ahead of the GPUs over a timed loop (it waits for them nowhere), and
    // whether the GPUs are equally fast (the slowest one's share is the bound).
    std::printf("NOTE host time to queue %d steps over %d GPUs: %.3f ms (the GPUs take %.3f ms)\n", steps, n,
                queue_ms([&] {
                  for (int i = 0; i < steps; ++i) (void)split(wn, on, xn, yn);
                }),
                steps * tn);
    std::string shares;
    for (int g = 0; g < n; ++g) {
      const pl::Device dev = pl::cuda_device(g);
      const Array wg = pl::to_device(wqkv, dev), og = pl::to_device(wo, dev), xg = pl::to_device(xs, dev),
                  yg = pl::to_device(ys, dev);
      shares += " cuda:" + std::to_string(g) + " " + fixed(wall_ms([&] { (void)one(wg, og, xg, yg); }, steps), 3) + " ms";
    }
    std::printf("NOTE one GPU on its share, each GPU:%s\n", shares.c_str());
    auto graph_status = [](const std::string& lowered) {
      const size_t open = lowered.rfind("  ("), close = lowered.rfind(')');
      return open == std::string::npos || close < open ? std::string("not on a GPU") : lowered.substr(open + 3, close - open - 3);
    };
    std::printf("NOTE how the step runs: one GPU %s; over %d GPUs (each) %s\n", graph_status(one.lower(w1, o1, x1, y1)).c_str(),
                n, graph_status(split.lower(wn, on, xn, yn)).c_str());
    if (std::getenv("PL_BENCH_STEP_PROFILE") && seq == 1024) {
      // One step profiled (PALLADIUM_STEP_PROFILE) behind two unprofiled ones, so that the GPUs
      // have queued work when it starts, as in the timed loop; then one GPU on its share, the same
      // way. Only steps run one by one are profiled: PALLADIUM_GRAPHS=0 profiles both.
      auto profiled = [&](const std::function<void()>& run) {
        run();
        run();
        ::setenv("PALLADIUM_STEP_PROFILE", "1", 1);
        run();
        ::unsetenv("PALLADIUM_STEP_PROFILE");
        sync_all();
      };
      profiled([&] { (void)split(wn, on, xn, yn); });
      profiled([&] { (void)one(w1, o1, xs, ys); });
    }
    auto [g1a, g1b] = one(w1, o1, x1, y1);
    auto [gna, gnb] = split(wn, on, xn, yn);
    // One GPU rounds each gradient to bfloat16 once; over the GPUs each partial gradient is rounded,
    // then their bfloat16 sum: up to two more roundings of 2^-9 each (2.8e-3 measured on two H100s
    // and two H200s, stop 23).
    check("data-parallel gradients equal one GPU's",
          std::max(pl::rel_error(pl::to_host(gna).astype(pl::f64), pl::to_host(g1a).astype(pl::f64)),
                   pl::rel_error(pl::to_host(gnb).astype(pl::f64), pl::to_host(g1b).astype(pl::f64))),
          3.0 / 512);
  } catch (const std::exception& e) {
    any_failure = true;
    std::printf("FAIL dp step: %s\n", e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (gpus() == 0) {
    std::printf("no GPU here: %s\n", pl::cuda_unavailable_reason().c_str());
    return 0;
  }
  // The NCCL engine (the default) is what is measured; PALLADIUM_NCCL=0 measures collectives
  // staged through the host instead.
  const char* engine = std::getenv("PALLADIUM_NCCL");
  std::printf("%d GPUs: %s; collectives through %s\n", gpus(), pl::device_description(pl::cuda_device(0)).c_str(),
              engine && std::string(engine) == "0" ? "host memory" : "NCCL");
  std::vector<std::string> want(argv + 1, argv + argc);
  auto on = [&](const char* s) { return want.empty() || std::find(want.begin(), want.end(), s) != want.end(); };
  if (on("collectives")) bench_collectives();
  if (on("matmul")) bench_matmul();
  if (on("attention")) bench_attention();
  if (on("step")) {
    bench_step(1024);
    bench_step(2048);
  }
  return any_failure ? 1 : 0;
}
