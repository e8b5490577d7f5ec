// Bounds checks of checked runs (see src/backends/common/access_check.h): the first failing
// access of the launch is recorded in a small device buffer that the host reads after the kernel.
#pragma once

// rec[0]: 0 until a check fails; then rec[1..5] = site, kind, dimension, value, program.
PL_DEVICE void pl_check_fail(unsigned long long* rec, int site, int kind, int dim, long long value, long long program) {
  if (atomicCAS(rec, 0ull, 1ull) == 0ull) {
    rec[1] = (unsigned long long)site;
    rec[2] = (unsigned long long)kind;
    rec[3] = (unsigned long long)dim;
    rec[4] = (unsigned long long)value;
    rec[5] = (unsigned long long)program;
    __threadfence();
  }
}

// As pl_cpu::selection_in_bounds: the first active element of the selection (row-major) outside
// `extent`, or true when there is none.
PL_DEVICE bool pl_selection_in_bounds(int rank, const long long* start, const long long* size, const long long* stride,
                                      const long long* extent, const bool* mask, int* bad_dim, long long* bad_index) {
  bool inside = true;
  for (int d = 0; d < rank; ++d) {
    const long long last = start[d] + (size[d] - 1) * stride[d];
    inside = inside && start[d] >= 0 && start[d] < extent[d] && last >= 0 && last < extent[d];
  }
  if (inside) return true;
  long long total = 1;
  for (int d = 0; d < rank; ++d) total *= size[d];
  for (long long e = 0; e < total; ++e) {
    if (mask && !mask[e]) continue;
    long long later = total;
    for (int d = 0; d < rank; ++d) {
      later /= size[d];
      const long long local = start[d] + (e / later) % size[d] * stride[d];
      if (local < 0 || local >= extent[d]) {
        *bad_dim = d;
        *bad_index = local;
        return false;
      }
    }
  }
  return true;
}
