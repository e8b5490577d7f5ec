// Array storage, element access, reshape/astype/copy and the creation functions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>

#include "palladium/array.h"
#include "tests/support/test_support.h"

namespace palladium {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using test_support::error_message;

TEST(Device, Str) {
  EXPECT_EQ(Device{}.str(), "cpu");
  EXPECT_EQ((Device{Device::cuda, 0}.str()), "cuda:0");
  EXPECT_EQ((Device{Device::cuda, 3}.str()), "cuda:3");
}

TEST(Array, NoneArray) {
  Array none;
  EXPECT_FALSE(none.defined());
  EXPECT_FALSE(static_cast<bool>(none));
  EXPECT_EQ(none.size(), 0);
  EXPECT_EQ(none.str(), "None");
  EXPECT_THAT(error_message([&] { none.data(); }), HasSubstr("undefined"));
}

TEST(Array, AllocationIsAlignedAndSized) {
  for (int64_t n : {0, 1, 3, 100, 1000}) {
    Array a({n, 3}, f16);
    EXPECT_TRUE(a.defined());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    EXPECT_EQ(a.size(), n * 3);
    EXPECT_EQ(a.nbytes(), static_cast<size_t>(n * 3 * 2));
    EXPECT_EQ(a.device(), Device{});
  }
  Array scalar({}, f64);
  EXPECT_EQ(scalar.size(), 1);
  EXPECT_EQ(scalar.ndim(), 0);
  EXPECT_THAT(error_message([] { Array({2, -3}, f32); }), HasSubstr("negative dimension in shape (2, -3)"));
  // Sizes that overflow are errors, not arrays (zeros({2^40, 2^40}) once returned one).
  EXPECT_THAT(error_message([] { palladium::zeros({int64_t{1} << 40, int64_t{1} << 40}); }),
              HasSubstr("shape (1099511627776, 1099511627776) has more elements than a 64-bit count holds"));
  EXPECT_THAT(error_message([] { Array({int64_t{1} << 40, int64_t{1} << 21}, f32); }),
              HasSubstr("Array: shape (1099511627776, 2097152) of float32 needs more bytes than memory can address"));
}

TEST(Array, StorageCheckedAndFreed) {
  static int freed = 0;
  {
    auto storage = std::make_shared<Storage>();
    storage->ptr = new float[4];
    storage->nbytes = 16;
    storage->free_fn = [](void* p) { delete[] static_cast<float*>(p); ++freed; };
    Array a({4}, f32, storage);
    EXPECT_EQ(a.storage().get(), storage.get());
    EXPECT_THAT(error_message([&] { Array({5}, f32, storage); }),
                AllOf(HasSubstr("16 bytes"), HasSubstr("(5,)"), HasSubstr("float32")));
  }
  EXPECT_EQ(freed, 1);
}

TEST(Array, ElementAccess) {
  Array a = arange(6).reshape({2, 3});
  EXPECT_EQ(a.get(4), 4.0);
  EXPECT_EQ(a.get_int(5), 5);
  EXPECT_EQ(a.at({1, 2}), 5.0);
  EXPECT_EQ(a.at({-1, 0}), 3.0);
  a.set(0, 7.9);
  EXPECT_EQ(a.get_int(0), 7);
  EXPECT_EQ(a.data_as<int32_t>()[0], 7);
  EXPECT_THAT(error_message([&] { a.get(6); }), AllOf(HasSubstr("Array::get"), HasSubstr("(2, 3)")));
  EXPECT_THAT(error_message([&] { a.at({2, 0}); }), AllOf(HasSubstr("index 2"), HasSubstr("axis 0")));
  EXPECT_THAT(error_message([&] { a.at({1}); }), HasSubstr("1 indices for an array of shape (2, 3)"));
  EXPECT_THAT(error_message([&] { a.data_as<float>(); }),
              AllOf(HasSubstr("float32"), HasSubstr("int32")));
}

TEST(Array, ReshapeSharesAndInfers) {
  Array a = arange(24);
  Array b = a.reshape({2, -1, 4});
  EXPECT_EQ(b.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(b.storage(), a.storage());
  b.set(0, 100);
  EXPECT_EQ(a.get(0), 100);
  EXPECT_EQ(a.reshape({24, 1}).shape(), (Shape{24, 1}));
  EXPECT_EQ(zeros({0, 5}).reshape({-1, 5}).shape(), (Shape{0, 5}));
  EXPECT_EQ(full({}, 3.0).reshape({1, 1}).shape(), (Shape{1, 1}));
  EXPECT_THAT(error_message([&] { a.reshape({5, -1}); }),
              AllOf(HasSubstr("reshape"), HasSubstr("(24,)"), HasSubstr("(5, -1)")));
  EXPECT_THAT(error_message([&] { a.reshape({5, 5}); }), AllOf(HasSubstr("(24,)"), HasSubstr("(5, 5)")));
  EXPECT_THAT(error_message([&] { a.reshape({-1, -1}); }), HasSubstr("only infer one dimension"));
}

TEST(Array, CopyIsIndependent) {
  Array a = arange(4);
  Array c = a.copy();
  EXPECT_NE(c.storage(), a.storage());
  c.set(0, 9);
  EXPECT_EQ(a.get(0), 0);
  EXPECT_EQ(c.get(0), 9);
}

TEST(Array, Astype) {
  Array f = array({-1.7, 0.5, 2.5, 300.0});
  EXPECT_THAT(f.astype(i32).to_vector<int32_t>(), ElementsAre(-1, 0, 2, 300));
  EXPECT_THAT(f.astype(u8).to_vector<uint8_t>(), ElementsAre(255, 0, 2, 44));
  EXPECT_THAT(f.astype(bool_).to_vector<bool>(), ElementsAre(true, true, true, true));
  EXPECT_THAT(f.astype(f16).to_doubles(), ElementsAre(-1.7001953125, 0.5, 2.5, 300.0));
  Array big = from_vector<int64_t>({(int64_t{1} << 62) + 1, -5});
  EXPECT_THAT(big.astype(i64).to_vector<int64_t>(), ElementsAre((int64_t{1} << 62) + 1, -5));
  EXPECT_THAT(big.astype(i32).to_vector<int32_t>(), ElementsAre(1, -5));
  EXPECT_THAT(array({0, 1, 2}, bool_).astype(f32).to_vector<float>(), ElementsAre(0.0f, 1.0f, 1.0f));
  Array same = f.astype(f32);
  EXPECT_NE(same.storage(), f.storage());
}

TEST(Creation, ZerosOnesFull) {
  EXPECT_THAT(zeros({3}, i64).to_vector<int64_t>(), ElementsAre(0, 0, 0));
  EXPECT_THAT(ones({2}, bf16).to_doubles(), ElementsAre(1.0, 1.0));
  EXPECT_THAT(full({2, 2}, 2.5, f16).to_doubles(), ElementsAre(2.5, 2.5, 2.5, 2.5));
  EXPECT_THAT(full({2}, -1, u8).to_vector<uint8_t>(), ElementsAre(255, 255));
  EXPECT_EQ(zeros({4, 5}).dtype(), f32);
  EXPECT_EQ(zeros({4, 5}).shape(), (Shape{4, 5}));
}

TEST(Creation, Arange) {
  EXPECT_THAT(arange(5).to_vector<int32_t>(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(arange(5).dtype(), i32);
  EXPECT_THAT(arange(2, 11, 3).to_vector<int32_t>(), ElementsAre(2, 5, 8));
  EXPECT_THAT(arange(5, 0, -2).to_vector<int32_t>(), ElementsAre(5, 3, 1));
  EXPECT_EQ(arange(3, 3).size(), 0);
  EXPECT_EQ(arange(3, 1).size(), 0);
  EXPECT_THAT(arange(3, f32).to_vector<float>(), ElementsAre(0.0f, 1.0f, 2.0f));
  EXPECT_THAT(error_message([] { arange(0, 5, 0); }), HasSubstr("arange: step must not be zero"));
}

TEST(Creation, Linspace) {
  EXPECT_THAT(linspace(0, 1, 5).to_vector<float>(), ElementsAre(0.0f, 0.25f, 0.5f, 0.75f, 1.0f));
  EXPECT_THAT(linspace(2, 3, 1, f64).to_doubles(), ElementsAre(2.0));
  EXPECT_EQ(linspace(0, 1, 0).size(), 0);
  // NumPy: np.linspace(0, 1, 7)[5] == 0.8333333333333333 (start + i * step in float64).
  EXPECT_EQ(linspace(0, 1, 7, f64).get(5), 0.8333333333333333);
  EXPECT_EQ(linspace(0, 1, 7, f64).get(6), 1.0);
}

TEST(Creation, FromLists) {
  Array a = array({1.5, 2.5});
  EXPECT_EQ(a.dtype(), f32);
  EXPECT_EQ(a.shape(), (Shape{2}));
  Array b = array({1, 2, 3});
  EXPECT_EQ(b.dtype(), i32);
  EXPECT_THAT(array({1, -1}, u32).to_vector<uint32_t>(), ElementsAre(1u, 4294967295u));
  Array c = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(c.at({1, 0}), 4.0);
  EXPECT_THAT(error_message([] { from_vector<float>({1, 2, 3}, {2, 2}); }),
              AllOf(HasSubstr("from_vector"), HasSubstr("(2, 2)")));
  EXPECT_THAT(from_vector<bool>({true, false}).to_vector<bool>(), ElementsAre(true, false));
}

TEST(Array, StreamsStr) {
  std::ostringstream os;
  os << arange(3);
  EXPECT_EQ(os.str(), "[0 1 2]");
}

}  // namespace
}  // namespace palladium
