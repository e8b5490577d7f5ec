// Ref: a kernel's view of one input or output block. Reading a Ref (x_ref[pl::all], pl::load) and
// writing it (o_ref[pl::all] = v, pl::store) are traced as loads and stores of the block.
#pragma once
#include <optional>
#include <span>
#include <vector>

#include "palladium/value.h"

namespace palladium {

class RefProxy;

class Ref {
 public:
  Ref() = default;  // a None ref: the kernel's slot for an absent (None) input
  bool is_none() const { return param_ < 0; }
  explicit operator bool() const { return !is_none(); }
  const Shape& shape() const;
  DType dtype() const;
  int64_t ndim() const { return static_cast<int64_t>(shape().size()); }

  RefProxy operator[](const IndexArg& i) const;
  RefProxy operator[](const Indexer& i) const;
  template <class... A> RefProxy operator()(const A&... a) const;
  // A view of part of this ref (Pallas's ref.at[...]): later indices are relative to the view.
  Ref at(const Indexer& i) const;
  template <class... A> Ref at(const A&... a) const { return at(Indexer(std::vector<IndexArg>{IndexArg(a)...})); }

  // Internal.
  struct ViewDim {
    bool scalar = false;
    Value start;           // relative to the parent block
    int64_t size = 1;
    int64_t stride = 1;
  };
  Ref(int param, Shape shape, DType dtype) : param_(param), shape_(std::move(shape)), dtype_(dtype) {}
  int param() const { return param_; }
  const std::vector<ViewDim>& view() const { return view_; }

 private:
  int param_ = -1;
  Shape shape_;                  // shape seen through the view
  DType dtype_ = DType::float32;
  std::vector<ViewDim> view_;    // empty: the whole block; else one entry per block dimension
  friend Ref make_view(const Ref&, const Indexer&);
};

using Refs = std::span<const Ref>;

// x_ref[...]: reads as a Value, assignments store.
class RefProxy {
 public:
  RefProxy(Ref ref, Indexer index) : ref_(std::move(ref)), index_(std::move(index)) {}
  operator Value() const { return get(); }  // NOLINT: reading a ref is a load
  Value get() const;
  RefProxy& operator=(const Value& v);
  RefProxy& operator=(const RefProxy& other) { return *this = other.get(); }
  RefProxy(const RefProxy&) = default;
  RefProxy& operator+=(const Value& v);
  RefProxy& operator-=(const Value& v);
  RefProxy& operator*=(const Value& v);
  RefProxy& operator/=(const Value& v);
  Shape shape() const { return get().shape(); }
  DType dtype() const { return ref_.dtype(); }
  Value astype(DType t) const { return get().astype(t); }
  Value T() const { return get().T(); }
  Value sum(std::optional<int64_t> axis = std::nullopt) const { return get().sum(axis); }
  Value max(std::optional<int64_t> axis = std::nullopt) const { return get().max(axis); }
  Value min(std::optional<int64_t> axis = std::nullopt) const { return get().min(axis); }
  Value reshape(Shape shape) const { return get().reshape(std::move(shape)); }
  Value transpose(std::vector<int64_t> perm) const { return get().transpose(std::move(perm)); }
  Value broadcast_to(Shape shape) const { return get().broadcast_to(std::move(shape)); }
  template <class... A> Value operator()(const A&... args) const { return get()(args...); }

 private:
  Ref ref_;
  Indexer index_;
};

template <class... A> RefProxy Ref::operator()(const A&... a) const {
  return RefProxy(*this, Indexer(std::vector<IndexArg>{IndexArg(a)...}));
}

namespace detail {
// One Ref per type: buffers of the kernel being traced (run_scoped below).
std::vector<Ref> scoped_buffers(const std::vector<ShapeDtype>& types);
}  // namespace detail

// Pallas's run_scoped: calls fn with one Ref per type, on buffers that exist while fn runs, and
// returns what fn returns. The buffers are uninitialised, like scratch_shapes (each point of the
// parallel grid axes has its own), and are allocated for the call: inside a loop or a conditional
// every entry to the scope uses the same buffers.
template <class Fn> decltype(auto) run_scoped(Fn&& fn, const std::vector<ShapeDtype>& types) {
  const std::vector<Ref> refs = detail::scoped_buffers(types);
  return std::forward<Fn>(fn)(Refs(refs));
}
template <class Fn> decltype(auto) run_scoped(Fn&& fn, const ShapeDtype& type) {
  const std::vector<Ref> refs = detail::scoped_buffers({type});
  return std::forward<Fn>(fn)(refs[0]);
}

// pl.load / pl.store with masks; `other` fills masked-off lanes of a load.
Value load(const Ref& ref, const Indexer& index = {all}, std::optional<Value> mask = std::nullopt,
           std::optional<Value> other = std::nullopt);
void store(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask = std::nullopt);
void store(const Ref& ref, const Value& value);
// pl.swap: stores `value` and returns what the selection held before (masked-off lanes of the
// result are undefined, as those of a load without `other`).
Value swap(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask = std::nullopt);
// Atomic read-modify-write of each selected element; returns the old values.
Value atomic_add(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask = std::nullopt);
Value atomic_max(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask = std::nullopt);
Value atomic_min(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask = std::nullopt);
Value atomic_xchg(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask = std::nullopt);
// Bitwise, on integer refs.
Value atomic_and(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask = std::nullopt);
Value atomic_or(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask = std::nullopt);
Value atomic_xor(const Ref& ref, const Indexer& index, const Value& value, std::optional<Value> mask = std::nullopt);
// Where an element equals `cmp` it becomes `value`; returns the old values. 32/64-bit integer refs.
Value atomic_cas(const Ref& ref, const Indexer& index, const Value& cmp, const Value& value);

}  // namespace palladium
