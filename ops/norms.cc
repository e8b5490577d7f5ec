// Layer norm, RMS norm and softmax (ops/norms.h). Forward kernels also return what the backward
// needs (per-row mean and reciprocal standard deviation); backward kernels give dx per row block
// and, for the affine parameters, one partial sum per program that an Array sum finishes.
#include "ops/norms.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "ops/call_cache.h"
#include "palladium/palladium.h"

namespace palladium::ops {

namespace {

struct Rows {
  int64_t rows = 0, features = 0, block = 1;
  DType compute = DType::float32;
};

// A per-row value as a column, to broadcast along the row (x[:, None]).
Value column(const Value& v) { return v(slice(), None); }

Rows rows_of(const char* op, const Array& x, const NormOptions& o) {
  PL_CHECK(x.ndim() == 2, op, ": expects x of shape (rows, features), got ", shape_str(x.shape()));
  PL_CHECK(is_float(x.dtype()), op, ": expects a floating-point x, got ", dtype_name(x.dtype()));
  PL_CHECK(o.block_rows >= 0, op, ": block_rows must be positive (or 0: chosen by the backend), got ", o.block_rows);
  Rows r{x.shape()[0], x.shape()[1], 1, x.dtype() == DType::float64 ? DType::float64 : DType::float32};
  // On CUDA a program's threads share its rows' reductions: one 4096-wide row per program ran
  // fastest on an H100 (bf16 and f32, against 4 and 16 rows); narrower rows are grouped up to that.
  const std::string backend = o.backend.empty() ? default_backend() : o.backend;
  const int64_t want = o.block_rows > 0 ? o.block_rows
                       : backend == "cuda" ? std::max<int64_t>(1, 4096 / std::max<int64_t>(1, r.features))
                                           : 16;
  for (int64_t b = std::min(want, r.rows); b >= 1; --b)
    if (r.rows % b == 0) { r.block = b; break; }
  return r;
}

void check_vector(const char* op, const char* name, const Array& v, const Rows& r) {
  PL_CHECK(v.shape() == Shape{r.features}, op, ": ", name, " must have shape (", r.features, ",), got ",
           shape_str(v.shape()));
}

CallOptions options(const char* name, const Rows& r, const NormOptions& o) {
  return CallOptions{.grid = {r.rows / r.block}, .name = name, .backend = o.backend};
}
BlockSpec row_block(const Rows& r) { return BlockSpec({r.block, r.features}, [](Index i) { return idx(i, 0); }); }
BlockSpec row_stat(const Rows& r) { return BlockSpec({r.block}, [](Index i) { return idx(i); }); }
BlockSpec whole_vector(const Rows& r) { return BlockSpec({r.features}, [](Index) { return idx(0); }); }
BlockSpec partial_row(const Rows& r) { return BlockSpec({None, r.features}, [](Index i) { return idx(i, 0); }); }

std::string key_of(const Rows& r, const NormOptions& o, const CallOptions& c, const std::vector<ShapeDtype>& outs) {
  return call_key(detail::cat(r.rows, ",", r.features, ",", r.block, ",", exact(o.eps)), c, outs);
}

// ---- layer norm ----
std::vector<Array> layer_norm_forward(const Array& x, const Array& w, const Array& b, const NormOptions& o) {
  const Rows r = rows_of("layer_norm", x, o);
  check_vector("layer_norm", "weight", w, r);
  check_vector("layer_norm", "bias", b, r);
  const double eps = o.eps, inv_n = 1.0 / static_cast<double>(r.features);
  const DType ct = r.compute, out_t = x.dtype();
  auto kernel = [eps, inv_n, ct, out_t](Ref x_ref, Ref w_ref, Ref b_ref, Ref o_ref, Ref mean_ref, Ref rstd_ref) {
    Value v = x_ref[all].astype(ct);
    Value mean = jnp::sum(v, 1) * inv_n;
    Value centered = v - column(mean);
    Value rstd = jnp::rsqrt(jnp::sum(centered * centered, 1) * inv_n + eps);
    o_ref[all] = (centered * column(rstd) * w_ref[all].astype(ct) + b_ref[all].astype(ct)).astype(out_t);
    mean_ref[all] = mean;
    rstd_ref[all] = rstd;
  };
  CallOptions c = options("layer_norm_forward", r, o);
  c.in_specs = {row_block(r), whole_vector(r), whole_vector(r)};
  c.out_specs = {row_block(r), row_stat(r), row_stat(r)};
  const std::vector<ShapeDtype> outs{ShapeDtype(x.shape(), out_t), ShapeDtype({r.rows}, ct), ShapeDtype({r.rows}, ct)};
  return cached_call<std::vector<Array>>(key_of(r, o, c, outs), [&] { return pallas_call(kernel, outs, c); })
      .call({x, w, b});
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w; dw, db summed per program.
std::vector<Array> layer_norm_backward(const Array& x, const Array& w, const Array& mean, const Array& rstd,
                                       const Array& dy, const NormOptions& o) {
  const Rows r = rows_of("layer_norm", x, o);
  const double inv_n = 1.0 / static_cast<double>(r.features);
  const DType ct = r.compute, out_t = x.dtype();
  auto kernel = [inv_n, ct, out_t](Ref x_ref, Ref w_ref, Ref mean_ref, Ref rstd_ref, Ref dy_ref, Ref dx_ref, Ref dw_ref,
                                   Ref db_ref) {
    Value rs = column(rstd_ref[all]);
    Value xhat = (x_ref[all].astype(ct) - column(mean_ref[all])) * rs;
    Value dyv = dy_ref[all].astype(ct);
    Value g = dyv * w_ref[all].astype(ct);
    Value mean_g = column(jnp::sum(g, 1)) * inv_n;
    Value mean_gx = column(jnp::sum(g * xhat, 1)) * inv_n;
    dx_ref[all] = (rs * (g - mean_g - xhat * mean_gx)).astype(out_t);
    dw_ref[all] = jnp::sum(dyv * xhat, 0);
    db_ref[all] = jnp::sum(dyv, 0);
  };
  CallOptions c = options("layer_norm_backward", r, o);
  c.in_specs = {row_block(r), whole_vector(r), row_stat(r), row_stat(r), row_block(r)};
  c.out_specs = {row_block(r), partial_row(r), partial_row(r)};
  const int64_t programs = r.rows / r.block;
  const std::vector<ShapeDtype> outs{ShapeDtype(x.shape(), out_t), ShapeDtype({programs, r.features}, ct),
                                     ShapeDtype({programs, r.features}, ct)};
  std::vector<Array> p = cached_call<std::vector<Array>>(key_of(r, o, c, outs), [&] { return pallas_call(kernel, outs, c); })
                             .call({x, w, mean, rstd, dy});
  return {p[0], jnp::sum(p[1], {0}).astype(w.dtype()), jnp::sum(p[2], {0}).astype(w.dtype())};
}

// ---- RMS norm ----
std::vector<Array> rms_norm_forward(const Array& x, const Array& w, const NormOptions& o) {
  const Rows r = rows_of("rms_norm", x, o);
  check_vector("rms_norm", "weight", w, r);
  const double eps = o.eps, inv_n = 1.0 / static_cast<double>(r.features);
  const DType ct = r.compute, out_t = x.dtype();
  auto kernel = [eps, inv_n, ct, out_t](Ref x_ref, Ref w_ref, Ref o_ref, Ref rstd_ref) {
    Value v = x_ref[all].astype(ct);
    Value rstd = jnp::rsqrt(jnp::sum(v * v, 1) * inv_n + eps);
    o_ref[all] = (v * column(rstd) * w_ref[all].astype(ct)).astype(out_t);
    rstd_ref[all] = rstd;
  };
  CallOptions c = options("rms_norm_forward", r, o);
  c.in_specs = {row_block(r), whole_vector(r)};
  c.out_specs = {row_block(r), row_stat(r)};
  const std::vector<ShapeDtype> outs{ShapeDtype(x.shape(), out_t), ShapeDtype({r.rows}, ct)};
  return cached_call<std::vector<Array>>(key_of(r, o, c, outs), [&] { return pallas_call(kernel, outs, c); })
      .call({x, w});
}

// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w, xhat = x * rstd; dw summed per program.
std::vector<Array> rms_norm_backward(const Array& x, const Array& w, const Array& rstd, const Array& dy,
                                     const NormOptions& o) {
  const Rows r = rows_of("rms_norm", x, o);
  const double inv_n = 1.0 / static_cast<double>(r.features);
  const DType ct = r.compute, out_t = x.dtype();
  auto kernel = [inv_n, ct, out_t](Ref x_ref, Ref w_ref, Ref rstd_ref, Ref dy_ref, Ref dx_ref, Ref dw_ref) {
    Value rs = column(rstd_ref[all]);
    Value xhat = x_ref[all].astype(ct) * rs;
    Value dyv = dy_ref[all].astype(ct);
    Value g = dyv * w_ref[all].astype(ct);
    Value mean_gx = column(jnp::sum(g * xhat, 1)) * inv_n;
    dx_ref[all] = (rs * (g - xhat * mean_gx)).astype(out_t);
    dw_ref[all] = jnp::sum(dyv * xhat, 0);
  };
  CallOptions c = options("rms_norm_backward", r, o);
  c.in_specs = {row_block(r), whole_vector(r), row_stat(r), row_block(r)};
  c.out_specs = {row_block(r), partial_row(r)};
  const int64_t programs = r.rows / r.block;
  const std::vector<ShapeDtype> outs{ShapeDtype(x.shape(), out_t), ShapeDtype({programs, r.features}, ct)};
  std::vector<Array> p = cached_call<std::vector<Array>>(key_of(r, o, c, outs), [&] { return pallas_call(kernel, outs, c); })
                             .call({x, w, rstd, dy});
  return {p[0], jnp::sum(p[1], {0}).astype(w.dtype())};
}

// ---- softmax ----
Array softmax_forward(const Array& x, const NormOptions& o) {
  const Rows r = rows_of("softmax", x, o);
  const DType ct = r.compute, out_t = x.dtype();
  auto kernel = [ct, out_t](Ref x_ref, Ref o_ref) {
    Value v = x_ref[all].astype(ct);
    Value e = jnp::exp(v - column(jnp::max(v, 1)));
    o_ref[all] = (e / column(jnp::sum(e, 1))).astype(out_t);
  };
  CallOptions c = options("softmax_forward", r, o);
  c.in_specs = {row_block(r)};
  c.out_specs = {row_block(r)};
  const std::vector<ShapeDtype> outs{ShapeDtype(x.shape(), out_t)};
  return cached_call<Array>(key_of(r, o, c, outs), [&] { return pallas_call(kernel, outs[0], c); })(x);
}

// dx = y * (dy - sum(dy * y)) per row.
Array softmax_backward(const Array& y, const Array& dy, const NormOptions& o) {
  const Rows r = rows_of("softmax", y, o);
  const DType ct = r.compute, out_t = y.dtype();
  auto kernel = [ct, out_t](Ref y_ref, Ref dy_ref, Ref dx_ref) {
    Value yv = y_ref[all].astype(ct), d = dy_ref[all].astype(ct);
    dx_ref[all] = (yv * (d - column(jnp::sum(d * yv, 1)))).astype(out_t);
  };
  CallOptions c = options("softmax_backward", r, o);
  c.in_specs = {row_block(r), row_block(r)};
  c.out_specs = {row_block(r)};
  const std::vector<ShapeDtype> outs{ShapeDtype(y.shape(), out_t)};
  return cached_call<Array>(key_of(r, o, c, outs), [&] { return pallas_call(kernel, outs[0], c); })(y, dy);
}

}  // namespace

Array layer_norm(const Array& x, const Array& weight, const Array& bias, const NormOptions& o) {
  auto primal = [o](const Array& x_, const Array& w_, const Array& b_) { return layer_norm_forward(x_, w_, b_, o)[0]; };
  auto fwd = [o](const Array& x_, const Array& w_, const Array& b_) {
    std::vector<Array> f = layer_norm_forward(x_, w_, b_, o);
    return std::make_pair(f[0], std::make_tuple(x_, w_, f[1], f[2]));
  };
  auto bwd = [o](const std::tuple<Array, Array, Array, Array>& res, const Array& dy) {
    const auto& [x_, w_, mean, rstd] = res;
    std::vector<Array> g = layer_norm_backward(x_, w_, mean, rstd, dy, o);
    return std::make_tuple(g[0], g[1], g[2]);
  };
  return custom_vjp("layer_norm", primal, fwd, bwd)(x, weight, bias);
}

Array rms_norm(const Array& x, const Array& weight, const NormOptions& o) {
  auto primal = [o](const Array& x_, const Array& w_) { return rms_norm_forward(x_, w_, o)[0]; };
  auto fwd = [o](const Array& x_, const Array& w_) {
    std::vector<Array> f = rms_norm_forward(x_, w_, o);
    return std::make_pair(f[0], std::make_tuple(x_, w_, f[1]));
  };
  auto bwd = [o](const std::tuple<Array, Array, Array>& res, const Array& dy) {
    const auto& [x_, w_, rstd] = res;
    std::vector<Array> g = rms_norm_backward(x_, w_, rstd, dy, o);
    return std::make_tuple(g[0], g[1]);
  };
  return custom_vjp("rms_norm", primal, fwd, bwd)(x, weight);
}

Array softmax(const Array& x, const NormOptions& o) {
  auto primal = [o](const Array& x_) { return softmax_forward(x_, o); };
  auto fwd = [o](const Array& x_) {
    Array y = softmax_forward(x_, o);
    return std::make_pair(y, std::make_tuple(y));
  };
  auto bwd = [o](const std::tuple<Array>& res, const Array& dy) {
    return std::make_tuple(softmax_backward(std::get<0>(res), dy, o));
  };
  return custom_vjp("softmax", primal, fwd, bwd)(x);
}

}  // namespace palladium::ops
