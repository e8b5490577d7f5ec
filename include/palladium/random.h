// Counter-based random numbers with explicit keys (Threefry-2x32, as JAX): the same key gives the
// same numbers on every machine, and split keys give independent streams.
#pragma once
#include <array>
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
// Raw 32-bit words for counters 0..n-1: word i is the xor of the two output words of
// threefry2x32(key, i >> 32, i & 0xffffffff), JAX's "partitionable" layout.
std::vector<uint32_t> bits(Key key, int64_t n);

// The Threefry-2x32 block function itself (20 rounds): two counter words in, two words out.
std::array<uint32_t, 2> threefry2x32(Key key, uint32_t counter0, uint32_t counter1);

}  // namespace palladium::random
