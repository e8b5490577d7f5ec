// Array: an owning, shaped, typed, row-major buffer on a Device; the program-level value.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "palladium/dtype.h"
#include "palladium/error.h"

namespace palladium {

struct Device {
  enum Kind : uint8_t { cpu, cuda };
  Kind kind = cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

// Bytes owned by one allocation; Arrays share it (reshape shares, copy does not).
struct Storage {
  void* ptr = nullptr;
  size_t nbytes = 0;
  Device device{};
  void (*free_fn)(void*) = nullptr;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

namespace detail {
struct Tracer;        // a value of a program being traced (src/program/trace.h)
struct ShardedValue;  // the pieces of an Array split over devices (palladium/sharding.h)
}

class Array {
 public:
  Array() = default;                 // the "none" Array: no buffer (Pallas's None input)
  Array(Shape shape, DType dtype);   // uninitialised host allocation
  Array(Shape shape, DType dtype, std::shared_ptr<Storage> storage);

  bool defined() const { return storage_ != nullptr || tracer_ != nullptr || sharded_ != nullptr; }
  // While a function is traced (jit, grad, vmap, ...), its Arrays are tracers: they have a shape
  // and a dtype but no data; reading their data is an error naming the op (ConcretizationTypeError).
  bool is_tracer() const { return tracer_ != nullptr; }
  const std::shared_ptr<detail::Tracer>& tracer() const { return tracer_; }
  static Array from_tracer(Shape shape, DType dtype, std::shared_ptr<detail::Tracer> tracer);
  // A sharded Array (palladium/sharding.h) has its global shape and one piece per device; its data
  // is read through to_host(x), which gathers the pieces.
  bool is_sharded() const { return sharded_ != nullptr; }
  const std::shared_ptr<const detail::ShardedValue>& sharded() const { return sharded_; }
  static Array from_shards(Shape shape, DType dtype, std::shared_ptr<const detail::ShardedValue> pieces);
  explicit operator bool() const { return defined(); }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size() const;              // number of elements
  size_t nbytes() const;
  Device device() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* data();
  const void* data() const;
  template <class T> T* data_as() { check_element<T>(); return static_cast<T*>(data()); }
  template <class T> const T* data_as() const { check_element<T>(); return static_cast<const T*>(data()); }

  // Element access by flat row-major index, converting through double or int64.
  double get(int64_t flat) const;
  int64_t get_int(int64_t flat) const;
  void set(int64_t flat, double v);
  double at(std::initializer_list<int64_t> idx) const;

  Array copy() const;
  Array reshape(Shape shape) const;  // shares the buffer; -1 infers one dimension
  Array astype(DType t) const;
  template <class T> std::vector<T> to_vector() const {
    Array a = astype(dtype_of<T>());
    const T* p = a.template data_as<T>();
    return std::vector<T>(p, p + a.size());
  }
  std::vector<double> to_doubles() const;

  std::string str() const;           // NumPy's print format
  std::string repr() const;          // "Array([0, 2, 4], dtype=int32)" as JAX prints it

 private:
  template <class T> void check_element() const {
    PL_CHECK(dtype_of<T>() == dtype_, "Array: element type ", dtype_name(dtype_of<T>()),
             " requested from an array of ", dtype_name(dtype_));
  }
  Shape shape_;
  DType dtype_ = DType::float32;
  std::shared_ptr<Storage> storage_;
  std::shared_ptr<detail::Tracer> tracer_;
  std::shared_ptr<const detail::ShardedValue> sharded_;
};

std::ostream& operator<<(std::ostream& os, const Array& a);

// The shape and dtype of a result, as jax.ShapeDtypeStruct.
struct ShapeDtype {
  Shape shape;
  DType dtype = DType::float32;
  ShapeDtype() = default;
  ShapeDtype(Shape s, DType t) : shape(std::move(s)), dtype(t) {}
  bool operator==(const ShapeDtype&) const = default;
};

// ---- creation ----
Array zeros(Shape shape, DType dtype = f32);
Array ones(Shape shape, DType dtype = f32);
Array full(Shape shape, double value, DType dtype = f32);
Array arange(int64_t n, DType dtype = i32);
Array arange(int64_t start, int64_t stop, int64_t step = 1, DType dtype = i32);
Array linspace(double start, double stop, int64_t n, DType dtype = f32);
template <class T> Array from_vector(const std::vector<T>& v, Shape shape) {
  Array a(std::move(shape), dtype_of<T>());
  PL_CHECK(a.size() == static_cast<int64_t>(v.size()), "from_vector: ", v.size(),
           " elements do not fill shape ", shape_str(a.shape()));
  T* p = a.template data_as<T>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i];
  return a;
}
template <class T> Array from_vector(const std::vector<T>& v) {
  return from_vector(v, Shape{static_cast<int64_t>(v.size())});
}
Array array(std::initializer_list<double> values, DType dtype = f32);
Array array(std::initializer_list<int> values, DType dtype = i32);

}  // namespace palladium
