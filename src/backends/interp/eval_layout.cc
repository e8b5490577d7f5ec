// Interpreter: broadcast, reshape, transpose, reductions and cumsum.
#include <cmath>

#include "backends/interp/tile.h"

namespace palladium::interp {
namespace {

// out[k] = x[src[k]] for every element, carrying poison along.
Tile gather(const Tile& x, const Shape& shape, const std::vector<int64_t>& src) {
  Tile r = Tile::make(x.dtype, shape);
  const size_t n = src.size();
  if (x.floating()) for (size_t k = 0; k < n; ++k) r.f[k] = x.f[static_cast<size_t>(src[k])];
  else for (size_t k = 0; k < n; ++k) r.i[k] = x.i[static_cast<size_t>(src[k])];
  if (!x.poison.empty()) {
    r.poison.resize(n);
    for (size_t k = 0; k < n; ++k) r.poison[k] = x.poison[static_cast<size_t>(src[k])];
  }
  return r;
}

// Source offsets for an output of `shape` where output dim d steps the source by step[d].
std::vector<int64_t> walk(const Shape& shape, const std::vector<int64_t>& step) {
  const int64_t n = numel(shape);
  std::vector<int64_t> src(static_cast<size_t>(n));
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t off = 0;
  for (int64_t k = 0; k < n; ++k) {
    src[static_cast<size_t>(k)] = off;
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) { off += step[d]; break; }
      off -= step[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
  return src;
}

}  // namespace

Tile eval_broadcast(const Tile& x, const Shape& shape, const std::vector<int64_t>& dims) {
  std::vector<int64_t> xs = row_major_strides(x.shape), step(shape.size(), 0);
  for (size_t d = 0; d < dims.size(); ++d)
    if (x.shape[d] != 1) step[static_cast<size_t>(dims[d])] = xs[d];
  return gather(x, shape, walk(shape, step));
}

Tile eval_reshape(Tile x, const Shape& shape) {
  x.shape = shape;
  return x;
}

Tile eval_transpose(const Tile& x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> xs = row_major_strides(x.shape), step(perm.size());
  Shape out(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) {
    out[d] = x.shape[static_cast<size_t>(perm[d])];
    step[d] = xs[static_cast<size_t>(perm[d])];
  }
  return gather(x, out, walk(out, step));
}

Tile eval_reduce(ir::Op op, const Tile& x, int axis) {
  Shape out = x.shape;
  const int64_t len = x.shape[static_cast<size_t>(axis)];
  out.erase(out.begin() + axis);
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  const int64_t outer = numel(out) / std::max<int64_t>(inner, 1);
  const bool arg = op == ir::Op::ArgMax || op == ir::Op::ArgMin;
  Tile r = Tile::make(arg ? DType::int32 : x.dtype, out);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * len * inner + in, dst = o * inner + in;
      bool poisoned = false;
      double facc = op == ir::Op::ReduceSum ? 0.0 : (op == ir::Op::ReduceMax ? -INFINITY : INFINITY);
      int64_t iacc = 0, best = 0;
      bool nan = false;
      for (int64_t k = 0; k < len; ++k) {
        const int64_t s = base + k * inner;
        poisoned = poisoned || x.poisoned(s);
        if (x.floating()) {
          const double v = x.f[static_cast<size_t>(s)];
          if (op == ir::Op::ReduceSum) { facc += v; continue; }
          if (std::isnan(v)) { if (!nan) { nan = true; best = k; facc = v; } continue; }
          if (nan) continue;
          const bool better = (op == ir::Op::ReduceMax || op == ir::Op::ArgMax) ? v > facc : v < facc;
          if (k == 0 || better) { facc = v; best = k; }
        } else {
          const int64_t v = x.i[static_cast<size_t>(s)];
          if (op == ir::Op::ReduceSum) { iacc += v; continue; }
          const bool better = (op == ir::Op::ReduceMax || op == ir::Op::ArgMax) ? v > iacc : v < iacc;
          if (k == 0 || better) { iacc = v; best = k; }
        }
      }
      if (arg) r.i[static_cast<size_t>(dst)] = best;
      else if (r.floating()) r.f[static_cast<size_t>(dst)] = round_to(r.dtype, facc);
      else r.i[static_cast<size_t>(dst)] = wrap_int(r.dtype, iacc);
      if (poisoned) r.set_poison(dst);
    }
  }
  return r;
}

Tile eval_cumsum(const Tile& x, int axis) {
  Tile r = Tile::make(x.dtype, x.shape);
  const int64_t len = x.shape[static_cast<size_t>(axis)];
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  const int64_t outer = x.size() / std::max<int64_t>(len * inner, 1);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      double facc = 0;
      int64_t iacc = 0;
      bool poisoned = false;
      for (int64_t k = 0; k < len; ++k) {
        const int64_t s = o * len * inner + in + k * inner;
        poisoned = poisoned || x.poisoned(s);
        if (x.floating()) r.f[static_cast<size_t>(s)] = round_to(x.dtype, facc += x.f[static_cast<size_t>(s)]);
        else r.i[static_cast<size_t>(s)] = wrap_int(x.dtype, iacc += x.i[static_cast<size_t>(s)]);
        if (poisoned) r.set_poison(s);
      }
    }
  }
  return r;
}

}  // namespace palladium::interp
