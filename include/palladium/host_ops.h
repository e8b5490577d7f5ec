// A small set of program-level array operations on host Arrays, enough for references and glue.
// They compute in float64 and round to the result dtype.
#pragma once
#include "palladium/array.h"

namespace palladium {

Array add(const Array& a, const Array& b);        // NumPy broadcasting, result dtype of a
Array subtract(const Array& a, const Array& b);
Array multiply(const Array& a, const Array& b);
Array maximum(const Array& a, const Array& b);
Array relu(const Array& a);
Array matmul(const Array& a, const Array& b);     // (..., m, k) x (..., k, n), float64 accumulation
Array transpose(const Array& a, std::vector<int64_t> perm = {});  // default reverses the axes
Array stack(const std::vector<Array>& parts, int64_t axis = 0);
Array take(const Array& a, int64_t index, int64_t axis = 0);      // one slice along an axis

// ||a - ref|| / ||ref|| in float64 over all elements (0 when both are zero).
double rel_error(const Array& a, const Array& ref);
double max_abs_diff(const Array& a, const Array& b);
bool array_equal(const Array& a, const Array& b);                 // same shape and values

}  // namespace palladium
