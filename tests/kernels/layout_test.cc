// Layout and whole-tile ops: broadcasting (x[:, None]), reshape, transpose, broadcast_to, iota,
// constants, reductions along every axis, cumsum and dot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernel_test_util.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using LayoutTest = KernelTest;

// NumPy broadcasting, including new axes inserted by indexing a Value with pl::None.
TEST_P(LayoutTest, BroadcastingAndNewAxes) {
  Rng rng;
  Array x = rng.normal({8}), y = rng.normal({16}), z = rng.normal({4, 1, 6}), w = rng.normal({3, 1});
  auto outs = run_kernel(
      [](Ref x_ref, Ref y_ref, Ref z_ref, Ref w_ref, Ref outer, Ref outer2, Ref rank3, Ref expanded) {
        Value xv = x_ref[pl::all], yv = y_ref[pl::all];
        outer[pl::all] = xv(pl::slice(), pl::None) * yv(pl::None, pl::slice());  // x[:, None] * y[None, :]
        outer2[pl::all] = xv(pl::all, pl::None) - yv;                            // x[..., None] - y
        rank3[pl::all] = z_ref[pl::all] + w_ref[pl::all];                        // (4,1,6) + (3,1) -> (4,3,6)
        expanded[pl::all] = jnp::expand_dims(xv, 0) + jnp::expand_dims(xv, -1); // (1,8) + (8,1)
      },
      {ShapeDtype({8, 16}, f32), ShapeDtype({8, 16}, f32), ShapeDtype({4, 3, 6}, f32), ShapeDtype({8, 8}, f32)},
      {.name = "broadcasting"}, {x, y, z, w});
  EXPECT_TRUE(matches(outs[0], ref_f64({8, 16}, [&](int64_t i) { return x.get(i / 16) * y.get(i % 16); }), f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({8, 16}, [&](int64_t i) { return x.get(i / 16) - y.get(i % 16); }), f32));
  EXPECT_TRUE(matches(outs[2], ref_f64({4, 3, 6}, [&](int64_t i) {
    auto k = unravel(i, {4, 3, 6});
    return z.get(k[0] * 6 + k[2]) + w.get(k[1]);
  }), f32));
  EXPECT_TRUE(matches(outs[3], ref_f64({8, 8}, [&](int64_t i) { return x.get(i % 8) + x.get(i / 8); }), f32));
}

// reshape (with -1), .T(), transpose with a permutation, and jnp.transpose's default.
TEST_P(LayoutTest, ReshapeAndTranspose) {
  Rng rng;
  Array x = rng.any({4, 6}, i32), t3 = rng.normal({2, 3, 4});
  auto outs = run_kernel(
      [](Ref x_ref, Ref t_ref, Ref r1, Ref r2, Ref r3, Ref tr, Ref p3, Ref rev3) {
        Value v = x_ref[pl::all];
        r1[pl::all] = v.reshape({2, 12});
        r2[pl::all] = jnp::reshape(v, {-1, 3});
        r3[pl::all] = v.reshape({24});
        tr[pl::all] = v.T();
        p3[pl::all] = Value(t_ref[pl::all]).transpose({2, 0, 1});
        rev3[pl::all] = jnp::transpose(t_ref[pl::all]);
      },
      {ShapeDtype({2, 12}, i32), ShapeDtype({8, 3}, i32), ShapeDtype({24}, i32), ShapeDtype({6, 4}, i32),
       ShapeDtype({4, 2, 3}, f32), ShapeDtype({4, 3, 2}, f32)},
      {.name = "reshape_transpose"}, {x, t3});
  auto same = [&](int64_t i) { return x.get_int(i); };
  EXPECT_TRUE(matches(outs[0], ref_int({2, 12}, i32, same), i32));
  EXPECT_TRUE(matches(outs[1], ref_int({8, 3}, i32, same), i32));
  EXPECT_TRUE(matches(outs[2], ref_int({24}, i32, same), i32));
  EXPECT_TRUE(matches(outs[3], ref_int({6, 4}, i32, [&](int64_t i) { return x.get_int((i % 4) * 6 + i / 4); }), i32));
  EXPECT_TRUE(matches(outs[4], ref_f64({4, 2, 3}, [&](int64_t i) {
    auto k = unravel(i, {4, 2, 3});  // result (c, a, b) = t[a, b, c]
    return t3.get(ravel({k[1], k[2], k[0]}, {2, 3, 4}));
  }), f32));
  EXPECT_TRUE(matches(outs[5], ref_f64({4, 3, 2}, [&](int64_t i) {
    auto k = unravel(i, {4, 3, 2});
    return t3.get(ravel({k[2], k[1], k[0]}, {2, 3, 4}));
  }), f32));
}

TEST_P(LayoutTest, BroadcastTo) {
  Rng rng;
  Array row = rng.normal({1, 8}), col = rng.any({8, 1}, i16), s = rng.normal({1}, bf16);
  auto outs = run_kernel(
      [](Ref row_ref, Ref col_ref, Ref s_ref, Ref o1, Ref o2, Ref o3, Ref o4) {
        o1[pl::all] = Value(row_ref[pl::all]).broadcast_to({4, 8});
        o2[pl::all] = jnp::broadcast_to(col_ref[pl::all], {8, 5});
        o3[pl::all] = Value(s_ref[0]).broadcast_to({3, 4});  // a loaded scalar
        o4[pl::all] = Value(7).broadcast_to({2, 3});     // a weak literal
      },
      {ShapeDtype({4, 8}, f32), ShapeDtype({8, 5}, i16), ShapeDtype({3, 4}, bf16), ShapeDtype({2, 3}, i32)},
      {.name = "broadcast_to"}, {row, col, s});
  EXPECT_TRUE(matches(outs[0], ref_f64({4, 8}, [&](int64_t i) { return row.get(i % 8); }), f32));
  EXPECT_TRUE(matches(outs[1], ref_int({8, 5}, i16, [&](int64_t i) { return col.get_int(i / 5); }), i16));
  EXPECT_TRUE(matches(outs[2], ref_f64({3, 4}, [&](int64_t) { return s.get(0); }), bf16));
  EXPECT_TRUE(matches(outs[3], ref_int({2, 3}, i32, [](int64_t) { return 7; }), i32));
}

// iota / arange count along one dimension, in integer and float dtypes.
TEST_P(LayoutTest, IotaAndArange) {
  Rng rng;
  Array x = rng.any({16}, i32);  // offsets the counts, so that nothing is all zeros by accident
  auto outs = run_kernel(
      [](Ref x_ref, Ref a, Ref af, Ref i0, Ref i1, Ref i3, Ref iu) {
        a[pl::all] = jnp::arange(16) + x_ref[pl::all];
        af[pl::all] = jnp::arange(16, f32) * 0.5;
        i0[pl::all] = jnp::iota(i32, {4, 8}, 0);
        i1[pl::all] = jnp::iota(f32, {4, 8}, 1);
        i3[pl::all] = jnp::iota(i16, {2, 3, 4}, 1);
        iu[pl::all] = jnp::iota(u8, {300}, 0);  // counts past 255 wrap
      },
      {ShapeDtype({16}, i32), ShapeDtype({16}, f32), ShapeDtype({4, 8}, i32), ShapeDtype({4, 8}, f32),
       ShapeDtype({2, 3, 4}, i16), ShapeDtype({300}, u8)},
      {.name = "iota"}, {x});
  EXPECT_TRUE(matches(outs[0], ref_int({16}, i32, [&](int64_t i) { return i + x.get_int(i); }), i32));
  EXPECT_TRUE(matches(outs[1], ref_f64({16}, [](int64_t i) { return 0.5 * static_cast<double>(i); }), f32));
  EXPECT_TRUE(matches(outs[2], ref_int({4, 8}, i32, [](int64_t i) { return i / 8; }), i32));
  EXPECT_TRUE(matches(outs[3], ref_f64({4, 8}, [](int64_t i) { return static_cast<double>(i % 8); }), f32));
  EXPECT_TRUE(matches(outs[4], ref_int({2, 3, 4}, i16, [](int64_t i) { return (i / 4) % 3; }), i16));
  EXPECT_TRUE(matches(outs[5], ref_int({300}, u8, [](int64_t i) { return i; }), u8));
}

// zeros / ones / full in several dtypes (values rounded to the dtype).
TEST_P(LayoutTest, ZerosOnesFull) {
  Rng rng;
  Array x = rng.normal({4, 8});
  auto outs = run_kernel(
      [](Ref x_ref, Ref z, Ref o, Ref fb, Ref fbool, Ref fs, Ref fu) {
        z[pl::all] = jnp::zeros({4, 8}) + x_ref[pl::all];
        o[pl::all] = jnp::ones({4, 8}, i32) * 3;
        fb[pl::all] = jnp::full({4, 8}, 0.3, bf16);
        fbool[pl::all] = jnp::full({5}, 1, bool_);
        fs[pl::all] = jnp::full({}, -7, i64);
        fu[pl::all] = jnp::full({3}, 4000000000.0, u32);
      },
      {ShapeDtype({4, 8}, f32), ShapeDtype({4, 8}, i32), ShapeDtype({4, 8}, bf16), ShapeDtype({5}, bool_),
       ShapeDtype({}, i64), ShapeDtype({3}, u32)},
      {.name = "constants"}, {x});
  EXPECT_TRUE(matches(outs[0], ref_f64({4, 8}, [&](int64_t i) { return x.get(i); }), f32));
  EXPECT_TRUE(matches(outs[1], ref_int({4, 8}, i32, [](int64_t) { return 3; }), i32));
  EXPECT_TRUE(exactly_equal(outs[2], full({4, 8}, 0.3, bf16)));  // 0.30078125 after rounding
  EXPECT_TRUE(matches(outs[3], ref_int({5}, bool_, [](int64_t) { return 1; }), bool_));
  EXPECT_TRUE(matches(outs[4], ref_int({}, i64, [](int64_t) { return -7; }), i64));
  EXPECT_TRUE(matches(outs[5], ref_int({3}, u32, [](int64_t) { return 4000000000; }), u32));
}

// sum / max / min / argmax / argmin along every axis of a rank-3 tile (and a negative axis), one
// kernel per dtype. Integers come from a small range, so argmax/argmin meet ties: the first index
// wins.
TEST_P(LayoutTest, ReductionsAlongEachAxis) {
  Rng rng;
  const Shape s{3, 4, 5};
  const std::vector<int64_t> axes{0, 1, 2, -1};
  for (DType t : {f32, f64, bf16, f16, i32, i8, u8, i64}) {
    Array x = is_float(t) ? rng.normal(s, t) : rng.values(s, t, -3, 4);
    std::vector<ShapeDtype> outs;
    for (int64_t axis : axes) {
      Shape rs = s;
      rs.erase(rs.begin() + (axis < 0 ? axis + 3 : axis));
      for (DType rt : {t, t, t, i32, i32}) outs.emplace_back(rs, rt);
    }
    auto got = run_kernel(
        [axes](Refs r) {
          Value v = r[0][pl::all];
          for (size_t k = 0; k < axes.size(); ++k) {
            const int64_t axis = axes[k];
            r[1 + 5 * k][pl::all] = v.sum(axis);
            r[2 + 5 * k][pl::all] = jnp::max(v, axis);
            r[3 + 5 * k][pl::all] = v.min(axis);
            r[4 + 5 * k][pl::all] = jnp::argmax(v, axis);
            r[5 + 5 * k][pl::all] = v.argmin(axis);
          }
        },
        outs, {.name = std::string("reduce_") + dtype_name(t)}, {x});
    for (size_t k = 0; k < axes.size(); ++k) {
      const int64_t axis = axes[k];
      SCOPED_TRACE(std::string(dtype_name(t)) + " axis " + std::to_string(axis));
      const size_t a = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
      const Shape& rs = outs[5 * k].shape;
      // The reference walks each reduced line.
      auto line = [&](int64_t r, int64_t j) {
        std::vector<int64_t> idx = unravel(r, rs);
        idx.insert(idx.begin() + static_cast<std::ptrdiff_t>(a), j);
        return ravel(idx, s);
      };
      const int64_t len = s[a];
      auto fold = [&](int64_t r, bool want_max) {
        int64_t best = 0;
        for (int64_t j = 1; j < len; ++j) {
          const double v = x.get(line(r, j)), b = x.get(line(r, best));
          if (want_max ? v > b : v < b) best = j;
        }
        return best;
      };
      Array sum_ref = ref_f64(rs, [&](int64_t r) {
        double acc = 0;
        for (int64_t j = 0; j < len; ++j) acc += x.get(line(r, j));
        return acc;
      });
      // A sum of 3..5 terms: in 16-bit floats the interpreter rounds once per reduction, other
      // backends may round per step: a few roundings of the dtype.
      EXPECT_TRUE(matches(got[5 * k], sum_ref, t, is_float(t) ? 4 * tol_for(t) : 0));
      EXPECT_TRUE(matches(got[5 * k + 1], ref_f64(rs, [&](int64_t r) { return x.get(line(r, fold(r, true))); }), t));
      EXPECT_TRUE(matches(got[5 * k + 2], ref_f64(rs, [&](int64_t r) { return x.get(line(r, fold(r, false))); }), t));
      EXPECT_TRUE(matches(got[5 * k + 3], ref_int(rs, i32, [&](int64_t r) { return fold(r, true); }), i32));
      EXPECT_TRUE(matches(got[5 * k + 4], ref_int(rs, i32, [&](int64_t r) { return fold(r, false); }), i32));
    }
  }
}

// Without an axis a reduction covers every axis (jnp.sum(x)); argmax/argmin then give the flat
// index. A Ref proxy reduces directly (x_ref[...].sum()).
TEST_P(LayoutTest, ReduceAllAxes) {
  Rng rng;
  Array x = rng.normal({6, 10}), n = rng.values({3, 4, 2}, i32, -20, 20);
  auto outs = run_kernel(
      [](Ref x_ref, Ref n_ref, Ref s, Ref m, Ref mn, Ref am, Ref isum, Ref iamin) {
        s[pl::all] = x_ref[pl::all].sum();
        m[pl::all] = x_ref[pl::all].max();
        mn[pl::all] = jnp::min(x_ref[pl::all]);
        am[pl::all] = jnp::argmax(x_ref[pl::all]);
        isum[pl::all] = jnp::sum(n_ref[pl::all]);
        iamin[pl::all] = Value(n_ref[pl::all]).argmin();
      },
      {ShapeDtype({}, f32), ShapeDtype({}, f32), ShapeDtype({}, f32), ShapeDtype({}, i32), ShapeDtype({}, i32),
       ShapeDtype({}, i32)},
      {.name = "reduce_all"}, {x, n});
  double s = 0, m = -INFINITY, mn = INFINITY;
  int64_t am = 0, isum = 0, iamin = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    s += x.get(i), mn = std::min(mn, x.get(i));
    if (x.get(i) > m) m = x.get(i), am = i;
  }
  for (int64_t i = 0; i < n.size(); ++i) {
    isum += n.get_int(i);
    if (n.get_int(i) < n.get_int(iamin)) iamin = i;
  }
  EXPECT_TRUE(matches(outs[0], ref_f64({}, [&](int64_t) { return s; }), f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({}, [&](int64_t) { return m; }), f32));
  EXPECT_TRUE(matches(outs[2], ref_f64({}, [&](int64_t) { return mn; }), f32));
  EXPECT_TRUE(matches(outs[3], ref_int({}, i32, [&](int64_t) { return am; }), i32));
  EXPECT_TRUE(matches(outs[4], ref_int({}, i32, [&](int64_t) { return isum; }), i32));
  EXPECT_TRUE(matches(outs[5], ref_int({}, i32, [&](int64_t) { return iamin; }), i32));
}

// Inclusive prefix sums along each axis, one kernel per dtype.
TEST_P(LayoutTest, CumsumAlongEachAxis) {
  Rng rng;
  const Shape s{3, 4, 5};
  const std::vector<int64_t> axes{0, 1, 2, -1};
  for (DType t : {f32, i32, f64}) {
    Array x = is_float(t) ? rng.normal(s, t) : rng.values(s, t, -50, 50);
    auto got = run_kernel(
        [axes](Refs r) {
          for (size_t k = 0; k < axes.size(); ++k) r[1 + k][pl::all] = jnp::cumsum(r[0][pl::all], axes[k]);
        },
        std::vector<ShapeDtype>(axes.size(), ShapeDtype(s, t)), {.name = std::string("cumsum_") + dtype_name(t)}, {x});
    for (size_t k = 0; k < axes.size(); ++k) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " axis " + std::to_string(axes[k]));
      const size_t a = static_cast<size_t>(axes[k] < 0 ? axes[k] + 3 : axes[k]);
      Array ref = ref_f64(s, [&](int64_t i) {
        std::vector<int64_t> idx = unravel(i, s);
        double acc = 0;
        const int64_t upto = idx[a];
        for (int64_t j = 0; j <= upto; ++j) {
          idx[a] = j;
          acc += x.get(ravel(idx, s));
        }
        return acc;
      });
      EXPECT_TRUE(matches(got[k], ref, t));
    }
  }
}

// dot(a, b, trans_a, trans_b): float32 accumulation (and result) for 16/32-bit floats, int32 for
// 8-bit integers, float64 for float64. k = 64 with full-range int8 overflows int16 but not int32.
// Tolerances: the result is float32 for 16-bit inputs, whose products are exact in float32.
TEST_P(LayoutTest, DotTransposes) {
  Rng rng;
  const int64_t m = 16, k = 64, n = 8;
  struct Case {
    DType in, out;
  };
  const std::vector<std::pair<bool, bool>> trans{{false, false}, {true, false}, {false, true}, {true, true}};
  for (Case c : {Case{f32, f32}, Case{bf16, f32}, Case{f16, f32}, Case{i8, i32}, Case{u8, i32}, Case{f64, f64}}) {
    std::vector<Array> ins;  // one kernel per dtype: (a, b) for each transposition
    for (auto [ta, tb] : trans) {
      ins.push_back(rng.any(ta ? Shape{k, m} : Shape{m, k}, c.in));  // full-range u8: 64 * 255 * 255 fits int32
      ins.push_back(rng.any(tb ? Shape{n, k} : Shape{k, n}, c.in));
    }
    auto got = run_kernel(
        [trans](Refs r) {
          for (size_t q = 0; q < trans.size(); ++q)
            r[2 * trans.size() + q][pl::all] =
                pl::dot(r[2 * q][pl::all], r[2 * q + 1][pl::all], trans[q].first, trans[q].second);
        },
        std::vector<ShapeDtype>(trans.size(), ShapeDtype({m, n}, c.out)), {.name = std::string("dot_") + dtype_name(c.in)},
        ins);
    for (size_t q = 0; q < trans.size(); ++q) {
      const bool ta = trans[q].first, tb = trans[q].second;
      const Array &a = ins[2 * q], &b = ins[2 * q + 1];
      SCOPED_TRACE(std::string(dtype_name(c.in)) + (ta ? " trans_a" : "") + (tb ? " trans_b" : ""));
      Array ref = ref_f64({m, n}, [&](int64_t i) {
        const int64_t r = i / n, col = i % n;
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += a.get(ta ? p * m + r : r * k + p) * b.get(tb ? col * k + p : p * n + col);
        return acc;
      });
      EXPECT_TRUE(matches(got[q], ref, c.out));
    }
  }
}

// jnp.dot / jnp.matmul (a @ b), and a dot chained with elementwise ops and a transpose.
TEST_P(LayoutTest, JnpDotAndMatmul) {
  Rng rng;
  Array a = rng.normal({8, 16}), b = rng.normal({16, 4}), c = rng.normal({4, 8});
  auto outs = run_kernel(
      [](Ref a_ref, Ref b_ref, Ref c_ref, Ref o1, Ref o2) {
        o1[pl::all] = jnp::dot(a_ref[pl::all], b_ref[pl::all]);
        o2[pl::all] = jnp::matmul(a_ref[pl::all], b_ref[pl::all]).T() + c_ref[pl::all];
      },
      {ShapeDtype({8, 4}, f32), ShapeDtype({4, 8}, f32)}, {.name = "jnp_dot"}, {a, b, c});
  auto ab = [&](int64_t r, int64_t col) {
    double acc = 0;
    for (int64_t p = 0; p < 16; ++p) acc += a.get(r * 16 + p) * b.get(p * 4 + col);
    return acc;
  };
  EXPECT_TRUE(matches(outs[0], ref_f64({8, 4}, [&](int64_t i) { return ab(i / 4, i % 4); }), f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({4, 8}, [&](int64_t i) { return ab(i % 8, i / 8) + c.get(i); }), f32));
}

PL_INSTANTIATE_BACKENDS(LayoutTest);

}  // namespace
}  // namespace palladium::ktest
