// Scalar prefetch (Pallas's PrefetchScalarGridSpec): index maps that read prefetched integer
// arrays choose each program's blocks — a page table, the basis of paged and ragged kernels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using ScalarPrefetchTest = KernelTest;

// out[b] = sum over p < lengths[b] of pages[table[b, p]]: the pages block comes from the table,
// pages past a sequence's length are skipped (their table entries are garbage, clamped by the map).
TEST_P(ScalarPrefetchTest, PageTableGathersBlocks) {
  Rng rng;
  const int64_t batch = 3, per_seq = 4, num_pages = 9, page = 16;
  Array table = rng.values({batch, per_seq}, i32, 0, num_pages), lengths = rng.values({batch}, i32, 1, per_seq + 1);
  Array pages = rng.normal({num_pages, page});
  CallOptions o;
  o.grid = {batch, per_seq};
  o.dimension_semantics = {pl::parallel, pl::arbitrary};
  o.num_scalar_prefetch = 2;
  o.in_specs = {BlockSpec({pl::None, page}, [](Index b, Index p, Ref table_ref, Ref lengths_ref) {
    Value last = Value(lengths_ref[b]) - 1;  // past the length: stay on the last real page (not read)
    return pl::idx(table_ref(b, jnp::minimum(p, last)), 0);
  })};
  o.out_specs = {BlockSpec({pl::None, page}, [](Index b, Index, Ref, Ref) { return pl::idx(b, 0); })};
  o.name = "paged_sum";
  Array out = run1(
      [](Ref, Ref lengths_ref, Ref pages_ref, Ref o_ref) {
        Value b = pl::program_id(0), p = pl::program_id(1);
        pl::when(p == 0, [&] { o_ref[pl::all] = jnp::zeros({16}); });
        pl::when(p < Value(lengths_ref[b]), [&] { o_ref[pl::all] = o_ref[pl::all] + pages_ref[pl::all]; });
      },
      ShapeDtype({batch, page}, f32), o, {table, lengths, pages});
  EXPECT_TRUE(matches(out, ref_f64({batch, page}, [&](int64_t f) {
    const int64_t b = f / page, c = f % page;
    double s = 0;
    for (int64_t p = 0; p < lengths.get_int(b); ++p) s += pages.get(table.get_int(b * per_seq + p) * page + c);
    return s;
  }), f32));
}

// vmap over several page pools that share one table and lengths (unbatched prefetch inputs).
TEST_P(ScalarPrefetchTest, VmapOverPoolsSharingTheTable) {
  Rng rng;
  const int64_t pools = 2, batch = 2, per_seq = 3, num_pages = 5, page = 8;
  Array table = rng.values({batch, per_seq}, i32, 0, num_pages), pages = rng.normal({pools, num_pages, page});
  CallOptions o;
  o.grid = {batch, per_seq};
  o.dimension_semantics = {pl::parallel, pl::arbitrary};
  o.num_scalar_prefetch = 1;
  o.in_specs = {BlockSpec({pl::None, page}, [](Index b, Index p, Ref t) { return pl::idx(t(b, p), 0); })};
  o.out_specs = {BlockSpec({pl::None, page}, [](Index b, Index, Ref) { return pl::idx(b, 0); })};
  o.name = "vmapped_pages";
  auto kernel = [](Ref, Ref pages_ref, Ref o_ref) {
    pl::when(pl::program_id(1) == 0, [&] { o_ref[pl::all] = jnp::zeros({8}); });
    o_ref[pl::all] = o_ref[pl::all] + pages_ref[pl::all];
  };
  Array out = run(
      [&](const std::string& be) {
        CallOptions c = o;
        c.backend = be;
        return pl::vmap(pallas_call(kernel, ShapeDtype({batch, page}, f32), c), {pl::None, 0});
      },
      {table, pages}).at(0);
  EXPECT_TRUE(matches(out, ref_f64({pools, batch, page}, [&](int64_t f) {
    const int64_t q = f / (batch * page), b = f / page % batch, c = f % page;
    double s = 0;
    for (int64_t p = 0; p < per_seq; ++p) s += pages.get((q * num_pages + table.get_int(b * per_seq + p)) * page + c);
    return s;
  }), f32));
  auto batched_table = [&] {
    CallOptions c = o;
    c.backend = "interpret";
    return pl::vmap(pallas_call(kernel, ShapeDtype({batch, page}, f32), c));
  };
  Array tables = rng.values({pools, batch, per_seq}, i32, 0, num_pages);
  PL_EXPECT_ERROR(batched_table()(tables, pages), "scalar-prefetch input 0 must be unbatched (in_axes None)");
}

TEST(ScalarPrefetchErrors, CountsAndDtypes) {
  Array table = Rng().values({4}, i32, 0, 4), x = Rng().normal({4, 8});
  auto message = [&](CallOptions o, const std::vector<Array>& in) {
    o.backend = "interpret";
    o.name = "pf";
    return test_support::error_message(
        [&] { (void)pallas_call([](Refs r) { r.back()[pl::all] = jnp::zeros({8}); }, ShapeDtype({4, 8}, f32), o).call(in); });
  };
  CallOptions o;
  o.grid = {4};
  o.num_scalar_prefetch = 1;
  o.out_specs = {BlockSpec({pl::None, 8}, [](Index i, Ref t) { return pl::idx(Value(t[i]), 0); })};
  EXPECT_THAT(message(o, {x.astype(f32), x}), ::testing::HasSubstr("scalar-prefetch input 0 must be an integer array, got float32"));
  o.num_scalar_prefetch = 2;
  EXPECT_THAT(message(o, {table, table.astype(i32), x}),
              ::testing::HasSubstr("out_specs[0]: index_map takes 1 scalar-prefetch Refs but num_scalar_prefetch is 2"));
  o.num_scalar_prefetch = 1;
  o.in_specs = {BlockSpec(), BlockSpec()};
  EXPECT_THAT(message(o, {table, x}),
              ::testing::HasSubstr("in_specs has 2 entries but the call got 1 inputs besides its scalar-prefetch ones"));
}

PL_INSTANTIATE_BACKENDS(ScalarPrefetchTest);

}  // namespace
}  // namespace palladium::ktest
