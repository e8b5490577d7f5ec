#include "ops/indrnn.h"

#include <algorithm>

#include "ops/call_cache.h"
#include "palladium/palladium.h"

namespace palladium::ops {

Array indrnn(const Array& x, const Array& u, const Array& h0, int64_t block_f, const std::string& backend) {
  PL_CHECK(x.ndim() == 2 && u.shape() == Shape{x.shape()[1]} && h0.shape() == u.shape(),
           "indrnn: expects x (T, F), u (F,), h0 (F,), got ", shape_str(x.shape()), ", ", shape_str(u.shape()), ", ",
           shape_str(h0.shape()));
  const int64_t steps = x.shape()[0], features = x.shape()[1];
  block_f = std::min(block_f, features);
  auto kernel = [](Ref x_ref, Ref u_ref, Ref h0_ref, Ref o_ref) {
    Value u_block = u_ref[all];
    fori_loop(0, x_ref.shape()[0], [&](Value t, Value h) {
      h = jnp::maximum(u_block * h + x_ref(t, slice()), 0.0);
      o_ref(t, slice()) = h;
      return h;
    }, Value(h0_ref[all]));
  };
  CallOptions opts{.grid = {cdiv(features, block_f)},
                   .in_specs = {BlockSpec({steps, block_f}, [](Index i) { return idx(0, i); }),
                                BlockSpec({block_f}, [](Index i) { return idx(i); }),
                                BlockSpec({block_f}, [](Index i) { return idx(i); })},
                   .out_specs = {BlockSpec({steps, block_f}, [](Index i) { return idx(0, i); })},
                   .name = "indrnn",
                   .backend = backend};
  const std::vector<ShapeDtype> outs{ShapeDtype(x.shape(), x.dtype())};
  const std::string key = call_key(detail::cat(steps, ",", features, ",", block_f), opts, outs);
  return cached_call<Array>(key, [&] { return pallas_call(kernel, outs[0], opts); })(x, u, h0);
}

Array indrnn_reference(const Array& x, const Array& u, const Array& h0) {
  const int64_t steps = x.shape()[0], features = x.shape()[1];
  Array out({steps, features}, f64);
  std::vector<double> h = h0.to_doubles(), uu = u.to_doubles(), xs = x.to_doubles();
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t f = 0; f < features; ++f) {
      double& hf = h[static_cast<size_t>(f)];
      hf = std::max(uu[static_cast<size_t>(f)] * hf + xs[static_cast<size_t>(t * features + f)], 0.0);
      out.set(t * features + f, hf);
    }
  return out;
}

}  // namespace palladium::ops
