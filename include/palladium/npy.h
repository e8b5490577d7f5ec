// NumPy .npy files (format 1.0/2.0, little-endian, C order) for exchanging data with NumPy and JAX.
// bfloat16 has no NumPy descriptor: it is written as "<V2" raw 16-bit words and read back as bfloat16.
#pragma once
#include <string>

#include "palladium/array.h"

namespace palladium {

void save_npy(const std::string& path, const Array& a);
Array load_npy(const std::string& path);

}  // namespace palladium
