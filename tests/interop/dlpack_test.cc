// DLPack exchange on the host: every dtype round-trips without a copy, deleters run exactly once
// and only when the last user is gone, and tensors Palladium cannot take are clear errors.
#include <gtest/gtest.h>

#include <dlpack/dlpack.h>

#include "palladium/dlpack.h"
#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;

namespace {

using palladium::test_support::error_message;

TEST(DLPack, EveryDtypeRoundTripsWithoutACopy) {
  for (pl::DType t : {pl::DType::bool_, pl::DType::int8, pl::DType::int16, pl::DType::int32, pl::DType::int64,
                      pl::DType::uint8, pl::DType::uint32, pl::DType::float16, pl::DType::bfloat16, pl::DType::float32,
                      pl::DType::float64}) {
    Array a = pl::random::normal(pl::random::key(1), {3, 5}).astype(t);
    DLManagedTensor* m = pl::to_dlpack(a);
    EXPECT_EQ(m->dl_tensor.data, a.data()) << pl::dtype_name(t);
    EXPECT_EQ(m->dl_tensor.ndim, 2);
    EXPECT_EQ(m->dl_tensor.shape[1], 5);
    EXPECT_EQ(m->dl_tensor.device.device_type, kDLCPU);
    Array b = pl::from_dlpack(m);
    EXPECT_EQ(b.dtype(), t);
    EXPECT_EQ(b.data(), a.data()) << pl::dtype_name(t);
    EXPECT_TRUE(pl::array_equal(b, a)) << pl::dtype_name(t);
  }
  Array bf = pl::ones({2}, pl::DType::bfloat16);
  DLManagedTensor* m = pl::to_dlpack(bf);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLBfloat);
  m->deleter(m);
}

TEST(DLPack, ImportedTensorsCallTheirDeleterOnceWhenTheLastArrayGoes) {
  static int deleted = 0;
  static float data[6] = {1, 2, 3, 4, 5, 6};
  static int64_t shape[2] = {2, 3};
  deleted = 0;
  auto* m = new DLManagedTensor{};
  m->dl_tensor.data = data;
  m->dl_tensor.device = {kDLCPU, 0};
  m->dl_tensor.ndim = 2;
  m->dl_tensor.dtype = {kDLFloat, 32, 1};
  m->dl_tensor.shape = shape;
  m->deleter = [](DLManagedTensor* self) {
    ++deleted;
    delete self;
  };
  {
    Array a = pl::from_dlpack(m);
    Array view = a.reshape({3, 2});
    a = Array();
    EXPECT_EQ(deleted, 0);
    EXPECT_EQ(view.at({2, 1}), 6.0);
    view.set(0, 10.0);  // writes go to the producer's memory
    EXPECT_EQ(data[0], 10.0f);
  }
  EXPECT_EQ(deleted, 1);
}

TEST(DLPack, StridedAndForeignTensorsAreErrors) {
  static float data[6] = {};
  static int64_t shape[2] = {2, 3};
  static int64_t column_major[2] = {1, 2};
  DLManagedTensor m{};
  m.dl_tensor.data = data;
  m.dl_tensor.device = {kDLCPU, 0};
  m.dl_tensor.ndim = 2;
  m.dl_tensor.dtype = {kDLFloat, 32, 1};
  m.dl_tensor.shape = shape;
  m.dl_tensor.strides = column_major;
  EXPECT_NE(error_message([&] { pl::from_dlpack(&m); })
                .find("from_dlpack: a tensor of shape (2, 3) with strides (1, 2) is not compact row-major"),
            std::string::npos);
  m.dl_tensor.strides = nullptr;
  m.dl_tensor.dtype = {kDLComplex, 64, 1};
  EXPECT_NE(error_message([&] { pl::from_dlpack(&m); }).find("has no Palladium dtype"), std::string::npos);
  m.dl_tensor.dtype = {kDLFloat, 32, 1};
  m.dl_tensor.device = {kDLVulkan, 0};
  EXPECT_NE(error_message([&] { pl::from_dlpack(&m); }).find("is not the host or CUDA"), std::string::npos);
  EXPECT_NE(error_message([&] { pl::to_dlpack(Array()); }).find("to_dlpack: the array is undefined"), std::string::npos);
}

}  // namespace
