// Value: a traced tile (or scalar, a rank-0 tile) inside a kernel. Every operation on Values is
// recorded into the kernel's IR while the kernel is traced; nothing is computed eagerly.
// C++ numbers mix with Values as Python numbers do in JAX: they are weakly typed and take the
// dtype of the Value they meet (an int32 tile + 2.5 becomes float32).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <type_traits>
#include <utility>
#include <string>
#include <variant>
#include <vector>

#include "palladium/array.h"
#include "palladium/dtype.h"

namespace palladium {

struct EllipsisTag {};
struct NoneTag {};
// `pl::all` is Python's `...`. `pl::None` is Python's None: a new axis when indexing a Value (the
// x[:, None] idiom, also spelled `pl::newaxis`), a squeezed dimension in a BlockSpec's block shape,
// and "not batched" in vmap's in_axes.
inline constexpr EllipsisTag all{};
inline constexpr NoneTag None{};
inline constexpr NoneTag newaxis{};

struct Slice;
struct DSlice;
struct IndexArg;

class Value {
 public:
  Value() = default;
  // C++ numbers become weakly typed literals: float32, int32 or bool until they meet a Value.
  template <class T>
    requires std::is_arithmetic_v<T>
  Value(T x) {  // NOLINT
    if constexpr (std::is_same_v<T, bool>) set_literal(x ? 1.0 : 0.0, DType::bool_);
    else if constexpr (std::is_integral_v<T>)
      set_literal(static_cast<double>(x), std::in_range<int32_t>(x) ? DType::int32 : DType::int64);
    else set_literal(static_cast<double>(x), DType::float32);
  }
  Value(const Array& captured);        // NOLINT: always an error: kernels take Arrays as inputs

  bool valid() const { return kind_ != Kind::None; }
  bool is_literal() const { return kind_ == Kind::Literal; }
  Shape shape() const;
  DType dtype() const;
  int64_t ndim() const { return static_cast<int64_t>(shape().size()); }

  Value astype(DType t) const;
  Value T() const;                                   // reverse the axes
  Value transpose(std::vector<int64_t> perm) const;
  Value reshape(Shape shape) const;
  Value broadcast_to(Shape shape) const;
  Value expand_dims(int64_t axis) const;
  // Reductions along one axis, or over all axes when none is given (as jnp.sum(x)).
  Value sum(std::optional<int64_t> axis = std::nullopt) const;
  Value max(std::optional<int64_t> axis = std::nullopt) const;
  Value min(std::optional<int64_t> axis = std::nullopt) const;
  Value argmax(std::optional<int64_t> axis = std::nullopt) const;
  Value argmin(std::optional<int64_t> axis = std::nullopt) const;
  // Static indexing of a tile, for the layout idioms only: pl::all and full slices keep a
  // dimension, pl::None inserts one (x[:, None]); load other selections from the Ref instead.
  template <class... A> Value operator()(const A&... args) const;
  Value index(const std::vector<IndexArg>& args) const;

  // Internal: the IR value id (literals are materialised first).
  int32_t id() const;
  double literal_value() const { return lit_; }
  static Value from_id(int32_t id);

 private:
  void set_literal(double x, DType t) { kind_ = Kind::Literal; lit_ = x; lit_dtype_ = t; }
  enum class Kind : uint8_t { None, Traced, Literal };
  Kind kind_ = Kind::None;
  int32_t id_ = -1;
  uint32_t generation_ = 0;
  DType lit_dtype_ = DType::float32;
  double lit_ = 0.0;
};

using Index = Value;  // grid indices given to an index_map

// Python's slice(start, stop, step), all static.
struct Slice {
  int64_t start = 0;
  int64_t stop = INT64_MAX;   // INT64_MAX: to the end
  int64_t step = 1;
};
inline Slice slice(int64_t start = 0, int64_t stop = INT64_MAX, int64_t step = 1) { return {start, stop, step}; }
inline Slice slice_to(int64_t stop) { return {0, stop, 1}; }

// pl.ds / pl.dslice: `size` elements from a possibly traced start, with a static stride.
struct DSlice {
  Value start;
  int64_t size = 0;
  int64_t stride = 1;
};
inline DSlice ds(Value start, int64_t size, int64_t stride = 1) { return {std::move(start), size, stride}; }
inline DSlice dslice(Value start, int64_t size, int64_t stride = 1) { return ds(std::move(start), size, stride); }
// pl.dslice(size) == dslice(0, size)
inline DSlice dslice(int64_t size) { return {Value(0), size, 1}; }

struct IndexArg {
  std::variant<int64_t, Value, Slice, DSlice, EllipsisTag, NoneTag> v;
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  IndexArg(I x) : v(static_cast<int64_t>(x)) {}            // NOLINT
  IndexArg(const Value& x) : v(x) {}                       // NOLINT
  IndexArg(Slice x) : v(x) {}                              // NOLINT
  IndexArg(DSlice x) : v(std::move(x)) {}                  // NOLINT
  IndexArg(EllipsisTag x) : v(x) {}                        // NOLINT
  IndexArg(NoneTag x) : v(x) {}                         // NOLINT
};

// A tuple of indices: pl::idx(i, pl::ds(s, 128), pl::slice()).
struct Indexer {
  std::vector<IndexArg> args;
  Indexer() = default;
  Indexer(std::initializer_list<IndexArg> a) : args(a) {}
  explicit Indexer(std::vector<IndexArg> a) : args(std::move(a)) {}
};
template <class... A> Indexer idx(const A&... a) { return Indexer(std::vector<IndexArg>{IndexArg(a)...}); }

template <class... A> Value Value::operator()(const A&... args) const { return index({IndexArg(args)...}); }

// ---- arithmetic (NumPy broadcasting, JAX promotion) ----
Value operator+(const Value& a, const Value& b);
Value operator-(const Value& a, const Value& b);
Value operator*(const Value& a, const Value& b);
Value operator/(const Value& a, const Value& b);   // true division for floats, truncating for ints (lax.div)
Value operator%(const Value& a, const Value& b);   // lax.rem
Value operator-(const Value& a);
Value operator==(const Value& a, const Value& b);
Value operator!=(const Value& a, const Value& b);
Value operator<(const Value& a, const Value& b);
Value operator<=(const Value& a, const Value& b);
Value operator>(const Value& a, const Value& b);
Value operator>=(const Value& a, const Value& b);
Value operator&(const Value& a, const Value& b);   // logical and for bool, bitwise for ints
Value operator|(const Value& a, const Value& b);
Value operator^(const Value& a, const Value& b);
Value operator!(const Value& a);
Value operator~(const Value& a);
Value& operator+=(Value& a, const Value& b);
Value& operator-=(Value& a, const Value& b);
Value& operator*=(Value& a, const Value& b);
Value& operator/=(Value& a, const Value& b);

}  // namespace palladium
