// Paged attention decode (ops/paged_attention.h). Grid (batch, heads, pages): the page axis is
// sequential, so the running max, sum and accumulator stay in scratch across a sequence's pages;
// the k/v index maps read the page table (scalar prefetch) to fetch each program's page.
#include "ops/paged_attention.h"

#include <cmath>
#include <limits>

#include "ops/call_cache.h"
#include "palladium/palladium.h"

namespace palladium::ops {

namespace {

struct Dims {
  int64_t batch = 0, heads = 0, head_dim = 0, kv_heads = 0, total_pages = 0, page = 0, per_seq = 0;
};

Dims check(const Array& q, const Array& k, const Array& v, const Array& lengths, const Array& table) {
  const char* op = "paged_attention";
  PL_CHECK(q.ndim() == 3, op, ": q must be (batch, heads, head_dim), got ", shape_str(q.shape()));
  PL_CHECK(k.ndim() == 4, op, ": k_pages must be (kv_heads, total_pages, page_size, head_dim), got ", shape_str(k.shape()));
  PL_CHECK(v.shape() == k.shape(), op, ": v_pages has shape ", shape_str(v.shape()), " but k_pages ", shape_str(k.shape()));
  PL_CHECK(is_float(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
           ": q, k_pages and v_pages must share one floating-point dtype, got ", dtype_name(q.dtype()), ", ",
           dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  Dims d{q.shape()[0], q.shape()[1], q.shape()[2], k.shape()[0], k.shape()[1], k.shape()[2], 0};
  PL_CHECK(k.shape()[3] == d.head_dim, op, ": k_pages has head_dim ", k.shape()[3], " but q has ", d.head_dim);
  PL_CHECK(d.heads % d.kv_heads == 0, op, ": heads (", d.heads, ") must be a multiple of kv_heads (", d.kv_heads, ")");
  PL_CHECK(lengths.shape() == Shape{d.batch} && lengths.dtype() == DType::int32, op, ": lengths must be int32 (", d.batch,
           ",), got ", dtype_name(lengths.dtype()), shape_str(lengths.shape()));
  PL_CHECK(table.ndim() == 2 && table.shape()[0] == d.batch && table.dtype() == DType::int32, op,
           ": page_indices must be int32 (batch, pages_per_sequence), got ", dtype_name(table.dtype()), shape_str(table.shape()));
  d.per_seq = table.shape()[1];
  return d;
}

}  // namespace

Array paged_attention(const Array& q, const Array& k_pages, const Array& v_pages, const Array& lengths,
                      const Array& page_indices, const PagedAttentionOptions& o) {
  const Dims d = check(q, k_pages, v_pages, lengths, page_indices);
  const double scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(d.head_dim));
  const DType ct = q.dtype() == DType::float64 ? DType::float64 : DType::float32;
  const int64_t group = d.heads / d.kv_heads, page = d.page, hd = d.head_dim, last_step = d.per_seq - 1;
  // One program per (sequence, kv head, page): the `group` query heads that share a kv head are
  // one (group, head_dim) block, so each page of keys and values is read once, not once per head.
  CallOptions c;
  c.grid = {d.batch, d.kv_heads, d.per_seq};
  c.dimension_semantics = {parallel, parallel, arbitrary};
  c.num_scalar_prefetch = 2;  // lengths, page_indices
  // A step past the sequence's last page keeps its last page's index, so nothing new is fetched.
  auto kv_map = [page](Index b, Index h, Index p, Ref lengths_ref, Ref table_ref) {
    Value last = cdiv(Value(lengths_ref[b]), Value(page)) - 1;
    return idx(h, table_ref(b, jnp::minimum(p, last)), 0, 0);
  };
  auto q_map = [](Index b, Index h, Index, Ref, Ref) { return idx(b, h, 0); };  // heads h*group .. h*group+group-1
  c.in_specs = {BlockSpec({None, group, hd}, q_map), BlockSpec({None, None, page, hd}, kv_map),
                BlockSpec({None, None, page, hd}, kv_map)};
  c.out_specs = {BlockSpec({None, group, hd}, q_map)};
  c.scratch_shapes = {ShapeDtype({group, 1}, ct), ShapeDtype({group, 1}, ct), ShapeDtype({group, hd}, ct)};  // max, sum, acc
  c.name = "paged_attention";
  c.backend = o.backend;
  const std::vector<ShapeDtype> outs{ShapeDtype(q.shape(), q.dtype())};
  const std::string key = call_key(detail::cat(exact(scale), ",", group), c, outs);
  auto call = cached_call<Array>(key, [&] {
    const DType out_t = q.dtype();
    auto kernel = [scale, ct, group, page, hd, last_step, out_t](Ref lengths_ref, Ref, Ref q_ref, Ref k_ref, Ref v_ref, Ref o_ref,
                                                                   Ref m_ref, Ref l_ref, Ref acc_ref) {
      Value b = program_id(0), p = program_id(2);
      when(p == 0, [&] {
        m_ref[all] = jnp::full({group, 1}, -std::numeric_limits<double>::infinity(), ct);
        l_ref[all] = jnp::zeros({group, 1}, ct);
        acc_ref[all] = jnp::zeros({group, hd}, ct);
      });
      Value length = lengths_ref[b];
      when(p * page < length, [&] {
        Value qv = q_ref[all].astype(ct) * scale;                      // (group, head_dim)
        Value k = k_ref[all].astype(ct), v = v_ref[all].astype(ct);    // (page, head_dim)
        Value s = dot(qv, k, false, true);                             // (group, page)
        Value pos = p * page + jnp::iota(DType::int32, {1, page}, 1);
        s = jnp::where(pos < length, s, -std::numeric_limits<double>::infinity());
        Value m_prev = m_ref[all], m_new = jnp::maximum(m_prev, jnp::max(s, 1)(slice(), None));
        Value alpha = jnp::exp(m_prev - m_new), weights = jnp::exp(s - m_new);
        l_ref[all] = Value(l_ref[all]) * alpha + jnp::sum(weights, 1)(slice(), None);
        acc_ref[all] = Value(acc_ref[all]) * alpha + dot(weights, v);
        m_ref[all] = m_new;
      });
      when(p == last_step, [&] { o_ref[all] = (Value(acc_ref[all]) / Value(l_ref[all])).astype(out_t); });
    };
    return pallas_call(kernel, outs[0], c);
  });
  return call(lengths, page_indices, q, k_pages, v_pages);
}

Array paged_attention_reference(const Array& q, const Array& k_pages, const Array& v_pages, const Array& lengths,
                                const Array& page_indices, double scale) {
  const Dims d = check(q, k_pages, v_pages, lengths, page_indices);
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(d.head_dim));
  const int64_t group = d.heads / d.kv_heads;
  Array out(q.shape(), DType::float64);
  auto kv_at = [&](const Array& pages, int64_t h, int64_t b, int64_t t, int64_t e) {
    const int64_t pg = page_indices.get_int(b * d.per_seq + t / d.page);
    return pages.get(((h * d.total_pages + pg) * d.page + t % d.page) * d.head_dim + e);
  };
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t n = lengths.get_int(b);
    for (int64_t h = 0; h < d.heads; ++h) {
      const int64_t kh = h / group;
      std::vector<double> s(static_cast<size_t>(n));
      double m = -INFINITY;
      for (int64_t t = 0; t < n; ++t) {
        double acc = 0;
        for (int64_t e = 0; e < d.head_dim; ++e) acc += q.get((b * d.heads + h) * d.head_dim + e) * kv_at(k_pages, kh, b, t, e);
        s[static_cast<size_t>(t)] = acc * scale;
        m = std::max(m, acc * scale);
      }
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (int64_t e = 0; e < d.head_dim; ++e) {
        double acc = 0;
        for (int64_t t = 0; t < n; ++t) acc += s[static_cast<size_t>(t)] * kv_at(v_pages, kh, b, t, e);
        out.set((b * d.heads + h) * d.head_dim + e, acc / l);
      }
    }
  }
  return out;
}

}  // namespace palladium::ops
