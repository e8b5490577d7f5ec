// Partitioning programs across devices, on whatever devices exist (8 virtual CPU devices when
// there are fewer than two GPUs and PALLADIUM_CPU_DEVICES is unset): the seed's with_sharding_constraint example,
// a data-parallel training step, and the seed's attention sharded over heads. Each part prints
// where the pieces live and the collectives the partitioner inserted, and checks its result
// against the unsharded run.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "ops/attention.h"
#include "palladium/palladium.h"

namespace pl = palladium;
using pl::Array;
using pl::PartitionSpec;
using pl::Shape;

namespace {

// The per-device program's collectives, one per line.
std::string collectives(const std::string& lowered) {
  std::istringstream in(lowered.substr(lowered.find("--- per-device program")));
  std::string line, out;
  while (std::getline(in, line))
    for (const char* c : {"all_gather", "all_reduce", "reduce_scatter", "all_to_all", "ppermute", "shard_slice"})
      if (line.find(std::string("= ") + c) != std::string::npos) {
        out += "   " + line + "\n";
        break;
      }
  return out.empty() ? "   (none: every device works on its own pieces)\n" : out;
}

void check(const char* what, double err, double tol) {
  std::printf("%s: relative error against the unsharded run %.2e\n\n", what, err);
  if (!(err <= tol)) {
    std::fprintf(stderr, "%s: error %.3e above %.1e\n", what, err, tol);
    std::exit(1);
  }
}

}  // namespace

int main() {
  // Several GPUs, or else 8 virtual CPU devices (unless PALLADIUM_CPU_DEVICES says how many).
  if (pl::cuda_device_count() < 2 && std::getenv("PALLADIUM_PLATFORM") == nullptr) {
    setenv("PALLADIUM_PLATFORM", "cpu", 1);
    if (std::getenv("PALLADIUM_CPU_DEVICES") == nullptr) setenv("PALLADIUM_CPU_DEVICES", "8", 1);
  }
  const int n = pl::device_count();
  std::printf("%d devices: %s .. %s\n\n", n, pl::device_name(pl::devices().front()).c_str(), pl::device_name(pl::devices().back()).c_str());

  // 1. The seed's example: replicated in and out, a constraint in the middle.
  auto f = [](const Array& x) {
    Array y = x + 1.0;
    y = pl::with_sharding_constraint(y, PartitionSpec(2, 1));
    return y * 2.0;
  };
  auto sf = pl::sharded_jit(f, pl::None, pl::None);
  Array x = pl::random::normal(pl::random::key(0), {8, 4});
  Array y = sf(x);
  std::printf("== seed: with_sharding_constraint(x + 1, PartitionSpec(2, 1)) * 2 ==\n%s", pl::layout_str(y).c_str());
  std::printf(" collectives:\n%s", collectives(sf.lower(x)).c_str());
  check("seed example", pl::rel_error(pl::to_host(y), ((x + 1.0) * 2.0).astype(pl::f64)), 0.0);

  // 2. Data parallel: the batch split over every device, the weights replicated; the gradient's
  // partial sums are all-reduced.
  auto loss = [](const Array& w, const Array& xb, const Array& yb) {
    return pl::jnp::mean(pl::jnp::square(pl::jnp::tanh(pl::jnp::matmul(xb, w)) - yb));
  };
  auto step = [loss](const Array& w, const Array& xb, const Array& yb) {
    auto [value, g] = pl::value_and_grad(loss)(w, xb, yb);
    return std::make_pair(value, w - g * 0.1);
  };
  Array w = pl::random::normal(pl::random::key(1), {16, 4});
  Array xb = pl::random::normal(pl::random::key(2), {8 * n, 16}), yb = pl::random::normal(pl::random::key(3), {8 * n, 4});
  auto sstep = pl::sharded_jit(step, {pl::None, PartitionSpec(n, 1), PartitionSpec(n, 1)}, pl::None,
                               {.num_partitions = n});
  auto [value, w2] = sstep(w, xb, yb);
  auto [value1, w21] = pl::jit(step)(w, xb, yb);
  std::printf("== data-parallel training step, batch %lld over %d devices: loss %.6f ==\n", static_cast<long long>(8 * n),
              n, pl::to_host(value).get(0));
  std::printf("%s collectives:\n%s", pl::layout_str(pl::device_put(xb, pl::NamedSharding(pl::make_mesh({n}, {"batch"}), pl::P("batch")))).c_str(),
              collectives(sstep.lower(w, xb, yb)).c_str());
  check("training step", pl::rel_error(pl::to_host(w2), w21.astype(pl::f64)), 1e-5);

  // 3. The seed's attention sharded over heads: forward and backward kernels on each device's heads.
  const int heads = n >= 2 ? 2 * (n / 2) : 1;
  pl::ops::MhaOptions o;
  o.block_q = o.block_k = o.backward_block = 32;
  o.sm_scale = 0.125f;
  o.causal = true;
  auto attention_loss = [o](const Array& q, const Array& k, const Array& v) {
    return pl::jnp::sum(pl::jnp::square(pl::ops::mha(q, k, v, Array(), o)));
  };
  auto grads = [attention_loss](const Array& q, const Array& k, const Array& v) {
    return pl::grad<0, 1, 2>(attention_loss)(q, k, v);
  };
  const Shape shape{2, 64, heads, 32};
  Array q = pl::random::normal(pl::random::key(4), shape), k = pl::random::normal(pl::random::key(5), shape),
        v = pl::random::normal(pl::random::key(6), shape);
  const PartitionSpec by_head(1, 1, heads, 1);
  auto sgrads = pl::sharded_jit(grads, {by_head, by_head, by_head}, by_head, {.num_partitions = heads});
  auto [dq, dk, dv] = sgrads(q, k, v);
  auto [dq1, dk1, dv1] = pl::jit(grads)(q, k, v);
  std::printf("== attention fwd+bwd (grad of a loss over ops::mha), %d heads over %d devices ==\n%s", heads, heads,
              pl::layout_str(dq).c_str());
  std::printf(" collectives:\n%s", collectives(sgrads.lower(q, k, v)).c_str());
  check("attention gradients", pl::rel_error(pl::to_host(dq), dq1.astype(pl::f64)), 0.0);
  return 0;
}
