// NumPy .npy files: a magic string, a version, a Python-dict header ('descr', 'fortran_order',
// 'shape') padded to 64 bytes, then the raw little-endian C-order data.
#include "palladium/npy.h"

#include <bit>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>

namespace palladium {

static_assert(std::endian::native == std::endian::little, "npy.cc reads and writes little-endian data");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;
constexpr size_t kGrowthAxisMaxDigits = 21;  // NumPy leaves room for the first axis to grow

// NumPy's descriptor for each dtype; bfloat16 is raw 16-bit words, as ml_dtypes saves it.
const char* descriptor(DType t) {
  switch (t) {
    case DType::bool_: return "|b1";
    case DType::int8: return "|i1";
    case DType::int16: return "<i2";
    case DType::int32: return "<i4";
    case DType::int64: return "<i8";
    case DType::uint8: return "|u1";
    case DType::uint32: return "<u4";
    case DType::float16: return "<f2";
    case DType::bfloat16: return "<V2";
    case DType::float32: return "<f4";
    case DType::float64: return "<f8";
  }
  throw InternalError("npy: unknown DType");
}

DType dtype_from_descriptor(const std::string& descr, const std::string& path) {
  PL_CHECK(descr.size() >= 2, "load_npy: '", path, "' has an invalid dtype descriptor '", descr, "'");
  const char order = descr[0];
  const std::string code = descr.substr(1);
  PL_CHECK(order != '>' || code == "b1" || code == "i1" || code == "u1",
           "load_npy: '", path, "' holds big-endian data (dtype '", descr,
           "'); only little-endian files are supported");
  PL_CHECK(order == '<' || order == '|' || order == '=' || order == '>', "load_npy: '", path,
           "' has an invalid dtype descriptor '", descr, "'");
  static const struct { const char* code; DType dtype; } kCodes[] = {
      {"b1", DType::bool_},   {"i1", DType::int8},     {"i2", DType::int16},    {"i4", DType::int32},
      {"i8", DType::int64},   {"u1", DType::uint8},    {"u4", DType::uint32},   {"f2", DType::float16},
      {"V2", DType::bfloat16}, {"f4", DType::float32}, {"f8", DType::float64},
  };
  for (const auto& entry : kCodes)
    if (code == entry.code) return entry.dtype;
  throw Error("load_npy: '" + path + "' has dtype '" + descr +
              "', which is not supported (supported: bool, int8, int16, int32, int64, uint8, uint32, "
              "float16, bfloat16 as V2, float32, float64)");
}

std::string header_dict(const Array& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape().size(); ++i) {
    if (i > 0) shape += ", ";
    shape += std::to_string(a.shape()[i]);
  }
  shape += a.shape().size() == 1 ? ",)" : ")";
  std::string dict = std::string("{'descr': '") + descriptor(a.dtype()) +
                     "', 'fortran_order': False, 'shape': " + shape + ", }";
  if (!a.shape().empty()) dict += std::string(kGrowthAxisMaxDigits - std::to_string(a.shape()[0]).size(), ' ');
  return dict;
}

// A tiny reader for the header's Python dict literal.
class HeaderParser {
 public:
  HeaderParser(std::string text, std::string path) : text_(std::move(text)), path_(std::move(path)) {}

  // Position just after "'key':" (either quote style).
  size_t value_of(const std::string& key) const {
    for (const char* quote : {"'", "\""}) {
      const std::string needle = quote + key + quote;
      size_t at = text_.find(needle);
      if (at == std::string::npos) continue;
      at = text_.find(':', at + needle.size());
      if (at != std::string::npos) return skip_space(at + 1);
    }
    throw Error("load_npy: the header of '" + path_ + "' has no '" + key + "' entry: " + text_);
  }

  std::string string_value(const std::string& key) const {
    const size_t at = value_of(key);
    PL_CHECK(at < text_.size() && (text_[at] == '\'' || text_[at] == '"'), "load_npy: '", path_,
             "' has an unsupported '", key, "' entry (structured dtypes are not supported): ", text_);
    const size_t end = text_.find(text_[at], at + 1);
    PL_CHECK(end != std::string::npos, "load_npy: malformed header in '", path_, "': ", text_);
    return text_.substr(at + 1, end - at - 1);
  }

  bool bool_value(const std::string& key) const {
    const size_t at = value_of(key);
    if (text_.compare(at, 4, "True") == 0) return true;
    if (text_.compare(at, 5, "False") == 0) return false;
    throw Error("load_npy: malformed '" + key + "' in the header of '" + path_ + "': " + text_);
  }

  Shape shape_value(const std::string& key) const {
    size_t at = value_of(key);
    PL_CHECK(at < text_.size() && text_[at] == '(', "load_npy: malformed shape in '", path_, "': ", text_);
    Shape shape;
    for (at = skip_space(at + 1); at < text_.size() && text_[at] != ')'; at = skip_space(at)) {
      PL_CHECK(std::isdigit(static_cast<unsigned char>(text_[at])), "load_npy: malformed shape in '", path_,
               "': ", text_);
      int64_t dim = 0;
      while (at < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at]))) dim = dim * 10 + (text_[at++] - '0');
      shape.push_back(dim);
      at = skip_space(at);
      if (at < text_.size() && text_[at] == 'L') at = skip_space(at + 1);  // Python 2 long
      if (at < text_.size() && text_[at] == ',') ++at;
    }
    PL_CHECK(at < text_.size(), "load_npy: malformed shape in '", path_, "': ", text_);
    return shape;
  }

 private:
  size_t skip_space(size_t at) const {
    while (at < text_.size() && (text_[at] == ' ' || text_[at] == '\t')) ++at;
    return at;
  }
  std::string text_, path_;
};

}  // namespace

void save_npy(const std::string& path, const Array& a) {
  PL_CHECK(a.defined(), "save_npy: cannot save an undefined (none) array to '", path, "'");
  PL_CHECK(a.device().kind == Device::cpu, "save_npy: the array is on ", a.device().str(),
           "; copy it to the host before saving to '", path, "'");
  std::string dict = header_dict(a);
  // Pad with spaces and a newline so that the data starts on a 64-byte boundary.
  const size_t unpadded = kMagicLen + 2 + 2 + dict.size() + 1;
  dict += std::string((kAlign - unpadded % kAlign) % kAlign, ' ') + "\n";
  PL_CHECK(dict.size() <= 0xffff, "save_npy: header for shape ", shape_str(a.shape()), " is too long");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  PL_CHECK(out.good(), "save_npy: cannot open '", path, "' for writing");
  const char version_and_length[4] = {1, 0, static_cast<char>(dict.size() & 0xff), static_cast<char>(dict.size() >> 8)};
  out.write(kMagic, kMagicLen);
  out.write(version_and_length, 4);
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  out.write(static_cast<const char*>(a.data()), static_cast<std::streamsize>(a.nbytes()));
  out.flush();
  PL_CHECK(out.good(), "save_npy: writing '", path, "' failed");
}

Array load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PL_CHECK(in.good(), "load_npy: cannot open '", path, "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  PL_CHECK(bytes.size() >= kMagicLen + 2 && bytes.compare(0, kMagicLen, kMagic, kMagicLen) == 0,
           "load_npy: '", path, "' is not a .npy file (bad magic string)");
  const auto byte_at = [&](size_t i) { return static_cast<size_t>(static_cast<unsigned char>(bytes[i])); };
  const size_t major = byte_at(kMagicLen);
  PL_CHECK(major >= 1 && major <= 3, "load_npy: '", path, "' has unsupported format version ", major, ".",
           byte_at(kMagicLen + 1));
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t header_start = kMagicLen + 2 + length_bytes;
  PL_CHECK(bytes.size() >= header_start, "load_npy: '", path, "' is truncated (incomplete header)");
  size_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_len |= byte_at(kMagicLen + 2 + i) << (8 * i);
  PL_CHECK(bytes.size() >= header_start + header_len, "load_npy: '", path, "' is truncated (header of ",
           header_len, " bytes, file of ", bytes.size(), ")");
  const HeaderParser header(bytes.substr(header_start, header_len), path);
  const DType dtype = dtype_from_descriptor(header.string_value("descr"), path);
  PL_CHECK(!header.bool_value("fortran_order"), "load_npy: '", path,
           "' is stored in Fortran order; save a C-contiguous array (np.ascontiguousarray)");
  Array a(header.shape_value("shape"), dtype);
  const size_t data_start = header_start + header_len;
  PL_CHECK(bytes.size() - data_start >= a.nbytes(), "load_npy: '", path, "' is truncated: shape ",
           shape_str(a.shape()), " of ", dtype_name(dtype), " needs ", a.nbytes(), " bytes of data, found ",
           bytes.size() - data_start);
  if (a.nbytes() > 0) std::memcpy(a.data(), bytes.data() + data_start, a.nbytes());
  return a;
}

}  // namespace palladium
