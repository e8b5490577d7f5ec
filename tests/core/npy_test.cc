// .npy files: round trips for every dtype, byte-exact agreement with files NumPy wrote (fixtures in
// tests/core/data, made by make_fixtures.py there), and clear errors for what is not supported.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "palladium/npy.h"
#include "palladium/random.h"
#include "tests/support/test_support.h"

namespace palladium {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using test_support::error_message;

std::string fixture(const std::string& name) { return std::string(PL_SOURCE_DIR) + "/tests/core/data/" + name; }

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("palladium_npy_" + name)).string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(Npy, RoundTripEveryDType) {
  const DType all[] = {bool_, i8, i16, i32, i64, u8, u32, f16, bf16, f32, f64};
  for (DType t : all) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{7}, Shape{3, 5}, Shape{2, 3, 4}}) {
      Array a = random::uniform(random::key(1), shape, f64, -100, 100).astype(t);
      const std::string path = temp_path(std::string(dtype_name(t)) + ".npy");
      save_npy(path, a);
      Array b = load_npy(path);
      EXPECT_EQ(b.dtype(), t);
      EXPECT_EQ(b.shape(), shape) << dtype_name(t);
      ASSERT_EQ(b.nbytes(), a.nbytes());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << dtype_name(t) << " " << shape_str(shape);
      // The data starts on a 64-byte boundary, as NumPy writes it.
      EXPECT_EQ((read_bytes(path).size() - a.nbytes()) % 64, 0u);
    }
  }
}

TEST(Npy, ReadsWhatNumPyWrote) {
  Array f = load_npy(fixture("f32_2x3.npy"));
  EXPECT_EQ(f.dtype(), f32);
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_THAT(f.to_doubles(), ElementsAre(0, 0.25, 0.5, 0.75, 1.0, 1.25));
  Array i = load_npy(fixture("i64_4.npy"));
  EXPECT_THAT(i.to_vector<int64_t>(), ElementsAre(-(int64_t{1} << 40), -1, 0, int64_t{1} << 62));
  Array h = load_npy(fixture("f16_5.npy"));
  EXPECT_EQ(h.dtype(), f16);
  EXPECT_THAT(h.to_doubles(), ElementsAre(1.0, -2.5, 65504.0, 0x1p-24, INFINITY));
  Array b = load_npy(fixture("bool_2x2.npy"));
  EXPECT_EQ(b.dtype(), bool_);
  EXPECT_THAT(b.to_vector<bool>(), ElementsAre(true, false, false, true));
  Array bf = load_npy(fixture("bf16_3.npy"));  // ml_dtypes writes '<V2'
  EXPECT_EQ(bf.dtype(), bf16);
  EXPECT_THAT(bf.to_doubles(), ElementsAre(1.0, -0.5, 3.140625));
  Array s = load_npy(fixture("u8_scalar.npy"));
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.get_int(0), 200);
  Array v2 = load_npy(fixture("i32_v2.npy"));  // format version 2.0
  EXPECT_THAT(v2.to_vector<int32_t>(), ElementsAre(7, -8, 9));
}

TEST(Npy, WritesTheSameBytesAsNumPy) {
  const std::string path = temp_path("same_bytes.npy");
  Array a = zeros({2, 3});
  for (int64_t i = 0; i < 6; ++i) a.set(i, 0.25 * static_cast<double>(i));
  save_npy(path, a);
  EXPECT_EQ(read_bytes(path), read_bytes(fixture("f32_2x3.npy")));
  save_npy(path, array({1.0, -0.5, 3.140625}, bf16));
  EXPECT_EQ(read_bytes(path), read_bytes(fixture("bf16_3.npy")));
  save_npy(path, full({}, 200, u8));
  EXPECT_EQ(read_bytes(path), read_bytes(fixture("u8_scalar.npy")));
}

TEST(Npy, ReadsVoidBFloat16WithEitherByteOrderMark) {
  std::string bytes = read_bytes(fixture("bf16_3.npy"));
  const size_t at = bytes.find("'<V2'");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = '|';
  const std::string path = temp_path("bf16_pipe.npy");
  write_bytes(path, bytes);
  Array a = load_npy(path);
  EXPECT_EQ(a.dtype(), bf16);
  EXPECT_THAT(a.to_doubles(), ElementsAre(1.0, -0.5, 3.140625));
}

TEST(Npy, ClearErrors) {
  EXPECT_THAT(error_message([] { load_npy(fixture("f64_fortran.npy")); }),
              AllOf(HasSubstr("load_npy"), HasSubstr("f64_fortran.npy"), HasSubstr("Fortran order")));
  EXPECT_THAT(error_message([] { load_npy(fixture("i32_bigendian.npy")); }),
              AllOf(HasSubstr("i32_bigendian.npy"), HasSubstr("big-endian"), HasSubstr(">i4")));
  EXPECT_THAT(error_message([] { load_npy(fixture("u16_unsupported.npy")); }),
              AllOf(HasSubstr("'<u2'"), HasSubstr("not supported")));
  EXPECT_THAT(error_message([] { load_npy(temp_path("does_not_exist.npy")); }),
              AllOf(HasSubstr("cannot open"), HasSubstr("does_not_exist.npy")));

  const std::string whole = read_bytes(fixture("i64_4.npy"));
  const std::string truncated_data = temp_path("truncated_data.npy");
  write_bytes(truncated_data, whole.substr(0, whole.size() - 3));
  EXPECT_THAT(error_message([&] { load_npy(truncated_data); }),
              AllOf(HasSubstr("truncated"), HasSubstr(truncated_data), HasSubstr("(4,)")));
  const std::string truncated_header = temp_path("truncated_header.npy");
  write_bytes(truncated_header, whole.substr(0, 40));
  EXPECT_THAT(error_message([&] { load_npy(truncated_header); }),
              AllOf(HasSubstr("truncated"), HasSubstr(truncated_header)));
  const std::string not_npy = temp_path("not_npy.npy");
  write_bytes(not_npy, "hello, world");
  EXPECT_THAT(error_message([&] { load_npy(not_npy); }), AllOf(HasSubstr("not a .npy file"), HasSubstr(not_npy)));

  EXPECT_THAT(error_message([] { save_npy(temp_path("none.npy"), Array()); }), HasSubstr("undefined"));
  EXPECT_THAT(error_message([] { save_npy("/nonexistent_dir/x.npy", arange(3)); }),
              AllOf(HasSubstr("save_npy"), HasSubstr("/nonexistent_dir/x.npy")));
}

}  // namespace
}  // namespace palladium
