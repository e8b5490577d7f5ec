// Bounds checks of checked runs (see src/backends/common/access_check.h): the failing access that
// the interpreter would report is recorded in a small device buffer the host reads after the kernel.
#pragma once

// rec[0]: 0 until a check fails; then rec[1..5] = site, kind, dimension, value, program; rec[6]
// is a lock. The record keeps the fault of the program first in grid order, as the interpreter
// (which runs the programs in that order and stops at the first fault) reports it; within one
// program the first recorded fault stays. Programs run concurrently, so the first fault in time
// may be a later program's. Only failing checks take the lock (independent thread scheduling
// keeps lanes of one warp that contend for it from deadlocking on sm_70 and later).
PL_DEVICE void pl_check_fail(unsigned long long* rec, int site, int kind, int dim, long long value, long long program) {
  volatile unsigned long long* r = rec;
  while (atomicCAS(rec + 6, 0ull, 1ull) != 0ull) {
  }
  __threadfence();
  if (r[0] == 0ull || (long long)r[5] > program) {
    r[1] = (unsigned long long)site;
    r[2] = (unsigned long long)kind;
    r[3] = (unsigned long long)dim;
    r[4] = (unsigned long long)value;
    r[5] = (unsigned long long)program;
    r[0] = 1ull;
  }
  __threadfence();
  atomicExch(rec + 6, 0ull);
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
