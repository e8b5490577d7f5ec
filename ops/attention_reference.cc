// Float64 reference attention and its gradients in plain C++ (the seed's mha_reference, and the
// analytic backward of softmax attention), used to check the kernels.
#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "palladium/error.h"

namespace palladium::ops {
namespace {

struct View {
  int64_t batch, seq, heads, dim;
  size_t at(int64_t b, int64_t s, int64_t h, int64_t c) const {
    return static_cast<size_t>(((b * seq + s) * heads + h) * dim + c);
  }
};

View view_of(const Array& q, const Array& k, const Array& v) {
  PL_CHECK(q.ndim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(),
           "mha_reference: q, k, v must share one (batch, seq, heads, dim) shape");
  return {q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]};
}

bool visible(const std::vector<int64_t>& seg, const View& s, int64_t b, int64_t i, int64_t j, bool causal) {
  if (causal && j > i) return false;
  if (!seg.empty() && seg[static_cast<size_t>(b * s.seq + i)] != seg[static_cast<size_t>(b * s.seq + j)]) return false;
  return true;
}

std::vector<int64_t> segments(const Array& segment_ids) {
  std::vector<int64_t> seg;
  if (segment_ids.defined())
    for (int64_t i = 0; i < segment_ids.size(); ++i) seg.push_back(segment_ids.get_int(i));
  return seg;
}

// Softmax probabilities P[i, j] of one (batch, head), and lse per row.
void probabilities(const std::vector<double>& q, const std::vector<double>& k, const std::vector<int64_t>& seg,
                   const View& s, int64_t b, int64_t h, double scale, bool causal, std::vector<double>& p,
                   std::vector<double>& lse) {
  p.assign(static_cast<size_t>(s.seq * s.seq), 0.0);
  lse.assign(static_cast<size_t>(s.seq), -INFINITY);
  for (int64_t i = 0; i < s.seq; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < s.seq; ++j) {
      double logit = -INFINITY;
      if (visible(seg, s, b, i, j, causal)) {
        double acc = 0;
        for (int64_t c = 0; c < s.dim; ++c) acc += q[s.at(b, i, h, c)] * k[s.at(b, j, h, c)];
        logit = acc * scale;
      }
      p[static_cast<size_t>(i * s.seq + j)] = logit;
      m = std::max(m, logit);
    }
    double sum = 0;
    for (int64_t j = 0; j < s.seq; ++j) {
      double& x = p[static_cast<size_t>(i * s.seq + j)];
      x = std::isinf(x) ? 0.0 : std::exp(x - m);
      sum += x;
    }
    for (int64_t j = 0; j < s.seq; ++j) p[static_cast<size_t>(i * s.seq + j)] /= sum;
    lse[static_cast<size_t>(i)] = m + std::log(sum);
  }
}

}  // namespace

AttentionReference mha_reference(const Array& q, const Array& k, const Array& v, const Array& segment_ids,
                                 double sm_scale, bool causal) {
  const View s = view_of(q, k, v);
  const std::vector<double> qd = q.to_doubles(), kd = k.to_doubles(), vd = v.to_doubles();
  const std::vector<int64_t> seg = segments(segment_ids);
  Array out(q.shape(), f64), lse({s.batch, s.heads, s.seq}, f64);
  std::vector<double> p, row_lse;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      probabilities(qd, kd, seg, s, b, h, sm_scale, causal, p, row_lse);
      for (int64_t i = 0; i < s.seq; ++i) {
        lse.set((b * s.heads + h) * s.seq + i, row_lse[static_cast<size_t>(i)]);
        for (int64_t c = 0; c < s.dim; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < s.seq; ++j) acc += p[static_cast<size_t>(i * s.seq + j)] * vd[s.at(b, j, h, c)];
          out.set(static_cast<int64_t>(s.at(b, i, h, c)), acc);
        }
      }
    }
  return {out, lse};
}

std::tuple<Array, Array, Array> mha_reference_backward(const Array& q, const Array& k, const Array& v,
                                                       const Array& segment_ids, const Array& dout, double sm_scale,
                                                       bool causal) {
  const View s = view_of(q, k, v);
  const std::vector<double> qd = q.to_doubles(), kd = k.to_doubles(), vd = v.to_doubles(), dod = dout.to_doubles();
  const std::vector<int64_t> seg = segments(segment_ids);
  Array dq = zeros(q.shape(), f64), dk = zeros(q.shape(), f64), dv = zeros(q.shape(), f64);
  double* dqp = dq.data_as<double>();
  double* dkp = dk.data_as<double>();
  double* dvp = dv.data_as<double>();
  std::vector<double> p, lse, dp(static_cast<size_t>(s.seq * s.seq));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      probabilities(qd, kd, seg, s, b, h, sm_scale, causal, p, lse);
      // dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P));  dQ = scale dS K;  dK = scale dS^T Q.
      for (int64_t i = 0; i < s.seq; ++i) {
        double row = 0;
        for (int64_t j = 0; j < s.seq; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < s.dim; ++c) acc += dod[s.at(b, i, h, c)] * vd[s.at(b, j, h, c)];
          dp[static_cast<size_t>(i * s.seq + j)] = acc;
          row += acc * p[static_cast<size_t>(i * s.seq + j)];
        }
        for (int64_t j = 0; j < s.seq; ++j) {
          const double pij = p[static_cast<size_t>(i * s.seq + j)];
          const double ds = pij * (dp[static_cast<size_t>(i * s.seq + j)] - row) * sm_scale;
          for (int64_t c = 0; c < s.dim; ++c) {
            dvp[s.at(b, j, h, c)] += pij * dod[s.at(b, i, h, c)];
            dqp[s.at(b, i, h, c)] += ds * kd[s.at(b, j, h, c)];
            dkp[s.at(b, j, h, c)] += ds * qd[s.at(b, i, h, c)];
          }
        }
      }
    }
  return {dq, dk, dv};
}

}  // namespace palladium::ops
