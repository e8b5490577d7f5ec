// Tile: the interpreter's runtime value (see interpreter.h for the representation).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "palladium/array.h"

namespace palladium::interp {

struct Tile {
  DType dtype = DType::float32;
  Shape shape;
  std::vector<double> f;        // float dtypes
  std::vector<int64_t> i;       // integer and bool dtypes
  std::vector<uint8_t> poison;  // empty when nothing is poisoned

  static Tile make(DType t, Shape s);
  int64_t size() const { return numel(shape); }
  bool floating() const { return is_float(dtype); }
  bool poisoned(int64_t k) const { return !poison.empty() && poison[static_cast<size_t>(k)]; }
  bool any_poison() const;
  void set_poison(int64_t k);
  double get_f(int64_t k) const { return floating() ? f[static_cast<size_t>(k)] : static_cast<double>(i[static_cast<size_t>(k)]); }
  int64_t get_i(int64_t k) const { return floating() ? static_cast<int64_t>(f[static_cast<size_t>(k)]) : i[static_cast<size_t>(k)]; }
  int64_t scalar_int() const { return get_i(0); }
  Array to_array() const;  // poisoned elements become NaN (floats) or 0
};

// Evaluation of the pure op families; each throws Error via `fail` for a runtime fault.
using Fail = std::function<void(const std::string&)>;
Tile eval_leaf(const ir::Inst& in, const ir::Type& result, const std::vector<int64_t>& program, const Shape& grid);
Tile eval_unary(ir::Op op, const Tile& x);
Tile eval_binary(ir::Op op, const Tile& a, const Tile& b, const Fail& fail);
Tile eval_compare(ir::Op op, const Tile& a, const Tile& b);
Tile eval_select(const Tile& p, const Tile& a, const Tile& b);
Tile eval_cast(const Tile& x, DType t);
Tile eval_bitcast(const Tile& x, DType t);  // the same storage bytes read as t
Tile eval_broadcast(const Tile& x, const Shape& shape, const std::vector<int64_t>& dims);
Tile eval_reshape(Tile x, const Shape& shape);
Tile eval_transpose(const Tile& x, const std::vector<int64_t>& perm);
Tile eval_reduce(ir::Op op, const Tile& x, int axis);
Tile eval_cumsum(const Tile& x, int axis);
Tile eval_dot(const Tile& a, const Tile& b, bool trans_a, bool trans_b, DType result);

}  // namespace palladium::interp
