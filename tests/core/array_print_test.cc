// Array::str() must print exactly as NumPy's str() and Array::repr() exactly as JAX's repr. The
// expected strings were produced by NumPy 2.4 (and ml_dtypes for bfloat16) from the same arrays,
// with JAX's Array.__repr__ logic applied to np.array2string for the repr.
#include <gtest/gtest.h>

#include <cmath>

#include "palladium/array.h"

namespace palladium {
namespace {

struct PrintCase {
  const char* what;
  Array array;
  const char* numpy_str;
  const char* jax_repr;
};

std::vector<PrintCase> print_cases() {
  return {
      {"int32 arange", arange(8), "[0 1 2 3 4 5 6 7]", "Array([0, 1, 2, 3, 4, 5, 6, 7], dtype=int32)"},
      {"right-aligned ints", arange(0, 16, 2), "[ 0  2  4  6  8 10 12 14]",
       "Array([ 0,  2,  4,  6,  8, 10, 12, 14], dtype=int32)"},
      {"floats trim zeros", array({0.0, 1.5, 2.0}), "[0.  1.5 2. ]", "Array([0. , 1.5, 2. ], dtype=float32)"},
      {"bool", array({1, 0}, bool_), "[ True False]", "Array([ True, False], dtype=bool)"},
      {"matrix", arange(12, f32).reshape({3, 4}),
       R"([[ 0.  1.  2.  3.]
 [ 4.  5.  6.  7.]
 [ 8.  9. 10. 11.]])",
       R"(Array([[ 0.,  1.,  2.,  3.],
       [ 4.,  5.,  6.,  7.],
       [ 8.,  9., 10., 11.]], dtype=float32))"},
      {"rank 3", arange(24).reshape({2, 3, 4}),
       R"([[[ 0  1  2  3]
  [ 4  5  6  7]
  [ 8  9 10 11]]

 [[12 13 14 15]
  [16 17 18 19]
  [20 21 22 23]]])",
       R"(Array([[[ 0,  1,  2,  3],
        [ 4,  5,  6,  7],
        [ 8,  9, 10, 11]],

       [[12, 13, 14, 15],
        [16, 17, 18, 19],
        [20, 21, 22, 23]]], dtype=int32))"},
      {"summarised vector", arange(2000), "[   0    1    2 ... 1997 1998 1999]",
       "Array([   0,    1,    2, ..., 1997, 1998, 1999], dtype=int32)"},
      {"summarised matrix", arange(2000, f32).reshape({40, 50}),
       R"([[0.000e+00 1.000e+00 2.000e+00 ... 4.700e+01 4.800e+01 4.900e+01]
 [5.000e+01 5.100e+01 5.200e+01 ... 9.700e+01 9.800e+01 9.900e+01]
 [1.000e+02 1.010e+02 1.020e+02 ... 1.470e+02 1.480e+02 1.490e+02]
 ...
 [1.850e+03 1.851e+03 1.852e+03 ... 1.897e+03 1.898e+03 1.899e+03]
 [1.900e+03 1.901e+03 1.902e+03 ... 1.947e+03 1.948e+03 1.949e+03]
 [1.950e+03 1.951e+03 1.952e+03 ... 1.997e+03 1.998e+03 1.999e+03]])",
       R"(Array([[0.000e+00, 1.000e+00, 2.000e+00, ..., 4.700e+01, 4.800e+01,
        4.900e+01],
       [5.000e+01, 5.100e+01, 5.200e+01, ..., 9.700e+01, 9.800e+01,
        9.900e+01],
       [1.000e+02, 1.010e+02, 1.020e+02, ..., 1.470e+02, 1.480e+02,
        1.490e+02],
       ...,
       [1.850e+03, 1.851e+03, 1.852e+03, ..., 1.897e+03, 1.898e+03,
        1.899e+03],
       [1.900e+03, 1.901e+03, 1.902e+03, ..., 1.947e+03, 1.948e+03,
        1.949e+03],
       [1.950e+03, 1.951e+03, 1.952e+03, ..., 1.997e+03, 1.998e+03,
        1.999e+03]], dtype=float32))"},
      {"scientific", array({1e-5, 1.0, 1e5}), "[1.e-05 1.e+00 1.e+05]",
       "Array([1.e-05, 1.e+00, 1.e+05], dtype=float32)"},
      {"non-finite", array({NAN, 1.0, -INFINITY}), "[ nan   1. -inf]", "Array([ nan,   1., -inf], dtype=float32)"},
      {"8 decimals", array({1.0 / 3, 2.0 / 3}, f64), "[0.33333333 0.66666667]",
       "Array([0.33333333, 0.66666667], dtype=float64)"},
      {"wrapped rows", linspace(0, 1, 30),
       R"([0.         0.03448276 0.06896552 0.10344828 0.13793103 0.1724138
 0.20689656 0.2413793  0.27586207 0.31034482 0.3448276  0.37931034
 0.41379312 0.44827586 0.4827586  0.51724136 0.55172414 0.5862069
 0.62068963 0.6551724  0.6896552  0.7241379  0.7586207  0.79310346
 0.82758623 0.86206895 0.8965517  0.9310345  0.9655172  1.        ])",
       // JAX's quirk: a dtype that does not fit on the last line is preceded by len("Array(") spaces.
       R"(Array([0.        , 0.03448276, 0.06896552, 0.10344828, 0.13793103,
       0.1724138 , 0.20689656, 0.2413793 , 0.27586207, 0.31034482,
       0.3448276 , 0.37931034, 0.41379312, 0.44827586, 0.4827586 ,
       0.51724136, 0.55172414, 0.5862069 , 0.62068963, 0.6551724 ,
       0.6896552 , 0.7241379 , 0.7586207 , 0.79310346, 0.82758623,
       0.86206895, 0.8965517 , 0.9310345 , 0.9655172 , 1.        ],      dtype=float32))"},
      {"float16 shortest digits", array({0.1, 65504.0, 6e-8, -2.5}, f16), "[ 1.00e-01  6.55e+04  5.96e-08 -2.50e+00]",
       "Array([ 1.00e-01,  6.55e+04,  5.96e-08, -2.50e+00], dtype=float16)"},
      {"bfloat16 as ml_dtypes", array({0.1, 1.0, 3e10, -0.5}, bf16), "[0.100098 1 3.00648e+10 -0.5]",
       "Array([0.100098, 1, 3.00648e+10, -0.5], dtype=bfloat16)"},
      {"negative zero", array({-0.0, 1.0}), "[-0.  1.]", "Array([-0.,  1.], dtype=float32)"},
      {"float32 scalar", full({}, 1.0), "1.0", "Array(1., dtype=float32)"},
      {"float64 small scalar", full({}, 1e-5, f64), "1e-05", "Array(1.e-05, dtype=float64)"},
      {"int scalar", full({}, 5, i32), "5", "Array(5, dtype=int32)"},
      {"bool scalar", full({}, 1, bool_), "True", "Array(True, dtype=bool)"},
      {"empty", zeros({0, 3}), "[]", "Array([], shape=(0, 3), dtype=float32)"},
      {"int8 extremes", array({-128, 127, 0}, i8), "[-128  127    0]", "Array([-128,  127,    0], dtype=int8)"},
      {"large float64", array({123456789.0, 0.5}, f64), "[1.23456789e+08 5.00000000e-01]",
       "Array([1.23456789e+08, 5.00000000e-01], dtype=float64)"},
  };
}

TEST(ArrayPrint, MatchesNumPyStr) {
  for (const PrintCase& c : print_cases()) EXPECT_EQ(c.array.str(), c.numpy_str) << c.what;
}

TEST(ArrayPrint, MatchesJaxRepr) {
  for (const PrintCase& c : print_cases()) EXPECT_EQ(c.array.repr(), c.jax_repr) << c.what;
}

TEST(ArrayPrint, ScalarStrSwitchesToScientificPerType) {
  // str(np.float32(1e6)) == '1e+06' but str(np.float64(1e6)) == '1000000.0'; float16 switches at 1e3.
  EXPECT_EQ(full({}, 1e6, f32).str(), "1e+06");
  EXPECT_EQ(full({}, 1e6, f64).str(), "1000000.0");
  EXPECT_EQ(full({}, 1000, f16).str(), "1e+03");
  EXPECT_EQ(full({}, 999, f16).str(), "999.0");
  EXPECT_EQ(full({}, 1e-4, f32).str(), "1e-04");  // float32(1e-4) is just below 1e-4
  EXPECT_EQ(full({}, 0.1, f16).str(), "0.1");
  EXPECT_EQ(full({}, -0.0, f64).str(), "-0.0");
  EXPECT_EQ(full({}, -INFINITY, f32).str(), "-inf");
  EXPECT_EQ(full({}, 0.1, bf16).str(), "0.100098");
}

TEST(ArrayPrint, HalfTiesRoundToEvenDigit) {
  // 247.75 is exactly between the shortest candidates 247.7 and 247.8; NumPy prints 247.8.
  EXPECT_EQ(array({247.75, 2.75}, f16).str(), "[247.8    2.75]");
}

TEST(ArrayPrint, ScientificPadsWithExactDigits) {
  // Past its own shortest digits, each value shows its exact digits, not zeros (NumPy min_digits).
  // float32 621807232 alone is "6.218072e+08"; beside a value needing 7 decimals it shows 7.
  EXPECT_EQ(array({621807232.0, 0.0012345678}).str(), "[6.2180723e+08 1.2345678e-03]");
}

}  // namespace
}  // namespace palladium
