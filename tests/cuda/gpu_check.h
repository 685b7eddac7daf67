// Checks used inside rank processes of the GPU tests: random data per rank, a CPU reference in
// double, device buffers, tolerance by dtype. Layer: tests.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "commx/comm.h"
#include "commx/numeric.h"
#include "cuda/gpu_ranks.h"

namespace commx::testing {

#define CU(EXPR)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (EXPR);                                                                  \
    RANK_CHECK(e_ == cudaSuccess, std::string(#EXPR) + ": " + cudaGetErrorString(e_));        \
  } while (0)

// A comm of `backend` for this rank on its GPU.
inline std::shared_ptr<Comm> make_comm(RankCtx& ctx, const std::string& backend,
                                       const std::string& name, Hints hints = {},
                                       Timeout timeout = std::chrono::seconds(60)) {
  CU(cudaSetDevice(ctx.device));
  CommOptions o;
  o.store = ctx.store;
  o.rank = ctx.rank;
  o.size = ctx.world;
  o.timeout = timeout;
  o.hints = std::move(hints);
  return Comm::create(backend, Device::cuda(ctx.device), name, o);
}

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { CU(cudaMalloc(&p, bytes < 256 ? 256 : bytes)); }
  ~DevBuf() { cudaFree(p); }
  char* c() const { return static_cast<char*>(p); }
};

inline double decode1(DataType t, const uint8_t* p) {
  switch (t) {
    case DataType::kFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case DataType::kFloat64: { double v; std::memcpy(&v, p, 8); return v; }
    case DataType::kFloat16: { uint16_t v; std::memcpy(&v, p, 2); return f16_to_float(v); }
    case DataType::kBFloat16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_float(v); }
    case DataType::kInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DataType::kInt64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    default: return *p;
  }
}

inline void encode1(DataType t, double d, uint8_t* p) {
  switch (t) {
    case DataType::kFloat32: { float v = static_cast<float>(d); std::memcpy(p, &v, 4); break; }
    case DataType::kFloat64: std::memcpy(p, &d, 8); break;
    case DataType::kFloat16: { uint16_t v = float_to_f16(static_cast<float>(d)); std::memcpy(p, &v, 2); break; }
    case DataType::kBFloat16: { uint16_t v = float_to_bf16(static_cast<float>(d)); std::memcpy(p, &v, 2); break; }
    case DataType::kInt32: { int32_t v = static_cast<int32_t>(d); std::memcpy(p, &v, 4); break; }
    case DataType::kInt64: { int64_t v = static_cast<int64_t>(d); std::memcpy(p, &v, 8); break; }
    default: *p = static_cast<uint8_t>(d); break;
  }
}

// Values exactly representable in `t`, drawn for (seed, rank); small and near 1 for products.
inline std::vector<double> gen(DataType t, int64_t n, uint64_t seed, int rank, ReduceKind k) {
  std::mt19937_64 rng(seed * 1000003 + rank * 7919 + 17);
  std::uniform_real_distribution<double> u(-4, 4), pr(0.6, 1.6);
  std::uniform_int_distribution<int> ui(-100, 100), up(-2, 2);
  std::vector<double> v(n);
  std::vector<uint8_t> tmp(8);
  bool integer = t == DataType::kInt32 || t == DataType::kInt64 || t == DataType::kUInt8;
  for (auto& x : v) {
    double d = integer ? (k == ReduceKind::kProduct ? up(rng) : ui(rng))
                       : (k == ReduceKind::kProduct ? pr(rng) : u(rng));
    encode1(t, d, tmp.data());
    x = decode1(t, tmp.data());
  }
  return v;
}

// gen for every rank 0..world-1.
inline std::vector<std::vector<double>> gen_all(DataType t, int64_t n, uint64_t seed, int world,
                                                ReduceKind k) {
  std::vector<std::vector<double>> v;
  for (int r = 0; r < world; ++r) v.push_back(gen(t, n, seed, r, k));
  return v;
}

inline std::vector<uint8_t> encode(DataType t, const std::vector<double>& v) {
  std::vector<uint8_t> b(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) encode1(t, v[i], b.data() + i * dtype_size(t));
  return b;
}

inline std::vector<double> decode(DataType t, const std::vector<uint8_t>& b) {
  std::vector<double> v(b.size() / dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = decode1(t, b.data() + i * dtype_size(t));
  return v;
}

inline void to_dev(void* dst, const std::vector<uint8_t>& b) {
  cudaError_t e = cudaMemcpy(dst, b.data(), b.size(), cudaMemcpyHostToDevice);
  RANK_CHECK(e == cudaSuccess, std::string("cudaMemcpy of ") + std::to_string(b.size()) +
                                   " bytes to the device: " + cudaGetErrorName(e) + ": " +
                                   cudaGetErrorString(e));
}
inline std::vector<uint8_t> from_dev(const void* src, size_t bytes) {
  std::vector<uint8_t> b(bytes);
  CU(cudaMemcpy(b.data(), src, bytes, cudaMemcpyDeviceToHost));
  return b;
}

// What `issue()` enqueues on `s`, captured (this thread's capture mode) into an executable graph.
template <typename F>
cudaGraphExec_t capture_graph(cudaStream_t s, F&& issue) {
  cudaGraph_t g;
  cudaGraphExec_t exec = nullptr;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  issue();
  CU(cudaStreamEndCapture(s, &g));
  CU(cudaGraphInstantiate(&exec, g, 0));
  cudaGraphDestroy(g);
  return exec;
}

inline double fold(ReduceOp op, const std::vector<double>& xs, int world) {
  double acc = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) {
    switch (op.kind) {
      case ReduceKind::kProduct: acc *= xs[i]; break;
      case ReduceKind::kMin: acc = std::min(acc, xs[i]); break;
      case ReduceKind::kMax: acc = std::max(acc, xs[i]); break;
      default: acc += xs[i]; break;
    }
  }
  if (op.kind == ReduceKind::kAvg) acc /= world;
  if (op.kind == ReduceKind::kPremulSum) acc *= op.factor;
  return acc;
}

inline double rel_tol(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 2e-6;
    case DataType::kFloat64: return 1e-13;
    case DataType::kFloat16: return 2e-3;
    case DataType::kBFloat16: return 1.6e-2;
    default: return 0;
  }
}

// Compares got[i] with ref[i]; `scale[i]` is the sum of |contributions| (bounds rounding).
inline void expect_close(DataType t, const std::vector<double>& got, const std::vector<double>& ref,
                         const std::vector<double>& scale, const std::string& what) {
  RANK_CHECK(got.size() == ref.size(), what + ": size mismatch");
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = rel_tol(t) * (scale.empty() ? std::fabs(ref[i]) : scale[i]) + (rel_tol(t) ? 1e-30 : 0);
    if (!(std::fabs(got[i] - ref[i]) <= tol))
      RANK_CHECK(false, what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                            ", expected " + std::to_string(ref[i]));
  }
}

}  // namespace commx::testing
