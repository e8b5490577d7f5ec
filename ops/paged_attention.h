// Paged attention for decoding, as the Pallas ops ship it: one query token per sequence attends to
// its keys and values, which live in fixed-size pages of a shared pool; a page table per sequence
// names its pages and `lengths` how many tokens are real. Written in the kernel language with
// scalar prefetch (the page table and lengths steer the BlockSpecs), a sequential page axis and
// scratch for the online softmax.
#pragma once
#include <string>

#include "palladium/array.h"

namespace palladium::ops {

struct PagedAttentionOptions {
  double scale = 0;     // 0: 1 / sqrt(head_dim)
  // Pages one program handles per step (the largest divisor of pages_per_sequence up to this). 8
  // measured no faster than 1 on an H100 (1.606 vs 1.551 ms, bench paged) nor on the cpu.
  int64_t pages_per_step = 1;
  std::string backend;  // "" = the default backend
};

// q: (batch, heads, head_dim); k_pages, v_pages: (kv_heads, total_pages, page_size, head_dim) with
// heads a multiple of kv_heads (grouped queries); lengths: (batch,) int32, each in
// [1, pages_per_sequence * page_size]; page_indices: (batch, pages_per_sequence) int32 into the
// pool. Returns (batch, heads, head_dim) in q's dtype. Pages past a sequence's length are not read.
Array paged_attention(const Array& q, const Array& k_pages, const Array& v_pages, const Array& lengths,
                      const Array& page_indices, const PagedAttentionOptions& options = {});

// The same in float64 on the host (a test reference).
Array paged_attention_reference(const Array& q, const Array& k_pages, const Array& v_pages, const Array& lengths,
                                const Array& page_indices, double scale = 0);

}  // namespace palladium::ops
