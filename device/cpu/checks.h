// Bounds checks of checked runs: which element of a selection (starts, sizes and strides per ref
// dimension, an optional mask over the selection) first falls outside the ref, in the order the
// interpreter visits elements (row-major over the selection), so both report the same element.
#pragma once
#include <stdint.h>

namespace pl_cpu {

// True when every active element lies inside `extent`; else the first bad (dimension, index).
inline bool selection_in_bounds(int rank, const int64_t* start, const int64_t* size, const int64_t* stride,
                                const int64_t* extent, const bool* mask, int32_t* bad_dim, int64_t* bad_index) {
  bool inside = true;
  for (int d = 0; d < rank; ++d)
    inside = inside && start[d] >= 0 && start[d] + (size[d] - 1) * stride[d] < extent[d] &&
             start[d] + (size[d] - 1) * stride[d] >= 0 && start[d] < extent[d];
  if (inside) return true;
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) total *= size[d];
  for (int64_t e = 0; e < total; ++e) {
    if (mask && !mask[e]) continue;
    // Element e's coordinate along d is (e / (product of the later sizes)) % size[d].
    int64_t later = total;
    for (int d = 0; d < rank; ++d) {
      later /= size[d];
      const int64_t local = start[d] + (e / later) % size[d] * stride[d];
      if (local < 0 || local >= extent[d]) {
        *bad_dim = d;
        *bad_index = local;
        return false;
      }
    }
  }
  return true;
}

}  // namespace pl_cpu
