// A shared library that tests/interop/numpy_dlpack.py loads with ctypes, so that NumPy and
// Palladium exchange DLPack tensors inside one process: Palladium makes Arrays for NumPy, and
// consumes NumPy's arrays (reporting what it saw).
#include <cstdint>

#include "palladium/dlpack.h"
#include "palladium/palladium.h"

namespace pl = palladium;

extern "C" {

// An Array of `n` values 0.5 * i (as float32 when code 0, float64 1, int32 2, bfloat16 3, bool 4).
DLManagedTensor* probe_make(int64_t n, int code) {
  const pl::DType types[] = {pl::f32, pl::DType::float64, pl::i32, pl::DType::bfloat16, pl::DType::bool_};
  pl::Array a = (pl::arange(n, pl::DType::float64) * 0.5).astype(types[code]);
  return pl::to_dlpack(a);
}

// Takes a tensor (ownership included) and returns the float64 sum of its elements times
// (1 + flat index), which depends on order, shape and values; -1 on an error.
double probe_consume(DLManagedTensor* t) {
  try {
    pl::Array a = pl::from_dlpack(t);
    double s = 0;
    for (int64_t i = 0; i < a.size(); ++i) s += a.get(i) * static_cast<double>(1 + i);
    return s;
  } catch (const std::exception&) {
    return -1;
  }
}

}  // extern "C"
