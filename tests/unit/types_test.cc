// Names, parsers and DLPack conversions of the public value types.
#include <gtest/gtest.h>

#include "commx/error.h"
#include "commx/tensor.h"
#include "commx/types.h"

using namespace commx;

TEST(Types, ParseAndSize) {
  EXPECT_EQ(parse_dtype("bf16"), DataType::kBFloat16);
  EXPECT_EQ(parse_dtype("float"), DataType::kFloat32);
  EXPECT_EQ(dtype_size(DataType::kFloat64), 8u);
  EXPECT_EQ(dtype_size(DataType::kFloat8E5M2), 1u);
  EXPECT_THROW(parse_dtype("complex"), Error);
  EXPECT_EQ(parse_reduce_kind("avg"), ReduceKind::kAvg);
  EXPECT_EQ(Device::parse("cuda:3").index, 3);
  EXPECT_TRUE(Device::parse("cpu").is_cpu());
  EXPECT_THROW(Device::parse("tpu"), Error);
  EXPECT_FALSE(reduce_supported_on_host(ReduceKind::kBxor, DataType::kFloat32));
  EXPECT_TRUE(reduce_supported_on_host(ReduceKind::kBxor, DataType::kInt64));
  EXPECT_EQ(ReduceOp::premul_sum(2.5).factor, 2.5);
}

TEST(Types, DlpackRoundTrip) {
  float buf[12];
  Tensor t = make_tensor(buf, 12);
  DLTensor dl;
  int64_t shape;
  to_dlpack(t, &dl, &shape);
  Tensor back = from_dlpack(dl);
  EXPECT_EQ(back.data, buf);
  EXPECT_EQ(back.count, 12);
  EXPECT_EQ(back.dtype, DataType::kFloat32);
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto d = static_cast<DataType>(i);
    EXPECT_EQ(dtype_from_dlpack(dtype_to_dlpack(d)), d) << dtype_name(d);
  }
}

TEST(Types, DlpackRejectsStrided) {
  float buf[12];
  int64_t shape[2] = {3, 4};
  int64_t strides[2] = {1, 3};  // column-major
  DLTensor dl{buf, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, strides, 0};
  EXPECT_THROW(from_dlpack(dl), Error);
  int64_t good[2] = {4, 1};
  dl.strides = good;
  EXPECT_EQ(from_dlpack(dl).count, 12);
}
