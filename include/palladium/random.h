// Counter-based random numbers with explicit keys (Threefry-2x32, as JAX): the same key gives the
// same numbers on every machine, and split keys give independent streams.
#pragma once
#include <cstdint>
#include <vector>

#include "palladium/array.h"

namespace palladium::random {

struct Key {
  uint32_t k0 = 0, k1 = 0;
  bool operator==(const Key&) const = default;
};

Key key(uint64_t seed);
std::vector<Key> split(Key key, int n = 2);
Key fold_in(Key key, uint32_t data);
// Uniform in [lo, hi) for float dtypes; for integer dtypes, integers in [lo, hi).
Array uniform(Key key, Shape shape, DType dtype = f32, double lo = 0.0, double hi = 1.0);
// Standard normal for float dtypes.
Array normal(Key key, Shape shape, DType dtype = f32);
// Raw 32-bit words: threefry2x32(key, counter) for counters 0..n-1.
std::vector<uint32_t> bits(Key key, int64_t n);

}  // namespace palladium::random
