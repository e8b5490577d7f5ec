// The IndRNN blog's naive loop over time steps, as tests write it: a C++ loop of Array ops that jit
// traces unrolled (examples/indrnn_blog.cc shows the same function as user code).
#pragma once
#include <vector>

#include "palladium/palladium.h"

namespace palladium::test_support {

inline Array indrnn_naive_loop(const Array& x, const Array& u, const Array& h0) {
  std::vector<Array> hs;
  Array h = h0;
  for (int64_t t = 0; t < x.shape()[0]; ++t) {
    h = nn::relu(u * h + lax::index(x, t));
    hs.push_back(h);
  }
  return jnp::stack(hs);
}

}  // namespace palladium::test_support
