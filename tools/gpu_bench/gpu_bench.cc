// commx-gpu-bench: side-by-side GPU collective timing of commx backends (cuda vs nccl) in one run,
// eager and CUDA-graph-captured, nccl-tests-style rows (time, algbw, busbw, #wrong), JSON and a
// markdown table. Stand-in until commx-bench takes GPU backends. Layer: tools.
// A backend may carry a variant: `cuda+fp8` / `cuda+fp8x2` run the low-precision collectives
// (FP8 on the wire, FP32 sums; x2: two-term gather), `nccl+fp8` runs NCCL's native FP8 all_reduce
// on the input cast to E4M3. busbw counts the input dtype's bytes for all of them; `--error`
// measures each variant's relative L2 error against a float64 reference on random normal data.
// Ranks are processes forked before any CUDA call (rank r on GPU r % GPUs), meeting through a
// commx TCP store the parent hosts on the loopback address.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "commx/comm.h"
#include "commx/numeric.h"
#include "commx/store.h"

using namespace commx;

namespace {

struct Args {
  int ranks = 2;
  std::vector<std::string> backends{"cuda", "nccl"};
  std::vector<std::string> dtypes{"bf16", "f32"};
  std::vector<std::string> ops{"all_reduce"};
  std::vector<std::string> modes{"eager", "graph"};
  uint64_t min_bytes = 8, max_bytes = 256ull << 20;
  int factor = 2;
  int reps = 7;           // median over this many batches
  int graph_ops = 20;     // ops captured per graph
  std::string json = "gpu_bench.json", md = "gpu_bench.md";
  std::string algo;       // cuda all_reduce algorithm hint (flat/tree), empty = auto
  uint64_t error_max = 0;  // --error: measure the error of all_reduce up to this size
  // Eager mode as a host-bound client issues: the last rank spins `skew_us` on the host before
  // each op (the ranks arrive apart), every rank `gap_us` (ops arrive with gaps between them).
  double skew_us = 0, gap_us = 0;
};

// Busy-waits `us` microseconds on the host (a sleep would oversleep at this scale).
void host_spin_us(double us) {
  if (us <= 0) return;
  auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(us * 1e3));
  while (std::chrono::steady_clock::now() < end) {
  }
}

// "backend[+variant]" of --backend.
struct Spec {
  std::string text, backend, variant;
  bool lowp() const { return variant == "fp8" || variant == "fp8x2"; }
  bool native_fp8() const { return backend == "nccl" && variant == "fp8"; }
  bool lowp_commx() const { return lowp() && !native_fp8(); }
};

Spec parse_spec(const std::string& s) {
  Spec sp{s, s, ""};
  if (auto plus = s.find('+'); plus != std::string::npos) {
    sp.backend = s.substr(0, plus);
    sp.variant = s.substr(plus + 1);
  }
  if (!sp.variant.empty() && !sp.lowp())
    throw std::runtime_error("unknown variant '" + sp.variant + "' in " + s + " (fp8, fp8x2)");
  if (sp.backend == "nccl" && sp.variant == "fp8x2")
    throw std::runtime_error("nccl+fp8x2 does not exist (nccl+fp8 is NCCL's native FP8)");
  return sp;
}

Hints spec_hints(const Spec& sp) {
  Hints h;
  if (!sp.lowp_commx()) return h;
  h["low_precision"] = "fp8e4m3";
  h["low_precision_min_bytes"] = "0";
  if (sp.variant == "fp8x2") h["low_precision_gather"] = "fp8x2";
  return h;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) if (!x.empty()) v.push_back(x);
  return v;
}

uint64_t parse_size(const std::string& s) {
  double v = std::stod(s);
  char u = s.back();
  if (u == 'K' || u == 'k') v *= 1024;
  if (u == 'M' || u == 'm') v *= 1024 * 1024;
  if (u == 'G' || u == 'g') v *= 1024.0 * 1024 * 1024;
  return static_cast<uint64_t>(v);
}

#define CK(X)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (X);                                                                       \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#X) + ": " + cudaGetErrorString(e_)); \
  } while (0)

struct Row {
  std::string backend, op, dtype, mode;
  uint64_t bytes;
  double us;
  double algbw, busbw;
  int64_t wrong;
  double error;  // relative L2 error against float64 (-1: not measured)
};

double bus_factor(const std::string& op, int w) {
  if (op == "all_reduce") return 2.0 * (w - 1) / w;
  return static_cast<double>(w - 1) / w;
}

// Fills n elements with small values that stay finite through ~50 in-place sums.
std::vector<uint8_t> pattern(DataType t, int64_t n, int rank, double base) {
  std::vector<uint8_t> b(n * dtype_size(t));
  for (int64_t i = 0; i < n; ++i) {
    float v = static_cast<float>(base * (1 + ((i * 7 + rank * 13) % 17)));
    if (t == DataType::kBFloat16) {
      uint16_t h = float_to_bf16(v);
      std::memcpy(&b[i * 2], &h, 2);
    } else {
      std::memcpy(&b[i * 4], &v, 4);
    }
  }
  return b;
}

double value(DataType t, const uint8_t* p) {
  if (t == DataType::kBFloat16) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_float(h);
  }
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// Random normal values of rank r for an op of n elements (splitmix64 + Box-Muller: fast enough
// to regenerate every rank's data for the reference).
std::vector<double> normal_data(int64_t n, int rank) {
  std::vector<double> v(n);
  uint64_t x = 0x9e3779b97f4a7c15ull * (rank + 1) + static_cast<uint64_t>(n);
  auto next = [&x] {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return ((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
  };
  for (int64_t i = 0; i + 1 < n; i += 2) {
    double u1 = std::max(next(), 1e-300), u2 = next();
    double r = std::sqrt(-2 * std::log(u1));
    v[i] = r * std::cos(6.283185307179586 * u2);
    v[i + 1] = r * std::sin(6.283185307179586 * u2);
  }
  if (n % 2) v[n - 1] = 0.5;
  return v;
}

// Values as the op's input dtype (native FP8: the E4M3 cast of the bf16/f32 value).
std::vector<uint8_t> to_bytes(const std::vector<double>& v, DataType t, bool fp8) {
  const size_t es = fp8 ? 1 : dtype_size(t);
  std::vector<uint8_t> b(v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    float f = static_cast<float>(v[i]);
    if (t == DataType::kBFloat16) f = bf16_to_float(float_to_bf16(f));
    if (fp8) {
      b[i] = float_to_fp8e4m3(f);
    } else if (t == DataType::kBFloat16) {
      uint16_t h = float_to_bf16(f);
      std::memcpy(&b[i * 2], &h, 2);
    } else {
      std::memcpy(&b[i * 4], &f, 4);
    }
  }
  return b;
}

class Runner {
 public:
  Runner(Comm& c, int rank, int world, int dev, const Args& a, const Spec& sp)
      : c_(c), rank_(rank), world_(world), dev_(dev), a_(a), spec_(sp) {
    CK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
  }
  ~Runner() { cudaStreamDestroy(s_); }

  // Issues op on tensors of `bytes` (the larger side) once.
  void issue(const std::string& op, DataType t, uint64_t bytes, void* in, void* out) {
    int64_t n = static_cast<int64_t>(bytes / dtype_size(t));
    Device d = Device::cuda(dev_);
    OpOptions o;
    if (!a_.algo.empty()) o.hints["algorithm"] = a_.algo;
    if (op == "all_reduce") {
      c_.all_reduce(Tensor(in, n, spec_.native_fp8() ? DataType::kFloat8E4M3 : t, d, s_),
                    ReduceOp::SUM, false, o);
    } else if (op == "all_gather") {
      c_.all_gather_single(Tensor(out, n, t, d, s_), Tensor(in, n / world_, t, d, s_), false, o);
    } else if (op == "reduce_scatter") {
      c_.reduce_scatter_single(Tensor(out, n / world_, t, d, s_), Tensor(in, n, t, d, s_), ReduceOp::SUM, false, o);
    } else if (op == "all_to_all") {
      c_.all_to_all_single(Tensor(out, n, t, d, s_), Tensor(in, n, t, d, s_), false, o);
    }
  }

  void sync_all() {
    CK(cudaStreamSynchronize(s_));
    c_.barrier();
    CK(cudaDeviceSynchronize());
  }

  Row measure(const std::string& backend, const std::string& op, DataType t, uint64_t bytes,
              const std::string& mode) {
    size_t es = dtype_size(t);
    uint64_t unit = es * world_;
    bytes = std::max<uint64_t>(bytes / unit * unit, unit);
    int64_t n = bytes / es;
    // Native FP8 moves 1-byte elements; everything is still counted in the input dtype's bytes.
    const uint64_t dev_bytes = spec_.native_fp8() ? static_cast<uint64_t>(n) : bytes;
    void *in, *out, *pristine;
    CK(cudaMalloc(&in, dev_bytes));
    CK(cudaMalloc(&out, dev_bytes));
    CK(cudaMalloc(&pristine, dev_bytes));
    // Correctness: one op of a known pattern (#wrong), or for the low-precision variants the
    // error on random data against float64 (#wrong counts a commx error above 4e-2).
    int64_t wrong = 0;
    double error = -1;
    if (op == "all_reduce" && bytes <= a_.error_max) error = measure_error(t, n, in);
    if (spec_.lowp()) {
      if (spec_.lowp_commx() && error > 4e-2) wrong = n;
      CK(cudaMemcpy(pristine, to_bytes(normal_data(n, rank_), t, spec_.native_fp8()).data(),
                    dev_bytes, cudaMemcpyHostToDevice));
    } else {
      wrong = check(op, t, bytes, in, out);
      auto pat = pattern(t, n, rank_, 1e-12);
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
      per_launch = std::min(a_.graph_ops, batch);
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
    for (int rep = -1; rep < a_.reps; ++rep) {  // rep -1: warm-up
      CK(cudaMemcpyAsync(in, pristine, dev_bytes, cudaMemcpyDeviceToDevice, s_));
      sync_all();
      CK(cudaEventRecord(e0, s_));
      int ops = 0;
      if (mode == "graph") {
        for (; ops + per_launch <= batch; ops += per_launch) CK(cudaGraphLaunch(exec, s_));
      } else {
        for (; ops < batch; ++ops) {
          host_spin_us(a_.gap_us + (rank_ == world_ - 1 ? a_.skew_us : 0));
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
    double us = samples[samples.size() / 2];
    double algbw = bytes / (us * 1e-6) / 1e9;
    return Row{backend, op, dtype_name(t), mode, bytes, us, algbw, algbw * bus_factor(op, world_),
               wrong, error};
  }

 private:
  // One all_reduce of random normal data: ||out - ref|| / ||ref|| with ref summed in float64 from
  // every rank's input as given to the op (bf16-rounded; before the native FP8 cast).
  double measure_error(DataType t, int64_t n, void* in) {
    const bool f8 = spec_.native_fp8();
    CK(cudaMemcpy(in, to_bytes(normal_data(n, rank_), t, f8).data(), f8 ? n : n * dtype_size(t),
                  cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    issue("all_reduce", t, n * dtype_size(t), in, nullptr);
    CK(cudaStreamSynchronize(s_));
    std::vector<uint8_t> got(f8 ? n : n * dtype_size(t));
    CK(cudaMemcpy(got.data(), in, got.size(), cudaMemcpyDeviceToHost));
    std::vector<double> ref(n, 0.0);
    for (int r = 0; r < world_; ++r) {
      auto v = normal_data(n, r);
      for (int64_t i = 0; i < n; ++i) {
        float f = static_cast<float>(v[i]);
        ref[i] += t == DataType::kBFloat16 ? bf16_to_float(float_to_bf16(f)) : f;
      }
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      double g = f8 ? fp8e4m3_to_float(got[i]) : value(t, &got[i * dtype_size(t)]);
      num += (g - ref[i]) * (g - ref[i]);
      den += ref[i] * ref[i];
    }
    return std::sqrt(num / den);
  }

  int64_t check(const std::string& op, DataType t, uint64_t bytes, void* in, void* out) {
    size_t es = dtype_size(t);
    int64_t n = bytes / es;
    auto mine = pattern(t, n, rank_, 1.0);
    CK(cudaMemcpy(in, mine.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(out, 0xff, bytes));
    CK(cudaDeviceSynchronize());  // the op's stream does not wait for the default stream
    issue(op, t, bytes, in, out);
    CK(cudaStreamSynchronize(s_));
    std::vector<uint8_t> got(bytes);
    CK(cudaMemcpy(got.data(), op == "all_reduce" ? in : out, bytes, cudaMemcpyDeviceToHost));
    // Element i of rank r's pattern (base 1: small integers, exact in bf16), without
    // materialising every rank's buffer (1 GiB ops at 4-8 ranks).
    auto at = [](int r, int64_t i) { return 1.0 + static_cast<double>((i * 7 + r * 13) % 17); };
    int64_t wrong = 0, chunk = n / world_;
    int64_t m = op == "reduce_scatter" ? chunk : n;
    for (int64_t i = 0; i < m; ++i) {
      double ref = 0;
      if (op == "all_reduce") for (int r = 0; r < world_; ++r) ref += at(r, i);
      if (op == "reduce_scatter") for (int r = 0; r < world_; ++r) ref += at(r, rank_ * chunk + i);
      if (op == "all_gather") ref = at(static_cast<int>(i / chunk), i % chunk);
      if (op == "all_to_all") ref = at(static_cast<int>(i / chunk), rank_ * chunk + i % chunk);
      double g = value(t, &got[i * es]);
      if (std::fabs(g - ref) > 1e-2 * std::fabs(ref) + 1e-6) ++wrong;
    }
    return wrong;
  }

  Comm& c_;
  int rank_, world_, dev_;
  const Args& a_;
  Spec spec_;
  cudaStream_t s_;
};

int rank_main(int rank, const Args& a, uint16_t port) {
  int ngpu = 0;
  CK(cudaGetDeviceCount(&ngpu));
  int dev = rank % ngpu;
  CK(cudaSetDevice(dev));
  TCPStoreOptions so;
  so.port = port;
  so.timeout = std::chrono::seconds(120);
  auto store = make_tcp_store("127.0.0.1", so);
  std::vector<Row> rows;
  for (const auto& spec_text : a.backends) {
    const Spec spec = parse_spec(spec_text);
    const std::string& backend = spec.backend;
    CommOptions o;
    o.hints = spec_hints(spec);
    o.store = store;
    o.rank = rank;
    o.size = a.ranks;
    o.timeout = std::chrono::seconds(60);
    std::shared_ptr<Comm> c;
    // Init cost as users see it: comm creation, then the first (tiny) all_reduce, which is where
    // lazily initialised backends pay the rest.
    auto t_init = std::chrono::steady_clock::now();
    try {
      c = Comm::create(backend, Device::cuda(dev), "bench_" + spec.backend + "_" + spec.variant, o);
    } catch (const std::exception& e) {
      if (rank == 0) std::cerr << "skipping backend " << spec.text << ": " << e.what() << "\n";
      continue;
    }
    {
      auto t_created = std::chrono::steady_clock::now();
      float* one = nullptr;
      CK(cudaMalloc(reinterpret_cast<void**>(&one), sizeof(float)));
      c->all_reduce(Tensor(one, 1, DataType::kFloat32, Device::cuda(dev)), ReduceOp::SUM);
      CK(cudaDeviceSynchronize());
      CK(cudaFree(one));
      auto t_first = std::chrono::steady_clock::now();
      auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
      if (rank == 0)
        std::printf("init  %-5s ranks %d create %.1f ms, create + first all_reduce %.1f ms\n",
                    spec.text.c_str(), a.ranks, ms(t_created - t_init), ms(t_first - t_init));
    }
    Runner run(*c, rank, a.ranks, dev, a, spec);
    for (const auto& op : a.ops)
      for (const auto& dt : a.dtypes)
        for (const auto& mode : a.modes)
          for (uint64_t b = a.min_bytes; b <= a.max_bytes; b *= a.factor) {
            if (spec.native_fp8() && op != "all_reduce") continue;  // all_reduce only
            Row r = run.measure(spec.text, op, parse_dtype(dt), b, mode);
            rows.push_back(r);
            if (rank == 0)
              std::printf("%-5s %-14s %-5s %-5s %12lu %10.2f us %8.2f GB/s busbw %8.2f GB/s wrong %ld%s\n",
                          r.backend.c_str(), r.op.c_str(), r.dtype.c_str(), r.mode.c_str(),
                          (unsigned long)r.bytes, r.us, r.algbw, r.busbw, (long)r.wrong,
                          r.error >= 0 ? (" error " + std::to_string(r.error)).c_str() : "");
            std::fflush(stdout);
          }
    c->finalize();
  }
  if (rank != 0) return 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::ofstream js(a.json);
  js << "{\"device\": \"" << prop.name << "\", \"ranks\": " << a.ranks << ", \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    js << "  {\"backend\": \"" << r.backend << "\", \"op\": \"" << r.op << "\", \"dtype\": \"" << r.dtype
       << "\", \"mode\": \"" << r.mode << "\", \"bytes\": " << r.bytes << ", \"time_us\": " << r.us
       << ", \"algbw_gbps\": " << r.algbw << ", \"busbw_gbps\": " << r.busbw << ", \"wrong\": " << r.wrong;
    if (r.error >= 0) js << ", \"error\": " << r.error;
    if (r.mode == "eager") js << ", \"skew_us\": " << a.skew_us << ", \"gap_us\": " << a.gap_us;
    js << "}" << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  js << "]}\n";
  // Markdown: cuda vs nccl side by side.
  std::ofstream md(a.md);
  md << "Device: " << prop.name << " x" << a.ranks << " ranks. Median of " << a.reps
     << " batches; graph = " << a.graph_ops << " ops per captured graph.\n\n";
  md << "| op | dtype | mode | bytes | cuda us | nccl us | cuda/nccl | cuda busbw GB/s | nccl busbw GB/s | wrong |\n";
  md << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    if (r.backend != "cuda") continue;
    const Row* n = nullptr;
    for (const Row& x : rows)
      if (x.backend == "nccl" && x.op == r.op && x.dtype == r.dtype && x.mode == r.mode && x.bytes == r.bytes) n = &x;
    char buf[512];
    std::snprintf(buf, sizeof(buf), "| %s | %s | %s | %lu | %.2f | %s | %s | %.1f | %s | %ld |\n", r.op.c_str(),
                  r.dtype.c_str(), r.mode.c_str(), (unsigned long)r.bytes, r.us,
                  n ? std::to_string(n->us).substr(0, std::to_string(n->us).find('.') + 3).c_str() : "-",
                  n ? std::to_string(r.us / n->us).substr(0, 4).c_str() : "-", r.busbw,
                  n ? std::to_string(n->busbw).substr(0, std::to_string(n->busbw).find('.') + 2).c_str() : "-",
                  (long)(r.wrong + (n ? n->wrong : 0)));
    md << buf;
  }
  // Every other backend or variant against NCCL (bf16) of the same op, dtype, mode and size.
  bool variants = false;
  for (const Row& r : rows) {
    if (r.backend == "cuda" || r.backend == "nccl") continue;
    const Row* n = nullptr;
    for (const Row& x : rows)
      if (x.backend == "nccl" && x.op == r.op && x.dtype == r.dtype && x.mode == r.mode && x.bytes == r.bytes) n = &x;
    if (!variants) {
      md << "\n| backend | op | dtype | mode | bytes | us | nccl us | speed-up vs nccl | busbw GB/s | error | nccl error |\n";
      md << "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
      variants = true;
    }
    char buf[512];
    std::snprintf(buf, sizeof(buf), "| %s | %s | %s | %s | %lu | %.2f | %s | %s | %.1f | %s | %s |\n",
                  r.backend.c_str(), r.op.c_str(), r.dtype.c_str(), r.mode.c_str(), (unsigned long)r.bytes,
                  r.us, n ? std::to_string(n->us).c_str() : "-",
                  n ? std::to_string(n->us / r.us).substr(0, 4).c_str() : "-", r.busbw,
                  r.error >= 0 ? std::to_string(r.error).c_str() : "-",
                  n && n->error >= 0 ? std::to_string(n->error).c_str() : "-");
    md << buf;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value for " + k);
      return argv[++i];
    };
    if (k == "--ranks") a.ranks = std::stoi(next());
    else if (k == "--backend" || k == "--backends") a.backends = split(next());
    else if (k == "--dtypes") a.dtypes = split(next());
    else if (k == "--ops") a.ops = split(next());
    else if (k == "--modes") a.modes = split(next());
    else if (k == "--min") a.min_bytes = parse_size(next());
    else if (k == "--max") a.max_bytes = parse_size(next());
    else if (k == "--factor") a.factor = std::stoi(next());
    else if (k == "--reps") a.reps = std::stoi(next());
    else if (k == "--json") a.json = next();
    else if (k == "--md") a.md = next();
    else if (k == "--algo") a.algo = next();
    else if (k == "--error") a.error_max = parse_size(next());
    else if (k == "--skew-us") a.skew_us = std::stod(next());
    else if (k == "--gap-us") a.gap_us = std::stod(next());
    else {
      std::cerr << "usage: commx-gpu-bench [--ranks N] [--backend cuda,nccl] [--dtypes bf16,f32] "
                   "[--ops all_reduce,all_gather,reduce_scatter,all_to_all] [--modes eager,graph] "
                   "[--min 8] [--max 256M] [--factor 2] [--reps 7] [--algo flat|tree] "
                   "[--error MAXSIZE] [--skew-us US] [--gap-us US] (backends: cuda, nccl, cuda+fp8, cuda+fp8x2, nccl+fp8) "
                   "[--json f] [--md f]\n";
      return 2;
    }
  }
  auto server = start_tcp_store_server("127.0.0.1", 0);
  const uint16_t port = server->port();
  std::vector<pid_t> pids;
  for (int r = 0; r < a.ranks; ++r) {
    pid_t p = fork();
    if (p == 0) {
      int code = 1;
      try {
        code = rank_main(r, a, port);
      } catch (const std::exception& e) {
        std::cerr << "rank " << r << ": " << e.what() << "\n";
      }
      std::fflush(stdout);
      _exit(code);
    }
    pids.push_back(p);
  }
  int rc = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  server->stop();
  return rc;
}
