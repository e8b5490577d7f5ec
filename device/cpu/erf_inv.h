// erf_inv, shared by the interpreter (its definition) and the cpu backend's generated code: an
// initial guess from M. Giles's single-precision approximation ("Approximating the erfinv
// function", GPU Computing Gems, 2011), refined by Newton steps on erf in double.
#pragma once

namespace pl_cpu {

inline double erf_inv(double y) {
  if (!(y > -1.0 && y < 1.0)) return y == 1.0 ? __builtin_inf() : y == -1.0 ? -__builtin_inf() : __builtin_nan("");
  double w = -__builtin_log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = __builtin_sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * y;
  // erf'(x) = 2 / sqrt(pi) e^{-x^2}; the guess is within ~1e-6, so two steps reach double.
  for (int step = 0; step < 2; ++step) x -= (__builtin_erf(x) - y) / (1.1283791670955126 * __builtin_exp(-x * x));
  return x;
}

inline float erf_inv(float y) { return static_cast<float>(erf_inv(static_cast<double>(y))); }

}  // namespace pl_cpu
