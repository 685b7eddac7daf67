// The GPU sweep of commx-bench (see sweep.h): per backend, each op timed with CUDA events over
// batches of back-to-back ops (median of --reps batches), eager or captured in a CUDA graph, after
// one checked op (#wrong) or, for the FP8 variants, the error against float64. Compiled only when
// the CUDA toolkit is found. Layer: tools/bench.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "commx/comm.h"
#include "commx/error.h"
#include "core/bootstrap.h"
#include "core/env.h"
#include "cuda_check.h"
#include "sweep.h"
#include "sweep_data.h"
#include "sweep_report.h"

namespace commx::bench {
namespace {

#define CK(X) cuda_check((X), #X)

// Busy-waits `us` microseconds on the host (a sleep would oversleep at this scale).
void host_spin_us(double us) {
  if (us <= 0) return;
  auto end = std::chrono::steady_clock::now() +
             std::chrono::nanoseconds(static_cast<int64_t>(us * 1e3));
  while (std::chrono::steady_clock::now() < end) {
  }
}

class SweepRunner {
 public:
  SweepRunner(Comm& c, int rank, int world, int dev, const SweepOptions& o, const SweepBackend& b)
      : c_(c), rank_(rank), world_(world), dev_(dev), o_(o), b_(b) {
    CK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
  }
  ~SweepRunner() { cudaStreamDestroy(s_); }

  SweepRow measure(const std::string& op, DataType t, uint64_t bytes, const std::string& mode) {
    size_t es = dtype_size(t);
    uint64_t unit = es * world_;
    bytes = std::max<uint64_t>(bytes / unit * unit, unit);
    int64_t n = bytes / es;
    // Native FP8 moves 1-byte elements; everything is still counted in the input dtype's bytes.
    const uint64_t dev_bytes = b_.native_fp8() ? static_cast<uint64_t>(n) : bytes;
    void *in, *out, *pristine;
    CK(cudaMalloc(&in, dev_bytes));
    CK(cudaMalloc(&out, dev_bytes));
    CK(cudaMalloc(&pristine, dev_bytes));
    // Correctness: one op of a known pattern (#wrong), or for the low-precision variants the
    // error on random data against float64 (#wrong counts a commx error above 4e-2).
    int64_t wrong = 0;
    double error = -1;
    if (op == "all_reduce" && bytes <= o_.error_max) error = measure_error(t, n, in);
    if (b_.lowp()) {
      if (b_.lowp_commx() && error > 4e-2) wrong = n;
      CK(cudaMemcpy(pristine, to_input_bytes(normal_data(n, rank_), t, b_.native_fp8()).data(),
                    dev_bytes, cudaMemcpyHostToDevice));
    } else {
      wrong = check(op, t, bytes, in, out);
      auto pat = sweep_pattern(t, n, rank_, 1e-12);
      CK(cudaMemcpy(pristine, pat.data(), bytes, cudaMemcpyHostToDevice));
    }
    const int batch = bytes >= (64u << 20) ? 5 : (bytes >= (1u << 20) ? 10 : 20);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> samples;
    cudaGraphExec_t exec = nullptr;
    int per_launch = 1;
    if (mode == "graph") {
      per_launch = std::min(o_.graph_ops, batch);
      CK(cudaMemcpyAsync(in, pristine, dev_bytes, cudaMemcpyDeviceToDevice, s_));
      issue(op, t, bytes, in, out);  // warm-up outside capture
      sync_all();
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < per_launch; ++i) issue(op, t, bytes, in, out);
      CK(cudaStreamEndCapture(s_, &g));
      CK(cudaGraphInstantiate(&exec, g, 0));
      cudaGraphDestroy(g);
    }
    for (int rep = -1; rep < o_.reps; ++rep) {  // rep -1: warm-up
      CK(cudaMemcpyAsync(in, pristine, dev_bytes, cudaMemcpyDeviceToDevice, s_));
      sync_all();
      CK(cudaEventRecord(e0, s_));
      int ops = 0;
      if (mode == "graph") {
        for (; ops + per_launch <= batch; ops += per_launch) CK(cudaGraphLaunch(exec, s_));
      } else {
        for (; ops < batch; ++ops) {
          host_spin_us(o_.gap_us + (rank_ == world_ - 1 ? o_.skew_us : 0));
          issue(op, t, bytes, in, out);
        }
      }
      CK(cudaEventRecord(e1, s_));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (rep >= 0) samples.push_back(ms * 1000.0 / ops);
    }
    if (exec) cudaGraphExecDestroy(exec);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(in);
    cudaFree(out);
    cudaFree(pristine);
    std::sort(samples.begin(), samples.end());
    SweepRow r{b_.text, op, dtype_name(t), mode, bytes};
    r.us = samples[samples.size() / 2];
    r.algbw = bytes / (r.us * 1e-6) / 1e9;
    r.busbw = r.algbw * sweep_bus_factor(op, world_);
    r.wrong = wrong;
    r.error = error;
    return r;
  }

 private:
  // Issues op once on tensors of `bytes` (the larger side).
  void issue(const std::string& op, DataType t, uint64_t bytes, void* in, void* out) {
    int64_t n = static_cast<int64_t>(bytes / dtype_size(t));
    Device d = Device::cuda(dev_);
    OpOptions o;
    if (!o_.algo.empty()) o.hints["algorithm"] = o_.algo;
    if (op == "all_reduce") {
      c_.all_reduce(Tensor(in, n, b_.native_fp8() ? DataType::kFloat8E4M3 : t, d, s_),
                    ReduceOp::SUM, false, o);
    } else if (op == "all_gather") {
      c_.all_gather_single(Tensor(out, n, t, d, s_), Tensor(in, n / world_, t, d, s_), false, o);
    } else if (op == "reduce_scatter") {
      c_.reduce_scatter_single(Tensor(out, n / world_, t, d, s_), Tensor(in, n, t, d, s_),
                               ReduceOp::SUM, false, o);
    } else if (op == "all_to_all") {
      c_.all_to_all_single(Tensor(out, n, t, d, s_), Tensor(in, n, t, d, s_), false, o);
    }
  }

  void sync_all() {
    CK(cudaStreamSynchronize(s_));
    c_.barrier();
    CK(cudaDeviceSynchronize());
  }

  // One all_reduce of random normal data, its relative error against float64.
  double measure_error(DataType t, int64_t n, void* in) {
    const bool f8 = b_.native_fp8();
    CK(cudaMemcpy(in, to_input_bytes(normal_data(n, rank_), t, f8).data(),
                  f8 ? n : n * dtype_size(t), cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    issue("all_reduce", t, n * dtype_size(t), in, nullptr);
    CK(cudaStreamSynchronize(s_));
    std::vector<uint8_t> got(f8 ? n : n * dtype_size(t));
    CK(cudaMemcpy(got.data(), in, got.size(), cudaMemcpyDeviceToHost));
    return relative_error(t, f8, got.data(), n, world_);
  }

  // One op on the base-1 pattern; the elements off the host reference.
  int64_t check(const std::string& op, DataType t, uint64_t bytes, void* in, void* out) {
    int64_t n = bytes / dtype_size(t);
    auto mine = sweep_pattern(t, n, rank_, 1.0);
    CK(cudaMemcpy(in, mine.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(out, 0xff, bytes));
    CK(cudaDeviceSynchronize());  // the op's stream does not wait for the default stream
    issue(op, t, bytes, in, out);
    CK(cudaStreamSynchronize(s_));
    std::vector<uint8_t> got(bytes);
    CK(cudaMemcpy(got.data(), op == "all_reduce" ? in : out, bytes, cudaMemcpyDeviceToHost));
    return count_wrong(op, t, got.data(), n, rank_, world_);
  }

  Comm& c_;
  int rank_, world_, dev_;
  const SweepOptions& o_;
  SweepBackend b_;
  cudaStream_t s_;
};

double ms_since(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// Creates the backend's comm and reports its init cost as users see it: comm creation, then
// the first (tiny) all_reduce, which is where lazily initialised backends pay the rest. Null
// when the backend cannot be created here (noted by rank 0).
std::shared_ptr<Comm> create_comm(const SweepBackend& b, const RankInfo& ri, int dev,
                                  const std::shared_ptr<Store>& store) {
  CommOptions co;
  co.hints = sweep_backend_hints(b);
  co.store = store;
  co.rank = ri.rank;
  co.size = ri.size;
  co.timeout = std::chrono::seconds(60);
  auto t_init = std::chrono::steady_clock::now();
  std::shared_ptr<Comm> c;
  try {
    c = Comm::create(b.backend, Device::cuda(dev), "bench_" + b.backend + "_" + b.variant, co);
  } catch (const std::exception& e) {
    if (ri.rank == 0) std::cerr << "skipping backend " << b.text << ": " << e.what() << "\n";
    return nullptr;
  }
  auto t_created = std::chrono::steady_clock::now();
  float* one = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&one), sizeof(float)));
  c->all_reduce(Tensor(one, 1, DataType::kFloat32, Device::cuda(dev)), ReduceOp::SUM);
  CK(cudaDeviceSynchronize());
  CK(cudaFree(one));
  auto t_first = std::chrono::steady_clock::now();
  if (ri.rank == 0)
    std::cout << sweep_init_line(b.text, ri.size, ms_since(t_init, t_created),
                                 ms_since(t_init, t_first));
  return c;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) std::cerr << "commx-bench: cannot write " << path << "\n";
  return static_cast<bool>(f);
}

}  // namespace

bool sweep_available() { return true; }

int run_sweep_rank(const SweepOptions& opts) {
  auto ri = rank_from_env();
  if (!ri) throw Error(ErrorCode::kInvalidArgument, "the GPU sweep found no rank in the environment");
  SweepOptions o = opts;
  o.ranks = ri->size;
  int ngpu = 0;
  CK(cudaGetDeviceCount(&ngpu));
  if (ngpu == 0) throw Error(ErrorCode::kCuda, "commx-bench: the GPU sweep sees no GPU");
  const int dev = ri->local_rank % ngpu;
  CK(cudaSetDevice(dev));
  auto store = store_from_env(*ri, std::chrono::seconds(120));
  std::vector<SweepRow> rows;
  for (const auto& text : o.backends) {
    const SweepBackend b = parse_sweep_backend(text);
    auto c = create_comm(b, *ri, dev, store);
    if (!c) continue;
    SweepRunner run(*c, ri->rank, ri->size, dev, o, b);
    for (const auto& op : o.ops)
      for (const auto& dt : o.dtypes)
        for (const auto& mode : o.modes)
          for (uint64_t bytes : sweep_sizes(o)) {
            if (b.native_fp8() && op != "all_reduce") continue;  // NCCL's FP8: all_reduce only
            SweepRow r;
            try {
              r = run.measure(op, parse_dtype(dt), bytes, mode);
            } catch (const Error& e) {
              throw Error(e.code(), "comm bench_" + b.backend + "_" + b.variant + " (" + b.text +
                                        ") rank " + std::to_string(ri->rank) + ", " + op + " " +
                                        dt + " " + mode + " " + std::to_string(bytes) +
                                        " B: " + e.what());
            }
            rows.push_back(r);
            if (ri->rank == 0) std::cout << sweep_row_line(r) << std::flush;
          }
    c->finalize();
  }
  if (ri->rank != 0) return 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  bool ok = write_file(o.json, sweep_json(prop.name, o, rows));
  ok = write_file(o.md, sweep_markdown(prop.name, o, rows)) && ok;
  return ok ? 0 : 4;
}

}  // namespace commx::bench
