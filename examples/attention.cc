// The seed's fused attention: forward with causal and segment masks (and the lse residual), and
// the backward kernels through the custom VJP, checked against a float64 reference.
#include <cstdio>

#include <palladium/palladium.h>

#include "ops/attention.h"

namespace pl = palladium;

int main() {
  const int64_t batch = 2, seq = 128, heads = 2, head_dim = 32;
  auto keys = pl::random::split(pl::random::key(42), 4);
  pl::Shape shape{batch, seq, heads, head_dim};
  pl::Array q = pl::random::normal(keys[0], shape), k = pl::random::normal(keys[1], shape);
  pl::Array v = pl::random::normal(keys[2], shape), dout = pl::random::normal(keys[3], shape);
  // Two segments per sequence: positions [0, 80) and [80, 128).
  std::vector<int32_t> ids(static_cast<size_t>(batch * seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i % seq) < 80 ? 0 : 1;
  pl::Array segment_ids = pl::from_vector(ids, {batch, seq});

  bool ok = true;
  for (bool causal : {false, true}) {
    for (bool segmented : {false, true}) {
      pl::ops::MhaOptions opt{.sm_scale = 0.125f, .causal = causal, .block_q = 32, .block_k = 32};
      opt.backward_block = 32;  // the backward in blocks of 32 too (its default is 64)
      pl::Array seg = segmented ? segment_ids : pl::Array();
      auto vjp = pl::ops::mha_vjp(q, k, v, seg, opt);
      auto [dq, dk, dv] = vjp.backward(dout);
      auto ref = pl::ops::mha_reference(q, k, v, seg, opt.sm_scale, causal);
      auto [rdq, rdk, rdv] = pl::ops::mha_reference_backward(q, k, v, seg, dout, opt.sm_scale, causal);
      double e[4] = {pl::rel_error(vjp.out, ref.out), pl::rel_error(dq, rdq), pl::rel_error(dk, rdk),
                     pl::rel_error(dv, rdv)};
      bool good = true;
      for (double x : e) good = good && x < 1e-5;
      std::printf("causal=%d segments=%d  rel err: out %.1e  dq %.1e  dk %.1e  dv %.1e  %s\n", causal, segmented,
                  e[0], e[1], e[2], e[3], good ? "ok" : "MISMATCH");
      ok = ok && good;
    }
  }
  return ok ? 0 : 1;
}
