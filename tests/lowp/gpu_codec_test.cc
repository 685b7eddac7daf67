// GPU codec == CPU reference: the same scales and codes (bit for bit), the same decoded values
// and accumulations, the same counters, for every format, input dtype, rounding mode, block
// size, odd sizes, unaligned buffers, zero and NaN/Inf blocks. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "commx/numeric.h"
#include "lowp/cuda/fp8_codec_cuda.h"
#include "lowp/fp8_codec.h"

using namespace commx;
using namespace commx::lowp;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { cudaMalloc(&p, bytes + 64); }
  ~DevBuf() { cudaFree(p); }
  uint8_t* at(size_t off) { return static_cast<uint8_t*>(p) + off; }
};

// Host data of `dtype` with normal values, a zero block, a tiny block and NaN/Inf in one block.
std::vector<uint8_t> make_input(DataType dt, int64_t n, int64_t block, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<float> f(n);
  for (auto& v : f) v = nd(g);
  if (n > 3 * block) {
    for (int64_t i = block; i < 2 * block; ++i) f[i] = 0.0f;
    for (int64_t i = 2 * block; i < 3 * block; ++i) f[i] *= 1e-3f;
    f[5] = NAN;
    f[6] = INFINITY;
    f[7] = -INFINITY;
  }
  std::vector<uint8_t> out(n * dtype_size(dt));
  for (int64_t i = 0; i < n; ++i) {
    if (dt == DataType::kFloat32) {
      std::memcpy(out.data() + 4 * i, &f[i], 4);
    } else {
      uint16_t h = dt == DataType::kBFloat16 ? float_to_bf16(f[i]) : float_to_f16(f[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

bool same_value(const uint8_t* a, const uint8_t* b, DataType dt) {
  if (dt == DataType::kFloat32) {
    float x, y;
    std::memcpy(&x, a, 4);
    std::memcpy(&y, b, 4);
    return (std::isnan(x) && std::isnan(y)) || std::memcmp(a, b, 4) == 0;
  }
  uint16_t x, y;
  std::memcpy(&x, a, 2);
  std::memcpy(&y, b, 2);
  float fx = dt == DataType::kBFloat16 ? bf16_to_float(x) : f16_to_float(x);
  float fy = dt == DataType::kBFloat16 ? bf16_to_float(y) : f16_to_float(y);
  return (std::isnan(fx) && std::isnan(fy)) || x == y;  // NaN payloads may differ
}

}  // namespace

TEST(LowpGpuCodec, EncodeDecodeAccumulateEqualCpuBitForBit) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  int cases = 0;
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (bool sr : {false, true}) {
      for (int64_t block : {16, 128, 256, 4096}) {
        for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16}) {
          for (int64_t n : {1, 17, 1000, 3 * 4096 + 5, 100003}) {
            for (size_t misalign : {size_t{0}, size_t{4}}) {
              CodecConfig cfg{fmt, block, sr, 77};
              Fp8Codec cpu(cfg);
              SCOPED_TRACE(::testing::Message()
                           << fp8_format_name(fmt) << " sr " << sr << " block " << block << " "
                           << dtype_name(dt) << " n " << n << " misalign " << misalign);
              auto in = make_input(dt, n, block, static_cast<uint32_t>(n + block));
              const size_t eb = cpu.encoded_bytes(n);
              std::vector<uint8_t> enc_cpu(eb), enc_gpu(eb);
              CodecStats st_cpu;
              cpu.encode(in.data(), dt, n, enc_cpu.data(), &st_cpu, 3, 1000);

              DevBuf d_in(in.size()), d_enc(eb), d_out(n * 4), d_acc(n * 4), d_st(64);
              CUDA_OK(cudaMemcpy(d_in.at(misalign), in.data(), in.size(), cudaMemcpyHostToDevice));
              CUDA_OK(cudaMemset(d_st.p, 0, 64));
              auto* st = static_cast<unsigned long long*>(d_st.p);
              CUDA_OK(gpu::encode(d_in.at(misalign), dt, n, d_enc.at(misalign), cfg, nullptr, st, 3,
                                  1000));
              CUDA_OK(cudaMemcpy(enc_gpu.data(), d_enc.at(misalign), eb, cudaMemcpyDeviceToHost));
              ASSERT_EQ(enc_gpu, enc_cpu);
              unsigned long long hst[gpu::kNumStats];
              CUDA_OK(cudaMemcpy(hst, st, sizeof(hst), cudaMemcpyDeviceToHost));
              CodecStats st_gpu;
              gpu::stats_from_device(hst, &st_gpu);
              EXPECT_EQ(st_gpu.elements, st_cpu.elements);
              EXPECT_EQ(st_gpu.underflow, st_cpu.underflow);
              EXPECT_EQ(st_gpu.saturated, st_cpu.saturated);
              EXPECT_EQ(st_gpu.nonfinite_values, st_cpu.nonfinite_values);
              EXPECT_EQ(st_gpu.nonfinite_blocks, st_cpu.nonfinite_blocks);

              // decode into the input dtype
              const size_t es = dtype_size(dt);
              std::vector<uint8_t> dec_cpu(n * es), dec_gpu(n * es);
              cpu.decode(enc_cpu.data(), n, dec_cpu.data(), dt);
              CUDA_OK(gpu::decode(d_enc.at(misalign), n, d_out.at(misalign), dt, cfg, nullptr));
              CUDA_OK(cudaMemcpy(dec_gpu.data(), d_out.at(misalign), n * es, cudaMemcpyDeviceToHost));
              for (int64_t i = 0; i < n; ++i)
                ASSERT_TRUE(same_value(dec_cpu.data() + i * es, dec_gpu.data() + i * es, dt)) << i;

              // accumulate onto a non-trivial accumulator
              std::vector<float> acc(n);
              for (int64_t i = 0; i < n; ++i) acc[i] = 0.25f * static_cast<float>(i % 13) - 1.0f;
              std::vector<float> acc_gpu(n);
              CUDA_OK(cudaMemcpy(d_acc.p, acc.data(), n * 4, cudaMemcpyHostToDevice));
              cpu.accumulate(acc.data(), enc_cpu.data(), n);
              CUDA_OK(gpu::accumulate(static_cast<float*>(d_acc.p), d_enc.at(misalign), n, cfg,
                                      nullptr));
              CUDA_OK(cudaMemcpy(acc_gpu.data(), d_acc.p, n * 4, cudaMemcpyDeviceToHost));
              for (int64_t i = 0; i < n; ++i)
                ASSERT_TRUE(same_value(reinterpret_cast<uint8_t*>(&acc[i]),
                                       reinterpret_cast<uint8_t*>(&acc_gpu[i]), DataType::kFloat32))
                    << i << " " << acc[i] << " vs " << acc_gpu[i];
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * 2 * 4 * 3 * 5 * 2);
}

TEST(LowpGpuCodec, RejectsBadArguments) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  CodecConfig bad{Fp8Format::kE4M3, 100};
  EXPECT_EQ(gpu::encode(nullptr, DataType::kFloat32, 16, nullptr, bad, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(gpu::encode(nullptr, DataType::kInt32, 16, nullptr, CodecConfig{}, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(gpu::decode(nullptr, 0, nullptr, DataType::kFloat32, CodecConfig{}, nullptr),
            cudaSuccess);
}
