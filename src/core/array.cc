// Array storage, element access, and the creation functions.
#include "palladium/array.h"
#include "core/host_allocator.h"
#include "core/host_threads.h"
#include "palladium/sharding.h"
#include "palladium/numpy.h"
#include "program/trace.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>

namespace palladium {

namespace {

std::shared_ptr<Storage> allocate_host(size_t nbytes, const Shape& shape, DType dtype) {
  auto storage = std::make_shared<Storage>();
  // Even an empty Array has a valid pointer (a 0-byte request gets a small block).
  const detail::HostBlock block = detail::host_allocate(nbytes);
  storage->ptr = block.ptr;
  if (storage->ptr == nullptr)
    throw Error("Array: cannot allocate " + std::to_string(nbytes) + " bytes for an array of shape " + shape_str(shape) +
                " and dtype " + dtype_name(dtype) + " on the host (out of memory)");
  storage->nbytes = nbytes;
  storage->device = Device{};
  storage->free_fn = block.free_fn;
  return storage;
}

void check_shape(const char* fn, const Shape& shape) {
  for (int64_t d : shape)
    PL_CHECK(d >= 0, fn, ": negative dimension in shape ", shape_str(shape));
}

void check_host(const char* fn, const Array& a) {
  PL_CHECK(a.defined(), fn, ": the array is undefined (none)");
  if (a.is_tracer()) detail::concretization_error(fn, a);
  if (a.is_sharded()) detail::sharded_data_error(fn, a);
  PL_CHECK(a.device().kind == Device::cpu, fn, ": the array is on ", a.device().str(),
           "; copy it to the host first");
}

}  // namespace

std::string Device::str() const {
  if (kind == cuda) return "cuda:" + std::to_string(index);
  return index == 0 ? "cpu" : "cpu:" + std::to_string(index);
}

Storage::~Storage() {
  if (ptr != nullptr && free_fn != nullptr) free_fn(ptr);
}

Array::Array(Shape shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
  check_shape("Array", shape_);
  // The element count and the byte size must fit their types (numel throws on overflow).
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel(shape_)), static_cast<uint64_t>(itemsize(dtype_)), &bytes) ||
      bytes > static_cast<size_t>(PTRDIFF_MAX))
    throw Error("Array: shape " + shape_str(shape_) + " of " + dtype_name(dtype_) + " needs more bytes than memory can address");
  storage_ = allocate_host(bytes, shape_, dtype_);
}

Array::Array(Shape shape, DType dtype, std::shared_ptr<Storage> storage)
    : shape_(std::move(shape)), dtype_(dtype), storage_(std::move(storage)) {
  check_shape("Array", shape_);
  PL_CHECK(storage_ != nullptr, "Array: null storage for an array of shape ", shape_str(shape_));
  PL_CHECK(storage_->nbytes >= nbytes(), "Array: storage of ", storage_->nbytes,
           " bytes is too small for shape ", shape_str(shape_), " of ", dtype_name(dtype_), " (",
           nbytes(), " bytes)");
}

int64_t Array::size() const { return defined() ? numel(shape_) : 0; }
size_t Array::nbytes() const { return static_cast<size_t>(size()) * static_cast<size_t>(itemsize(dtype_)); }
Device Array::device() const {
  if (tracer_) return detail::tracer_device(*tracer_);
  if (sharded_) return detail::first_piece_device(*sharded_);
  return storage_ ? storage_->device : Device{};
}

Array Array::from_shards(Shape shape, DType dtype, std::shared_ptr<const detail::ShardedValue> pieces) {
  Array a;
  a.shape_ = std::move(shape);
  a.dtype_ = dtype;
  a.sharded_ = std::move(pieces);
  return a;
}

Array Array::from_tracer(Shape shape, DType dtype, std::shared_ptr<detail::Tracer> tracer) {
  Array a;
  a.shape_ = std::move(shape);
  a.dtype_ = dtype;
  a.tracer_ = std::move(tracer);
  return a;
}

void* Array::data() {
  PL_CHECK(defined(), "Array::data: the array is undefined (none)");
  if (tracer_) detail::concretization_error("Array::data", *this);
  if (sharded_) detail::sharded_data_error("Array::data", *this);
  return storage_->ptr;
}
const void* Array::data() const {
  PL_CHECK(defined(), "Array::data: the array is undefined (none)");
  if (tracer_) detail::concretization_error("Array::data", *this);
  if (sharded_) detail::sharded_data_error("Array::data", *this);
  return storage_->ptr;
}

double Array::get(int64_t flat) const {
  check_host("Array::get", *this);
  PL_CHECK(flat >= 0 && flat < size(), "Array::get: flat index ", flat, " is out of range for shape ",
           shape_str(shape_));
  return load_as_double(dtype_, static_cast<const char*>(data()) + flat * itemsize(dtype_));
}

int64_t Array::get_int(int64_t flat) const {
  check_host("Array::get_int", *this);
  PL_CHECK(flat >= 0 && flat < size(), "Array::get_int: flat index ", flat,
           " is out of range for shape ", shape_str(shape_));
  return load_as_int64(dtype_, static_cast<const char*>(data()) + flat * itemsize(dtype_));
}

void Array::set(int64_t flat, double v) {
  check_host("Array::set", *this);
  PL_CHECK(flat >= 0 && flat < size(), "Array::set: flat index ", flat, " is out of range for shape ",
           shape_str(shape_));
  store_from_double(dtype_, static_cast<char*>(data()) + flat * itemsize(dtype_), v);
}

double Array::at(std::initializer_list<int64_t> idx) const {
  PL_CHECK(static_cast<int64_t>(idx.size()) == ndim(), "Array::at: ", idx.size(),
           " indices for an array of shape ", shape_str(shape_));
  int64_t flat = 0;
  int64_t axis = 0;
  for (int64_t i : idx) {
    const int64_t dim = shape_[static_cast<size_t>(axis)];
    const int64_t wrapped = i < 0 ? i + dim : i;  // negative indices count from the end, as in NumPy
    PL_CHECK(wrapped >= 0 && wrapped < dim, "Array::at: index ", i, " is out of range for axis ",
             axis, " of shape ", shape_str(shape_));
    flat = flat * dim + wrapped;
    ++axis;
  }
  return get(flat);
}

Array Array::copy() const {
  check_host("Array::copy", *this);
  Array out(shape_, dtype_);
  if (nbytes() > 0) std::memcpy(out.data(), data(), nbytes());
  return out;
}

Array Array::reshape(Shape shape) const {
  PL_CHECK(defined(), "reshape: the array is undefined (none)");
  if (tracer_) return jnp::reshape(*this, std::move(shape));
  int infer_axis = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      PL_CHECK(infer_axis < 0, "reshape: can only infer one dimension, got shape ", shape_str(shape));
      infer_axis = static_cast<int>(i);
    } else {
      PL_CHECK(shape[i] >= 0, "reshape: negative dimension in shape ", shape_str(shape));
      known *= shape[i];
    }
  }
  const int64_t n = size();
  if (infer_axis >= 0) {
    PL_CHECK(known != 0 && n % known == 0, "reshape: cannot reshape array of shape ", shape_str(shape_),
             " (", n, " elements) into shape ", shape_str(shape));
    shape[static_cast<size_t>(infer_axis)] = n / known;
  }
  PL_CHECK(numel(shape) == n, "reshape: cannot reshape array of shape ", shape_str(shape_), " (", n,
           " elements) into shape ", shape_str(shape));
  return Array(std::move(shape), dtype_, storage_);
}

Array Array::astype(DType t) const {
  if (tracer_) return jnp::astype(*this, t);
  check_host("astype", *this);
  Array out(shape_, t);
  const int64_t n = size();
  const char* src = static_cast<const char*>(data());
  char* dst = static_cast<char*>(out.data());
  const int in_size = itemsize(dtype_), out_size = itemsize(t);
  if (t == dtype_) {
    if (n > 0) std::memcpy(dst, src, nbytes());
  } else {
    // Integer and bool sources go through int64 so that large int64 values convert exactly.
    const bool integral = !is_float(dtype_);
    parallel_chunks(n, int64_t{1} << 18, [&](int64_t begin, int64_t end) {
      if (integral) {
        for (int64_t i = begin; i < end; ++i) store_from_int64(t, dst + i * out_size, load_as_int64(dtype_, src + i * in_size));
      } else {
        for (int64_t i = begin; i < end; ++i) store_from_double(t, dst + i * out_size, load_as_double(dtype_, src + i * in_size));
      }
    });
  }
  return out;
}

std::vector<double> Array::to_doubles() const {
  check_host("to_doubles", *this);
  std::vector<double> out(static_cast<size_t>(size()));
  const char* src = static_cast<const char*>(data());
  const int in_size = itemsize(dtype_);
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_double(dtype_, src + i * in_size);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Array& a) { return os << a.str(); }

// ---- creation ----

Array zeros(Shape shape, DType dtype) {
  Array a(std::move(shape), dtype);
  if (a.nbytes() > 0) std::memset(a.data(), 0, a.nbytes());  // all-zero bits are 0 in every dtype
  return a;
}

Array ones(Shape shape, DType dtype) { return full(std::move(shape), 1.0, dtype); }

Array full(Shape shape, double value, DType dtype) {
  Array a(std::move(shape), dtype);
  const int size = itemsize(dtype);
  unsigned char element[8];
  store_from_double(dtype, element, value);
  char* dst = static_cast<char*>(a.data());
  for (int64_t i = 0; i < a.size(); ++i) std::memcpy(dst + i * size, element, static_cast<size_t>(size));
  return a;
}

Array arange(int64_t n, DType dtype) { return arange(0, n, 1, dtype); }

Array arange(int64_t start, int64_t stop, int64_t step, DType dtype) {
  PL_CHECK(step != 0, "arange: step must not be zero");
  int64_t count = 0;
  if (step > 0 && stop > start) count = (stop - start + step - 1) / step;
  if (step < 0 && stop < start) count = (start - stop + (-step) - 1) / (-step);
  Array a({count}, dtype);
  char* dst = static_cast<char*>(a.data());
  for (int64_t i = 0; i < count; ++i) store_from_int64(dtype, dst + i * itemsize(dtype), start + i * step);
  return a;
}

Array linspace(double start, double stop, int64_t n, DType dtype) {
  PL_CHECK(n >= 0, "linspace: number of samples must be non-negative, got ", n);
  Array a({n}, dtype);
  // As NumPy: start + i * step in float64, with the last sample exactly `stop`.
  const double step = n > 1 ? (stop - start) / static_cast<double>(n - 1) : 0.0;
  for (int64_t i = 0; i < n; ++i) a.set(i, start + static_cast<double>(i) * step);
  if (n > 1) a.set(n - 1, stop);
  return a;
}

Array array(std::initializer_list<double> values, DType dtype) {
  Array a({static_cast<int64_t>(values.size())}, dtype);
  int64_t i = 0;
  for (double v : values) a.set(i++, v);
  return a;
}

Array array(std::initializer_list<int> values, DType dtype) {
  Array a({static_cast<int64_t>(values.size())}, dtype);
  char* dst = static_cast<char*>(a.data());
  int64_t i = 0;
  for (int v : values) store_from_int64(dtype, dst + (i++) * itemsize(dtype), v);
  return a;
}

}  // namespace palladium
