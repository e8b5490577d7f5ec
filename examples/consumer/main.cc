// Uses an installed Palladium: a kernel, jit(grad) at the program level, and the seed's attention
// from the installed kernel library; checks each against a float64 reference (exit code).
#include <cmath>
#include <cstdio>

#include <palladium/ops/attention.h>
#include <palladium/palladium.h>

namespace pl = palladium;
using pl::Array;

int main() {
  auto add = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; },
                             pl::ShapeDtype({8}, pl::f32));
  Array x = pl::random::normal(pl::random::key(0), {8}), y = pl::random::normal(pl::random::key(1), {8});
  const double kernel_err = pl::rel_error(add(x, y), pl::add(x.astype(pl::f64), y.astype(pl::f64)));

  // d/dx sum(x^2 * 3) = 6x
  Array g = pl::jit(pl::grad([](const Array& a) { return pl::jnp::sum(a * a * 3.0); }))(x);
  const double grad_err = pl::rel_error(g, (x * 6.0).astype(pl::f64));

  Array q = pl::random::normal(pl::random::key(2), {1, 32, 2, 16});
  pl::ops::MhaOptions o;
  o.block_q = o.block_k = 16;
  Array out = pl::ops::mha(q, q, q, Array(), o);
  const bool finite = std::isfinite(pl::to_host(pl::jnp::sum(out)).get(0));

  std::printf("installed Palladium %s: kernel %.1e, jit(grad) %.1e, attention %s\n", pl::version(), kernel_err,
              grad_err, finite ? "ok" : "NaN");
  return kernel_err < 1e-6 && grad_err < 1e-6 && finite ? 0 : 1;
}
