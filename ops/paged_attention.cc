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
  PL_CHECK(o.pages_per_step >= 1, "paged_attention: pages_per_step must be positive, got ", o.pages_per_step);
  // Pages per program: the largest divisor of pages_per_sequence up to the option.
  int64_t pages = 1;
  for (int64_t n = std::min(o.pages_per_step, d.per_seq); n >= 1; --n)
    if (d.per_seq % n == 0) { pages = n; break; }
  const int64_t group = d.heads / d.kv_heads, page = d.page, hd = d.head_dim, steps = d.per_seq / pages;
  // One program per (sequence, kv head, run of `pages` pages): the `group` query heads that share
  // a kv head are one (group, head_dim) block, so each page is read once, not once per head; each
  // page of the run is its own input (the same pool, its own index map), as a Pallas kernel would.
  CallOptions c;
  c.grid = {d.batch, d.kv_heads, steps};
  c.dimension_semantics = {parallel, parallel, arbitrary};
  c.num_scalar_prefetch = 2;  // lengths, page_indices
  auto q_map = [](Index b, Index h, Index, Ref, Ref) { return idx(b, h, 0); };  // heads h*group .. h*group+group-1
  c.in_specs = {BlockSpec({None, group, hd}, q_map)};
  for (int kv = 0; kv < 2; ++kv)
    for (int64_t j = 0; j < pages; ++j)
      // A page past the sequence's last keeps the last one's index: nothing new is fetched (it is masked).
      c.in_specs.push_back(BlockSpec({None, None, page, hd}, [page, pages, j](Index b, Index h, Index s, Ref lengths_ref, Ref table_ref) {
        Value last = cdiv(Value(lengths_ref[b]), Value(page)) - 1;
        return idx(h, table_ref(b, jnp::minimum(s * pages + j, last)), 0, 0);
      }));
  c.out_specs = {BlockSpec({None, group, hd}, q_map)};
  c.scratch_shapes = {ShapeDtype({group, 1}, ct), ShapeDtype({group, 1}, ct), ShapeDtype({group, hd}, ct)};  // max, sum, acc
  c.name = "paged_attention";
  c.backend = o.backend;
  const std::vector<ShapeDtype> outs{ShapeDtype(q.shape(), q.dtype())};
  const std::string key = call_key(detail::cat(exact(scale), ",", group, ",", pages), c, outs);
  auto call = cached_call<Array>(key, [&] {
    const DType out_t = q.dtype();
    const double inf = std::numeric_limits<double>::infinity();
    auto kernel = [scale, ct, group, page, pages, hd, steps, out_t, inf](Refs r) {
      // Refs: lengths, table, q, `pages` key pages, `pages` value pages, out, max, sum, acc.
      const Ref& lengths_ref = r[0];
      const Ref& q_ref = r[2];
      const size_t k0 = 3, v0 = 3 + static_cast<size_t>(pages), o_at = v0 + static_cast<size_t>(pages);
      const Ref &o_ref = r[o_at], &m_ref = r[o_at + 1], &l_ref = r[o_at + 2], &acc_ref = r[o_at + 3];
      Value b = program_id(0), s = program_id(2);
      when(s == 0, [&] {
        m_ref[all] = jnp::full({group, 1}, -inf, ct);
        l_ref[all] = jnp::zeros({group, 1}, ct);
        acc_ref[all] = jnp::zeros({group, hd}, ct);
      });
      Value length = lengths_ref[b];
      Value first = s * (pages * page);
      when(first < length, [&] {
        Value qv = q_ref[all].astype(ct) * scale;  // (group, head_dim)
        std::vector<Value> scores;
        Value m_new = m_ref[all];
        for (int64_t j = 0; j < pages; ++j) {
          Value k = r[k0 + static_cast<size_t>(j)][all].astype(ct);  // (page, head_dim)
          Value sc = dot(qv, k, false, true);                          // (group, page)
          Value pos = first + j * page + jnp::iota(DType::int32, {1, page}, 1);
          scores.push_back(jnp::where(pos < length, sc, -inf));
          m_new = jnp::maximum(m_new, jnp::max(scores.back(), 1)(slice(), None));
        }
        Value alpha = jnp::exp(Value(m_ref[all]) - m_new);
        Value l = Value(l_ref[all]) * alpha, acc = Value(acc_ref[all]) * alpha;
        for (int64_t j = 0; j < pages; ++j) {
          Value w = jnp::exp(scores[static_cast<size_t>(j)] - m_new);
          l = l + jnp::sum(w, 1)(slice(), None);
          acc = acc + dot(w, r[v0 + static_cast<size_t>(j)][all].astype(ct));
        }
        l_ref[all] = l;
        acc_ref[all] = acc;
        m_ref[all] = m_new;
      });
      when(s == steps - 1, [&] { o_ref[all] = (Value(acc_ref[all]) / Value(l_ref[all])).astype(out_t); });
    };
    return pallas_call(kernel, outs[0], c);
  });
  std::vector<Array> args{lengths, page_indices, q};
  for (int kv = 0; kv < 2; ++kv)
    for (int64_t j = 0; j < pages; ++j) args.push_back(kv == 0 ? k_pages : v_pages);
  return call.call(args);
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
