// Element types of Arrays and kernel values, and the 16-bit float types.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace palladium {

enum class DType : uint8_t { bool_, int8, int16, int32, int64, uint8, uint32, float16, bfloat16, float32, float64 };
inline constexpr int kNumDTypes = 11;

inline constexpr DType bool_ = DType::bool_;
inline constexpr DType i8 = DType::int8;
inline constexpr DType i16 = DType::int16;
inline constexpr DType i32 = DType::int32;
inline constexpr DType i64 = DType::int64;
inline constexpr DType u8 = DType::uint8;
inline constexpr DType u32 = DType::uint32;
inline constexpr DType f16 = DType::float16;
inline constexpr DType bf16 = DType::bfloat16;
inline constexpr DType f32 = DType::float32;
inline constexpr DType f64 = DType::float64;

int itemsize(DType t);
// NumPy's names: "bool", "int8", ..., "bfloat16", "float32".
const char* dtype_name(DType t);
// Short names used in the IR printer: "i1" (bool), "i8" ... "bf16", "f32".
const char* dtype_short_name(DType t);
bool is_float(DType t);
bool is_integer(DType t);  // signed or unsigned, not bool
bool is_unsigned(DType t);
inline bool is_bool(DType t) { return t == DType::bool_; }

// Round a double to the nearest value representable in t: float32/float16/bfloat16 round to nearest
// even; integers truncate toward zero and wrap to the type's width (as C++/NumPy casts do); bool is x != 0.
double round_to(DType t, double x);
int64_t wrap_int(DType t, int64_t x);  // wrap an int64 to t's width (bool: x != 0)

// Element read/write through a raw pointer, converting through double or int64.
double load_as_double(DType t, const void* p);
int64_t load_as_int64(DType t, const void* p);
void store_from_double(DType t, void* p, double v);  // rounds as round_to
void store_from_int64(DType t, void* p, int64_t v);

// IEEE binary16 and bfloat16 as real 16-bit types; conversion from float rounds to nearest even.
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  explicit float16(float f);
  explicit operator float() const;
  static float16 from_bits(uint16_t b) { float16 h; h.bits = b; return h; }
};
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f);
  explicit operator float() const;
  static bfloat16 from_bits(uint16_t b) { bfloat16 h; h.bits = b; return h; }
};
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bfloat16_bits(float f);
float bfloat16_bits_to_float(uint16_t h);

// The DType of a C++ element type: dtype_of<float>() == f32.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::bool_; }
template <> constexpr DType dtype_of<int8_t>() { return DType::int8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::int16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::int64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::uint8; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::uint32; }
template <> constexpr DType dtype_of<float16>() { return DType::float16; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::bfloat16; }
template <> constexpr DType dtype_of<float>() { return DType::float32; }
template <> constexpr DType dtype_of<double>() { return DType::float64; }

using Shape = std::vector<int64_t>;
int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "(8, 4)", "()" for a scalar, "(8,)" for rank 1
// Element strides of a row-major array of this shape: (12, 4, 1) for (2, 3, 4).
std::vector<int64_t> row_major_strides(const Shape& s);

}  // namespace palladium
