// commx-gpu-bench: side-by-side GPU collective timing of commx backends (cuda vs nccl) in one run,
// eager and CUDA-graph-captured, nccl-tests-style rows (time, algbw, busbw, #wrong), JSON and a
// markdown table. Stand-in until commx-bench takes GPU backends. Layer: tools.
// Ranks are processes forked before any CUDA call (rank r on GPU r % GPUs), meeting through a
// commx TCP store the parent hosts on the loopback address.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
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
};

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

class Runner {
 public:
  Runner(Comm& c, int rank, int world, int dev, const Args& a) : c_(c), rank_(rank), world_(world), dev_(dev), a_(a) {
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
      c_.all_reduce(Tensor(in, n, t, d, s_), ReduceOp::SUM, false, o);
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
    void *in, *out, *pristine;
    CK(cudaMalloc(&in, bytes));
    CK(cudaMalloc(&out, bytes));
    CK(cudaMalloc(&pristine, bytes));
    auto pat = pattern(t, n, rank_, 1e-12);
    CK(cudaMemcpy(pristine, pat.data(), bytes, cudaMemcpyHostToDevice));
    // Correctness (#wrong): one all_reduce/op of a known pattern.
    int64_t wrong = check(op, t, bytes, in, out);
    const int batch = bytes >= (64u << 20) ? 5 : (bytes >= (1u << 20) ? 10 : 20);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> samples;
    cudaGraphExec_t exec = nullptr;
    int per_launch = 1;
    if (mode == "graph") {
      per_launch = std::min(a_.graph_ops, batch);
      CK(cudaMemcpyAsync(in, pristine, bytes, cudaMemcpyDeviceToDevice, s_));
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
      CK(cudaMemcpyAsync(in, pristine, bytes, cudaMemcpyDeviceToDevice, s_));
      sync_all();
      CK(cudaEventRecord(e0, s_));
      int ops = 0;
      if (mode == "graph") {
        for (; ops + per_launch <= batch; ops += per_launch) CK(cudaGraphLaunch(exec, s_));
      } else {
        for (; ops < batch; ++ops) issue(op, t, bytes, in, out);
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
    return Row{backend, op, dtype_name(t), mode, bytes, us, algbw, algbw * bus_factor(op, world_), wrong};
  }

 private:
  int64_t check(const std::string& op, DataType t, uint64_t bytes, void* in, void* out) {
    size_t es = dtype_size(t);
    int64_t n = bytes / es;
    auto mine = pattern(t, n, rank_, 1.0);
    CK(cudaMemcpy(in, mine.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(out, 0xff, bytes));
    issue(op, t, bytes, in, out);
    CK(cudaStreamSynchronize(s_));
    std::vector<uint8_t> got(bytes);
    CK(cudaMemcpy(got.data(), op == "all_reduce" ? in : out, bytes, cudaMemcpyDeviceToHost));
    std::vector<std::vector<uint8_t>> all;
    for (int r = 0; r < world_; ++r) all.push_back(pattern(t, n, r, 1.0));
    int64_t wrong = 0, chunk = n / world_;
    auto at = [&](int r, int64_t i) { return value(t, &all[r][i * es]); };
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
  for (const auto& backend : a.backends) {
    CommOptions o;
    o.store = store;
    o.rank = rank;
    o.size = a.ranks;
    o.timeout = std::chrono::seconds(60);
    std::shared_ptr<Comm> c;
    // Init cost as users see it: comm creation, then the first (tiny) all_reduce, which is where
    // lazily initialised backends pay the rest.
    auto t_init = std::chrono::steady_clock::now();
    try {
      c = Comm::create(backend, Device::cuda(dev), "bench_" + backend, o);
    } catch (const std::exception& e) {
      if (rank == 0) std::cerr << "skipping backend " << backend << ": " << e.what() << "\n";
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
                    backend.c_str(), a.ranks, ms(t_created - t_init), ms(t_first - t_init));
    }
    Runner run(*c, rank, a.ranks, dev, a);
    for (const auto& op : a.ops)
      for (const auto& dt : a.dtypes)
        for (const auto& mode : a.modes)
          for (uint64_t b = a.min_bytes; b <= a.max_bytes; b *= a.factor) {
            Row r = run.measure(backend, op, parse_dtype(dt), b, mode);
            rows.push_back(r);
            if (rank == 0)
              std::printf("%-5s %-14s %-5s %-5s %12lu %10.2f us %8.2f GB/s busbw %8.2f GB/s wrong %ld\n",
                          r.backend.c_str(), r.op.c_str(), r.dtype.c_str(), r.mode.c_str(),
                          (unsigned long)r.bytes, r.us, r.algbw, r.busbw, (long)r.wrong);
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
       << ", \"algbw_gbps\": " << r.algbw << ", \"busbw_gbps\": " << r.busbw << ", \"wrong\": " << r.wrong
       << "}" << (i + 1 < rows.size() ? ",\n" : "\n");
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
    else {
      std::cerr << "usage: commx-gpu-bench [--ranks N] [--backend cuda,nccl] [--dtypes bf16,f32] "
                   "[--ops all_reduce,all_gather,reduce_scatter,all_to_all] [--modes eager,graph] "
                   "[--min 8] [--max 256M] [--factor 2] [--reps 7] [--algo flat|tree] "
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
