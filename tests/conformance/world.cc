// Worlds and rank helpers of the conformance suite (world.h). Layer: tests.
#include "conformance/world.h"

#include <cstdlib>
#include <cstring>

#include "commx/backends.h"
#include "commx/error.h"
#include "commx/store.h"
#include "conformance/device_memory.h"
#include "cpu/harness.h"

namespace commx::testing {
namespace {

// The comms' op timeout: a rank that fails early leaves the others waiting at most this long.
constexpr Timeout kOpTimeout = std::chrono::seconds(30);
// The forked ranks of one world are killed past this (a hang fails the test instead of blocking).
constexpr int kWorldLimitSeconds = 90;
constexpr uint8_t kBlankByte = 0xA5;

int mpirun_size() {
  const char* s = std::getenv("OMPI_COMM_WORLD_SIZE");
  return s ? std::atoi(s) : 0;
}

bool offered(const std::vector<std::string>& available, const std::string& name) {
  for (const auto& a : available)
    if (a == name) return true;
  return false;
}

std::vector<int> sizes_up_to(int n) {
  std::vector<int> v;
  for (int i = 1; i <= n; ++i) v.push_back(i);
  return v;
}

}  // namespace

std::vector<World> worlds() {
  const auto available = available_backends();
  std::vector<World> w;
  if (int n = mpirun_size()) {
    if (offered(available, "mpi")) w.push_back({{"mpi", "mpi", {}, false}, n});
    return w;
  }
  auto add = [&](const Target& t, const std::vector<int>& sizes) {
    for (int n : sizes) w.push_back({t, n});
  };
  add({"cpu_shm", "cpu", {}, false}, sizes_up_to(8));
  add({"cpu_tcp", "cpu", {{"transport", "tcp"}}, false}, sizes_up_to(8));
  if (offered(available, "gloo")) add({"gloo", "gloo", {}, false}, sizes_up_to(8));
  const int gpus = gpu_count();
  if (gpus > 0 && offered(available, "cuda"))
    // Ranks share GPUs beyond one per GPU (the cuda backend allows it), up to 4.
    add({"cuda", "cuda", {}, true}, sizes_up_to(gpus > 4 ? gpus : 4));
  if (gpus > 0 && offered(available, "nccl") && nccl_loadable())
    add({"nccl", "nccl", {}, true}, sizes_up_to(gpus));  // NCCL needs a GPU per rank
  return w;
}

std::vector<World> large_worlds() {
  std::vector<World> w;
  for (const World& x : worlds())
    if (x.size <= 4) w.push_back(x);
  return w;
}

std::string world_name(const ::testing::TestParamInfo<World>& info) {
  return info.param.target.label + "_x" + std::to_string(info.param.size);
}



std::string describe(const char* op, DataType dtype, size_t count, int root, const ReduceOp* rop) {
  std::string s = std::string(op) + " " + dtype_name(dtype);
  if (rop) s += std::string(" ") + reduce_kind_name(rop->kind);
  s += " count " + std::to_string(count);
  if (root >= 0) s += " root " + std::to_string(root);
  return s;
}

// ---- Buffer

struct Buffer::Memory {
  Buf host;       // the host copy (the memory itself on the host)
  void* device = nullptr;
  ~Memory() {
    if (device) device_free(device);
  }
};

Buffer::Buffer(const Target& target, int device, const Buf& host, size_t count, DataType dtype)
    : mem_(std::make_shared<Memory>()),
      count_(count),
      dtype_(dtype),
      device_(target.on_gpu ? Device::cuda(device) : Device::cpu()) {
  const size_t bytes = count * dtype_size(dtype) + 1;
  mem_->host = host;
  mem_->host.resize(bytes, kBlankByte);
  if (target.on_gpu) {
    mem_->device = device_alloc(device, bytes);
    host_to_device(mem_->device, mem_->host.data(), bytes);
  }
}

Tensor Buffer::slice(size_t offset, size_t count) const {
  char* base = static_cast<char*>(mem_->device ? mem_->device : mem_->host.data());
  return Tensor(base + offset * dtype_size(dtype_), static_cast<int64_t>(count), dtype_, device_);
}

Buf Buffer::read() const {
  if (!mem_->device) return mem_->host;
  Buf out(mem_->host.size());
  device_to_host(out.data(), mem_->device, out.size());
  return out;
}

// ---- Rank

Rank::Rank(const World& world, int r, std::shared_ptr<Comm> comm)
    : rank(r),
      size(world.size),
      target_(world.target),
      device_(comm->device().is_cuda() ? comm->device().index : -1),
      comm_(std::move(comm)) {}

Buffer Rank::upload(const Buf& data, size_t count, DataType dtype) {
  return Buffer(target_, device_, data, count, dtype);
}

Buffer Rank::blank(size_t count, DataType dtype) {
  return Buffer(target_, device_, Buf(count * dtype_size(dtype) + 1, kBlankByte), count, dtype);
}

bool Rank::check(bool ok, const std::string& what) {
  if (!ok && ++failures_ <= 20)
    std::fprintf(stderr, "[%s rank %d/%d] FAIL: %s\n", target_.label.c_str(), rank, size,
                 what.c_str());
  return ok;
}

bool Rank::expect(const Buf& want, const Buffer& got, const std::string& what, ReduceOp op,
                  size_t offset, size_t count) {
  if (count == SIZE_MAX) count = got.count() - offset;
  const size_t es = dtype_size(got.dtype());
  const Buf bytes = got.read();
  const std::string diff =
      mismatch(want.data() + offset * es, bytes.data() + offset * es, count, got.dtype(), op);
  return check(diff.empty(), what + ": " + diff);
}

const std::vector<DataType>& Rank::dtypes() const {
  static const std::vector<DataType> every = [] {
    std::vector<DataType> v;
    for (int i = 0; i < kNumDataTypes; ++i) v.push_back(static_cast<DataType>(i));
    return v;
  }();
  static const std::vector<DataType> some = {DataType::kFloat32, DataType::kBFloat16,
                                             DataType::kFloat8E4M3, DataType::kInt64,
                                             DataType::kUInt8, DataType::kBool};
  return sweeps_less() ? some : every;
}

const std::vector<ReduceOp>& Rank::reduce_ops() const {
  static const std::vector<ReduceOp> every = {
      ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX,           ReduceOp::AVG,
      ReduceOp::BAND, ReduceOp::BOR,    ReduceOp::BXOR, ReduceOp::premul_sum(2.5)};
  static const std::vector<ReduceOp> some = {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::AVG,
                                             ReduceOp::premul_sum(2.5), ReduceOp::BXOR};
  return sweeps_less() ? some : every;
}

bool Rank::sweeps_less() const {
  return size >= 3 && (target_.label == "cpu_tcp" || target_.label == "gloo");
}

bool Rank::claims(OpType type, DataType dtype, ReduceKind kind) {
  return backend_runs(comm_->unsafe_get_backend(), type, dtype, kind);
}

void Rank::expect_unsupported(const std::function<void()>& fn, const std::string& what) {
  try {
    fn();
  } catch (const Error& e) {
    check(e.code() == ErrorCode::kUnsupported, what + ": expected Unsupported, got " + e.what());
    check(std::strstr(e.what(), target_.backend.c_str()) != nullptr,
          what + ": the error does not name the backend: " + e.what());
    return;
  }
  check(false, what + ": an op the backend does not claim ran");
}

// ---- run_world

namespace {

std::shared_ptr<Comm> make_comm(const World& w, std::shared_ptr<Store> store, int rank) {
  CommOptions o;
  o.store = std::move(store);
  o.timeout = kOpTimeout;
  o.hints = w.target.hints;
  if (w.target.backend != "mpi") {  // the mpi backend takes its ranks from mpirun
    o.rank = rank;
    o.size = w.size;
  }
  const int gpus = w.target.on_gpu ? gpu_count() : 0;
  Device d = w.target.on_gpu ? Device::cuda(rank % gpus) : Device::cpu();
  return Comm::create(w.target.backend, d, "conformance", o);
}

int run_rank(const World& w, std::shared_ptr<Store> store, int rank,
             const std::function<void(Rank&)>& body) {
  auto comm = make_comm(w, std::move(store), rank);
  Rank r(w, comm->rank(), comm);
  body(r);
  comm->finalize();
  return r.failures();
}

}  // namespace

void run_world(const World& w, const std::function<void(Rank&)>& body) {
  if (w.target.backend == "mpi") {
    // This process is one rank of mpirun's world.
    int failures = 0;
    try {
      failures = run_rank(w, make_hash_store(), -1, body);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "uncaught exception: " << e.what();
    }
    EXPECT_EQ(failures, 0) << "checks failed on this rank (see the FAIL lines above)";
    return;
  }
  auto res = run_forked(
      w.size,
      [&](RankEnv& env) { env.failures += run_rank(w, env.store, env.rank, body); },
      kWorldLimitSeconds);
  EXPECT_TRUE(res.all_ok()) << w.target.label << " x" << w.size << ": " << res.describe();
}

}  // namespace commx::testing
