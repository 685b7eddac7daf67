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
              CUDA_OK(
                  cudaMemcpy(dec_gpu.data(), d_out.at(misalign), n * es, cudaMemcpyDeviceToHost));
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

// The owner's steps of the low-precision all_reduce (rank-order FP32 sum, AVG, re-encode, the
// two-term residual, the final decode and conversion) give the host path's bits on the GPU.
TEST(LowpGpuCodec, AllReduceSliceStepsEqualHostSchedule) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16}) {
    const int size = 3, rank = 1;
    const int64_t n = 5003;
    CodecConfig cfg{Fp8Format::kE4M3, 256};
    Fp8Codec cpu(cfg);
    std::vector<std::vector<uint8_t>> in;
    for (int p = 0; p < size; ++p) in.push_back(make_input(dt, n, 256, 40 + p));
    const size_t eb = cpu.encoded_bytes(n);
    // Host: the schedule of lowp_collectives.cc.
    std::vector<std::vector<uint8_t>> enc(size, std::vector<uint8_t>(eb));
    for (int p = 0; p < size; ++p) cpu.encode(in[p].data(), dt, n, enc[p].data());
    std::vector<float> acc(n, 0.0f), own(n);
    to_float(in[rank].data(), dt, n, own.data());
    for (int p = 0; p < size; ++p) {
      if (p == rank) {
        for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] + own[i];
      } else {
        cpu.accumulate(acc.data(), enc[p].data(), n);
      }
    }
    for (auto& v : acc) v = v / static_cast<float>(size);
    std::vector<uint8_t> q1(eb), q2(eb);
    cpu.encode(acc.data(), DataType::kFloat32, n, q1.data());
    std::vector<float> r(n);
    cpu.decode(q1.data(), n, r.data(), DataType::kFloat32);
    for (int64_t i = 0; i < n; ++i) r[i] = std::isfinite(r[i]) ? acc[i] - r[i] : 0.0f;
    cpu.encode(r.data(), DataType::kFloat32, n, q2.data());
    std::vector<float> fin(n);
    cpu.decode(q1.data(), n, fin.data(), DataType::kFloat32);
    cpu.accumulate(fin.data(), q2.data(), n);
    std::vector<uint8_t> out_cpu(n * dtype_size(dt));
    from_float(fin.data(), n, out_cpu.data(), dt);

    // GPU: the same steps with the kernels.
    DevBuf d_own(in[rank].size()), d_acc(n * 4), d_r(n * 4), d_q1(eb), d_q2(eb), d_out(n * 4);
    std::vector<DevBuf*> d_enc;
    for (int p = 0; p < size; ++p) {
      d_enc.push_back(new DevBuf(eb));
      CUDA_OK(cudaMemcpy(d_enc[p]->p, enc[p].data(), eb, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaMemcpy(d_own.p, in[rank].data(), in[rank].size(), cudaMemcpyHostToDevice));
    float* a = static_cast<float*>(d_acc.p);
    CUDA_OK(cudaMemset(a, 0, n * 4));
    for (int p = 0; p < size; ++p) {
      if (p == rank) {
        CUDA_OK(gpu::add_own(a, d_own.p, dt, n, nullptr));
      } else {
        CUDA_OK(gpu::accumulate(a, d_enc[p]->at(0), n, cfg, nullptr));
      }
    }
    CUDA_OK(gpu::divide(a, n, static_cast<float>(size), nullptr));
    CUDA_OK(gpu::encode(a, DataType::kFloat32, n, d_q1.at(0), cfg, nullptr));
    CUDA_OK(gpu::residual(a, d_q1.at(0), n, cfg, static_cast<float*>(d_r.p), nullptr));
    CUDA_OK(gpu::encode(d_r.p, DataType::kFloat32, n, d_q2.at(0), cfg, nullptr));
    CUDA_OK(gpu::decode(d_q1.at(0), n, d_r.p, DataType::kFloat32, cfg, nullptr));
    CUDA_OK(gpu::accumulate(static_cast<float*>(d_r.p), d_q2.at(0), n, cfg, nullptr));
    CUDA_OK(gpu::convert(static_cast<float*>(d_r.p), n, d_out.p, dt, nullptr));
    std::vector<uint8_t> g1(eb), g2(eb), out_gpu(n * dtype_size(dt));
    CUDA_OK(cudaMemcpy(g1.data(), d_q1.p, eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(g2.data(), d_q2.p, eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(out_gpu.data(), d_out.p, out_gpu.size(), cudaMemcpyDeviceToHost));
    for (auto* b : d_enc) delete b;
    EXPECT_EQ(g1, q1) << dtype_name(dt);
    EXPECT_EQ(g2, q2) << dtype_name(dt);
    const size_t es = dtype_size(dt);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(same_value(out_cpu.data() + i * es, out_gpu.data() + i * es, dt)) << i;
  }
}
