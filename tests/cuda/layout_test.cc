// Ops that move data between threads: broadcast, reshape, transpose, reductions, cumsum, on
// register tiles, tiles in global scratch (too large for registers), and mma accumulator rows.
#include "tests/cuda/cuda_test_util.h"

namespace palladium::cudatest {
namespace {

TEST(CudaLayout, BroadcastReshapeTranspose) {
  PL_REQUIRE_NVRTC();
  for (DType t : {f32, bf16, i32, bool_}) {
    SCOPED_TRACE(dtype_name(t));
    auto kernel = [](pl::Ref x, pl::Ref row, pl::Ref o_t, pl::Ref o_b, pl::Ref o_r, pl::Ref o_3) {
      pl::Value v = x[pl::all];                  // [24, 40]
      o_t[pl::all] = v.T();                      // [40, 24]
      pl::Value r = row[pl::all];                // [40]
      o_b[pl::all] = jnp::where(r(pl::None, pl::slice()) == r(pl::None, pl::slice()), v, v) &
                     jnp::broadcast_to(r(pl::None, pl::slice()), {24, 40});
      o_r[pl::all] = v.reshape({8, 3, 40}).transpose({2, 0, 1}).reshape({40, 24});
      o_3[pl::all] = jnp::broadcast_to(v(pl::slice(), pl::None, pl::slice()), {24, 2, 40});
    };
    Array x = is_float(t) ? normal(1, {24, 40}, t) : uniform(1, {24, 40}, i32, 0, 2).astype(t);
    Array row = is_float(t) ? normal(2, {40}, t) : uniform(2, {40}, i32, 0, 2).astype(t);
    if (is_float(t)) {
      // & is not defined on floats: use a float-friendly kernel instead.
      auto fk = [](pl::Ref xr, pl::Ref rr, pl::Ref o_t, pl::Ref o_b, pl::Ref o_r, pl::Ref o_3) {
        pl::Value v = xr[pl::all], rv = rr[pl::all];
        o_t[pl::all] = v.T();
        o_b[pl::all] = v * rv(pl::None, pl::slice()) + jnp::sum(v, 1)(pl::slice(), pl::None);
        o_r[pl::all] = v.reshape({8, 3, 40}).transpose({2, 0, 1}).reshape({40, 24});
        o_3[pl::all] = jnp::broadcast_to(v(pl::slice(), pl::None, pl::slice()), {24, 2, 40});
      };
      check_kernel(fk, {ShapeDtype({40, 24}, t), ShapeDtype({24, 40}, t), ShapeDtype({40, 24}, t), ShapeDtype({24, 2, 40}, t)},
                   {.name = "layout_f"}, {x, row});
    } else {
      check_kernel(kernel, {ShapeDtype({40, 24}, t), ShapeDtype({24, 40}, t), ShapeDtype({40, 24}, t), ShapeDtype({24, 2, 40}, t)},
                   {.name = "layout_i"}, {x, row});
    }
  }
}

TEST(CudaLayout, ReductionsEveryAxis) {
  PL_REQUIRE_NVRTC();
  for (DType t : {f32, f16, bf16, f64, i32, i8, u32, i64}) {
    SCOPED_TRACE(dtype_name(t));
    const Shape shape{6, 50, 7};
    auto kernel = [](pl::Refs r) {
      pl::Value x = r[0][pl::all];
      int o = 1;
      for (int axis = 0; axis < 3; ++axis) {
        r[o++][pl::all] = jnp::sum(x, axis);
        r[o++][pl::all] = jnp::max(x, axis);
        r[o++][pl::all] = jnp::min(x, axis);
        r[o++][pl::all] = jnp::argmax(x, axis);
        r[o++][pl::all] = jnp::argmin(x, axis);
        r[o++][pl::all] = jnp::cumsum(x, axis);
      }
    };
    std::vector<ShapeDtype> outs;
    for (int axis = 0; axis < 3; ++axis) {
      Shape rs = shape;
      rs.erase(rs.begin() + axis);
      outs.insert(outs.end(), {ShapeDtype(rs, t), ShapeDtype(rs, t), ShapeDtype(rs, t), ShapeDtype(rs, i32),
                               ShapeDtype(rs, i32), ShapeDtype(shape, t)});
    }
    Array x = is_float(t) ? normal(3, shape, t) : uniform(3, shape, i32, is_unsigned(t) ? 0 : -50, 50).astype(t);
    check_kernel(kernel, outs, {.name = "reduce"}, {x});
  }
}

// Few results over long rows (a norm's row statistics): several threads share each result, within
// a warp or across warps (8 warps, 3 rows: 64 threads a row, and a group with no row); a single
// result (one row, a whole tile) folds each thread's own elements first. Sums, maxima and minima of
// floats and integers, rows of odd length.
TEST(CudaLayout, WholeRowReductionsShareTheirThreads) {
  PL_REQUIRE_NVRTC();
  for (int warps : {4, 8}) {
    for (DType t : {f32, bf16, i32}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + ", " + std::to_string(warps) + " warps");
      const Shape shape{3, 4099};
      auto kernel = [](pl::Ref x, pl::Ref o_sum, pl::Ref o_max, pl::Ref o_min, pl::Ref o_col, pl::Ref o_all) {
        pl::Value v = x[pl::all];
        o_sum[pl::all] = jnp::sum(v, 1);
        o_max[pl::all] = jnp::max(v, 1);
        o_min[pl::all] = jnp::min(v, 1);
        o_col[pl::all] = jnp::max(x(pl::slice(0, 1), pl::slice()), 1);  // one row: one result
        o_all[pl::all] = jnp::sum(jnp::sum(v, 0), 0);
      };
      Array x = is_float(t) ? normal(5, shape, t) : uniform(5, shape, i32, -1000, 1000).astype(t);
      check_kernel(kernel,
                   {ShapeDtype({3}, t), ShapeDtype({3}, t), ShapeDtype({3}, t), ShapeDtype({1}, t), ShapeDtype({}, t)},
                   {.name = "row_reduce", .compiler_params = {.num_warps = warps}}, {x});
    }
  }
}

// A one-row program's norm: the weight row (n,) broadcast to (1, n) moves no data, the row's
// statistic broadcast back; against the interpreter for f32 and bf16 rows of odd length.
TEST(CudaLayout, OneRowNormBroadcastsItsWeightInPlace) {
  PL_REQUIRE_NVRTC();
  for (DType t : {f32, bf16}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t n = 4099;
    auto kernel = [](pl::Ref x, pl::Ref w, pl::Ref o) {
      pl::Value v = x[pl::all].astype(f32);  // (1, n)
      pl::Value ms = jnp::sum(v * v, 1) * (1.0f / 4099.0f);
      o[pl::all] = (v * jnp::rsqrt(ms + 1e-5f)(pl::slice(), pl::None) * w[pl::all].astype(f32)(pl::None, pl::slice())).astype(o.dtype());
    };
    check_kernel(kernel, {ShapeDtype({3, n}, t)},
                 {.grid = {3},
                  .in_specs = {pl::BlockSpec({1, n}, [](pl::Index i) { return pl::idx(i, 0); }), pl::BlockSpec({n}, [](pl::Index) { return 0; })},
                  .out_specs = {pl::BlockSpec({1, n}, [](pl::Index i) { return pl::idx(i, 0); })},
                  .name = "one_row_norm"},
                 {normal(7, {3, n}, t), normal(8, {n}, t)});
  }
}

TEST(CudaLayout, ArgmaxTiesAndNaN) {
  PL_REQUIRE_NVRTC();
  Array x = pl::zeros({4, 9});
  x.set(3, 2.0);  x.set(5, 2.0);        // row 0: tie, first index wins
  x.set(9 + 4, NAN); x.set(9 + 6, 5.0); // row 1: NaN wins
  auto kernel = [](pl::Ref a, pl::Ref o1, pl::Ref o2, pl::Ref o3) {
    o1[pl::all] = jnp::argmax(a[pl::all], 1);
    o2[pl::all] = jnp::argmin(a[pl::all], 1);
    o3[pl::all] = jnp::max(a[pl::all], 1);
  };
  check_kernel(kernel, {ShapeDtype({4}, i32), ShapeDtype({4}, i32), ShapeDtype({4}, f32)}, {}, {x});
}

TEST(CudaLayout, LargeTilesInScratchMemory) {
  PL_REQUIRE_NVRTC();
  // 512 x 160 f32 per program is past the register budget: the tile lives in global scratch.
  const Shape shape{1024, 160};
  auto kernel = [](pl::Ref x, pl::Ref o_sum, pl::Ref o_t, pl::Ref o_e) {
    pl::Value v = x[pl::all];
    o_sum[pl::all] = jnp::sum(v * 2.0f, 1);
    o_t[pl::all] = v.T();
    o_e[pl::all] = jnp::exp(v) - jnp::max(v, 0)(pl::None, pl::slice());
  };
  check_kernel(kernel, {ShapeDtype({1024}, f32), ShapeDtype({160, 1024}, f32), ShapeDtype(shape, f32)},
               {.grid = {2},
                .in_specs = {pl::BlockSpec({512, 160}, [](pl::Index i) { return pl::idx(i, 0); })},
                .out_specs = {pl::BlockSpec({512}, [](pl::Index i) { return pl::idx(i); }),
                              pl::BlockSpec({160, 512}, [](pl::Index i) { return pl::idx(0, i); }),
                              pl::BlockSpec({512, 160}, [](pl::Index i) { return pl::idx(i, 0); })}},
               {normal(4, shape)});
}

TEST(CudaLayout, MmaRowsReduceAndBroadcast) {
  PL_REQUIRE_NVRTC();
  // A dot result in mma layout, reduced along rows (quad shuffles) and broadcast back, as the
  // attention softmax does; also a column reduction (general path) of the same tile.
  for (int warps : {4, 8}) {
    auto kernel = [](pl::Ref a, pl::Ref b, pl::Ref o_soft, pl::Ref o_arg, pl::Ref o_col) {
      pl::Value s = pl::dot(a[pl::all], b[pl::all]);  // [128, 64]
      pl::Value m = s.max(1);
      pl::Value e = jnp::exp(s - m(pl::slice(), pl::None));
      o_soft[pl::all] = e / jnp::sum(e, 1)(pl::slice(), pl::None);
      o_arg[pl::all] = jnp::argmax(s, 1);
      o_col[pl::all] = jnp::sum(s, 0);
    };
    check_kernel(kernel, {ShapeDtype({128, 64}, f32), ShapeDtype({128}, i32), ShapeDtype({64}, f32)},
                 {.name = "softmax_rows", .compiler_params = {.num_warps = warps}},
                 {normal(5, {128, 32}, bf16), normal(6, {32, 64}, bf16)}, 1e-5);
  }
}

}  // namespace
}  // namespace palladium::cudatest
