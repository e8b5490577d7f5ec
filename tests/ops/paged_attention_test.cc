// Paged attention decode (ops/paged_attention.h) on every available backend against a float64
// reference that walks the page table itself: grouped queries, ragged lengths (a partial last
// page, a single token, a full table), shared and repeated pages, float32 and bfloat16.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "backends/backend.h"
#include "ops/paged_attention.h"
#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;

namespace {

class PagedAttention : public ::testing::TestWithParam<std::string> {};

// A fresh key per run, printed so that a failure can be replayed.
uint64_t run_seed() {
  static const uint64_t s = [] {
    if (const char* v = std::getenv("PALLADIUM_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(v, nullptr, 10));
    return static_cast<uint64_t>(std::random_device{}());
  }();
  return s;
}

TEST_P(PagedAttention, MatchesFloat64Reference) {
  std::cout << "[ seed     ] PALLADIUM_TEST_SEED=" << run_seed() << "\n";
  const int64_t batch = 4, heads = 4, kv_heads = 2, head_dim = 32, page = 8, per_seq = 6, pool = 11;
  pl::random::Key key = pl::random::fold_in(pl::random::key(run_seed()), 7);
  Array lengths = pl::random::uniform(pl::random::fold_in(key, 1), {batch}, pl::i32, 1, per_seq * page + 1);
  lengths.set(0, 1.0);                       // one token
  lengths.set(1, static_cast<double>(per_seq * page));  // every page, full
  lengths.set(2, static_cast<double>(2 * page + 3));    // a partial last page
  Array table = pl::random::uniform(pl::random::fold_in(key, 2), {batch, per_seq}, pl::i32, 0, pool);
  table.set(3, table.get(2));  // a page used twice by one sequence
  for (pl::DType t : {pl::f32, pl::bf16}) {
    SCOPED_TRACE(pl::dtype_name(t));
    Array q = pl::random::normal(pl::random::fold_in(key, 3), {batch, heads, head_dim}, t);
    Array k = pl::random::normal(pl::random::fold_in(key, 4), {kv_heads, pool, page, head_dim}, t);
    Array v = pl::random::normal(pl::random::fold_in(key, 5), {kv_heads, pool, page, head_dim}, t);
    Array want = pl::ops::paged_attention_reference(q.astype(pl::f64), k.astype(pl::f64), v.astype(pl::f64), lengths, table);
    for (int64_t pages_per_step : {1, 2, 8}) {  // 6, 3 and 1 steps per sequence
      SCOPED_TRACE(pages_per_step);
      Array got = pl::ops::paged_attention(q, k, v, lengths, table, {.pages_per_step = pages_per_step, .backend = GetParam()});
      ASSERT_EQ(got.dtype(), t);
      EXPECT_LT(pl::rel_error(got.astype(pl::f64), want), t == pl::f32 ? 1e-5 : 1e-2);
    }
  }
}

TEST(PagedAttentionErrors, ShapesAndDtypes) {
  Array q = pl::random::normal(pl::random::key(run_seed()), {2, 3, 16});
  Array k = pl::random::normal(pl::random::key(run_seed() + 1), {2, 4, 8, 16});
  Array lengths = pl::full({2}, 5.0, pl::i32), table = pl::full({2, 2}, 1.0, pl::i32);
  EXPECT_THAT(pl::test_support::error_message([&] { pl::ops::paged_attention(q, k, k, lengths, table); }),
              ::testing::HasSubstr("paged_attention: heads (3) must be a multiple of kv_heads (2)"));
  Array q4 = pl::random::normal(pl::random::key(run_seed() + 2), {2, 4, 16});
  EXPECT_THAT(pl::test_support::error_message([&] { pl::ops::paged_attention(q4, k, k, lengths.astype(pl::i64), table); }),
              ::testing::HasSubstr("paged_attention: lengths must be int32 (2,), got int64(2,)"));
}

INSTANTIATE_TEST_SUITE_P(Ops, PagedAttention, ::testing::ValuesIn(pl::backend::available_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
