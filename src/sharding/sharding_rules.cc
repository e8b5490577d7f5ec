// The sharding rule of every primitive, named in prims.def: the factors of an equation, i.e. which
// dimensions of its operands (value index < number of operands) and results (value index counted
// on from there) are one index space. Dimensions in no factor stay whole on every device.
#include <algorithm>

#include "program/families.h"
#include "sharding/sharding.h"

namespace palladium::sharding {

using program::Eqn;
using program::Prim;
using program::Program;

namespace {

using Factors = std::vector<Factor>;

int operands(const Eqn& e) { return static_cast<int>(e.ins.size()); }
const Shape& in_shape(const Eqn& e, const Program& p, size_t i) { return p.type(e.ins[i]).shape; }
const Shape& out_shape(const Eqn& e, const Program& p, size_t i) { return p.type(e.outs[i]).shape; }

// NumPy broadcasting: result dimension i and every operand dimension aligned to it from the right
// with the same size (an operand's size-1 dimension that broadcasts is not part of it).
Factors factors_elementwise(const Eqn& e, const Program& p) {
  const Shape& out = out_shape(e, p, 0);
  const int r = static_cast<int>(out.size());
  Factors fs;
  for (int i = 0; i < r; ++i) {
    Factor f;
    for (int k = 0; k < operands(e); ++k) {
      const Shape& s = in_shape(e, p, static_cast<size_t>(k));
      const int j = i - (r - static_cast<int>(s.size()));
      if (j >= 0 && s[static_cast<size_t>(j)] == out[static_cast<size_t>(i)]) f.dims.push_back({k, j});
    }
    f.dims.push_back({operands(e), i});
    fs.push_back(f);
  }
  return fs;
}

Factors factors_full(const Eqn& e, const Program& p) {
  Factors fs;
  for (int i = 0; i < static_cast<int>(out_shape(e, p, 0).size()); ++i) fs.push_back({{{0, i}}, false});
  return fs;
}

// Along its axis an iota's values depend on the position: that dimension stays whole.
Factors factors_iota(const Eqn& e, const Program& p) {
  Factors fs;
  for (int i = 0; i < static_cast<int>(out_shape(e, p, 0).size()); ++i)
    if (i != e.params.axis) fs.push_back({{{0, i}}, false});
  return fs;
}

bool reduced(const Eqn& e, int d, size_t rank) {
  for (int64_t a : e.params.axes)
    if ((a < 0 ? a + static_cast<int64_t>(rank) : a) == d) return true;
  return false;
}

Factors reduce_factors(const Eqn& e, const Program& p, bool split_reduced) {
  const size_t rank = in_shape(e, p, 0).size();
  Factors fs;
  int o = 0;
  for (int d = 0; d < static_cast<int>(rank); ++d) {
    if (!reduced(e, d, rank)) fs.push_back({{{0, d}, {1, o++}}, false});
    else if (split_reduced) fs.push_back({{{0, d}}, true});
  }
  return fs;
}
// A sum, max or min over a split dimension is a partial result per device, then combined.
Factors factors_reduce(const Eqn& e, const Program& p) { return reduce_factors(e, p, true); }
// The position of an extremum is not combined that way: the reduced dimension stays whole.
Factors factors_argreduce(const Eqn& e, const Program& p) { return reduce_factors(e, p, false); }

// (..., m, k) @ (..., k, n): batch, m and n carry over; k is contracting (partial sums).
Factors factors_matmul(const Eqn& e, const Program& p) {
  const int r = static_cast<int>(in_shape(e, p, 0).size());
  Factors fs;
  for (int d = 0; d < r - 2; ++d) fs.push_back({{{0, d}, {1, d}, {2, d}}, false});
  fs.push_back({{{0, r - 2}, {2, r - 2}}, false});
  fs.push_back({{{1, r - 1}, {2, r - 1}}, false});
  fs.push_back({{{0, r - 1}, {1, r - 2}}, true});
  return fs;
}

// Dimensions group where the running element counts of input and output meet; within a group the
// major (first non-unit) input and output dimensions can be split alike: the local reshape of
// (a/k, rest) into (b/k, rest') is then the same reshape of the pieces.
Factors factors_reshape(const Eqn& e, const Program& p) {
  const Shape& in = in_shape(e, p, 0);
  const Shape& out = out_shape(e, p, 0);
  Factors fs;
  size_t i = 0, j = 0;
  while (i < in.size() && j < out.size()) {
    while (i < in.size() && in[i] == 1) ++i;
    while (j < out.size() && out[j] == 1) ++j;
    if (i >= in.size() || j >= out.size()) break;
    fs.push_back({{{0, static_cast<int>(i)}, {1, static_cast<int>(j)}}, false});
    int64_t a = in[i++], b = out[j++];
    while (a != b) {
      if (a < b) a *= in.at(i++);
      else b *= out.at(j++);
    }
  }
  return fs;
}

Factors factors_transpose(const Eqn& e, const Program& p) {
  Factors fs;
  for (int i = 0; i < static_cast<int>(out_shape(e, p, 0).size()); ++i)
    fs.push_back({{{0, static_cast<int>(e.params.axes[static_cast<size_t>(i)])}, {1, i}}, false});
  return fs;
}

Factors factors_concatenate(const Eqn& e, const Program& p) {
  Factors fs;
  for (int d = 0; d < static_cast<int>(out_shape(e, p, 0).size()); ++d) {
    if (d == e.params.axis) continue;
    Factor f;
    for (int k = 0; k < operands(e); ++k) f.dims.push_back({k, d});
    f.dims.push_back({operands(e), d});
    fs.push_back(f);
  }
  return fs;
}

// slice, pad, dynamic_slice, dynamic_update_slice: the dimensions they take whole.
Factors factors_unchanged_dims(const Eqn& e, const Program& p) {
  const Shape& in = in_shape(e, p, 0);
  const program::Params& q = e.params;
  Factors fs;
  for (int d = 0; d < static_cast<int>(in.size()); ++d) {
    const size_t u = static_cast<size_t>(d);
    bool whole = false;
    switch (e.prim) {
      case Prim::slice: whole = q.lo[u] == 0 && q.hi[u] == in[u] && q.step[u] == 1; break;
      case Prim::pad: whole = q.lo[u] == 0 && q.hi[u] == 0; break;
      case Prim::dynamic_slice: whole = q.shape[u] == in[u]; break;
      case Prim::dynamic_update_slice: whole = in_shape(e, p, 1)[u] == in[u]; break;
      default: break;
    }
    if (!whole) continue;
    Factor f{{{0, d}}, false};
    if (e.prim == Prim::dynamic_update_slice) f.dims.push_back({1, d});
    f.dims.push_back({operands(e), d});
    fs.push_back(f);
  }
  return fs;
}

// A kernel runs replicated for now: its grid is not split yet.
Factors factors_pallas_call(const Eqn&, const Program&) { return {}; }

Factors factors_none(const Eqn&, const Program&) { return {}; }

const FactorRule kRules[] = {
#define PL_PRIM(name, family, vjp, batch, shard) &shard,
#include "program/prims.def"
#undef PL_PRIM
};

}  // namespace

FactorRule factor_rule(Prim p) { return kRules[static_cast<size_t>(p)]; }

const char* partial_reduction(Prim p) {
  switch (p) {
    case Prim::reduce_max: return "max";
    case Prim::reduce_min: return "min";
    default: return "sum";  // reduce_sum, matmul
  }
}

}  // namespace palladium::sharding
