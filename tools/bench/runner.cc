// The measuring loop of commx-bench (see runner.h). Layer: tools/bench.
#include "runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <set>

#include "commx/error.h"
#include "report.h"
#include "values.h"

namespace commx::bench {

struct Runner::Point {
  Coll c;
  DataType dt;
  ReduceOp op;
  int root;
  Shape shape;
  uint64_t requested = 0;
};

namespace {

using Clock = std::chrono::steady_clock;

const char* op_label(Coll c, ReduceOp op) {
  return coll_reduces(c) ? reduce_kind_name(op.kind) : "none";
}

// Where a run reads its input and writes its output, in the bench's two buffers.
struct Layout {
  char* in = nullptr;
  int64_t in_count = 0;
  char* out = nullptr;
  int64_t out_count = 0;
  bool check_out = true;  // false where this rank's output is undefined (reduce/gather non-root)
};

Layout layout_of(Coll c, const Shape& s, bool ip, int rank, int size, int root, char* send,
                 char* recv, size_t es) {
  Layout l;
  switch (c) {
    case Coll::kAllReduce:
    case Coll::kBroadcast:
    case Coll::kReduce:
      l.in = l.out = recv;
      l.in_count = l.out_count = s.count;
      l.check_out = c != Coll::kReduce || rank == root;
      break;
    case Coll::kAllGather:
    case Coll::kGather:
      l.out = recv;
      l.out_count = s.recv;
      l.in = ip ? recv + rank * s.send * es : send;
      l.in_count = s.send;
      l.check_out = c == Coll::kAllGather || rank == root;
      break;
    case Coll::kReduceScatter:
    case Coll::kScatter:
      l.in = ip ? recv : send;
      l.in_count = s.send;
      l.out = ip ? recv + rank * s.recv * es : recv;
      l.out_count = s.recv;
      break;
    case Coll::kAllToAll:
      l.in = ip ? recv : send;
      l.out = recv;
      l.in_count = l.out_count = s.count;
      break;
    case Coll::kSendRecv:
      l.in = send;
      l.out = recv;
      l.in_count = l.out_count = s.count;
      l.check_out = (rank ^ 1) < size;
      break;
    case Coll::kBarrier:
      l.check_out = false;
      break;
  }
  return l;
}

// The canonical collective a benchmark row runs (every form it calls has equal pieces).
Collective canonical(Coll c) {
  switch (c) {
    case Coll::kAllReduce: return Collective::kAllReduce;
    case Coll::kAllGather: return Collective::kAllGather;
    case Coll::kReduceScatter: return Collective::kReduceScatter;
    case Coll::kAllToAll: return Collective::kAllToAll;
    case Coll::kBroadcast: return Collective::kBroadcast;
    case Coll::kReduce: return Collective::kReduce;
    case Coll::kGather: return Collective::kGather;
    case Coll::kScatter: return Collective::kScatter;
    case Coll::kSendRecv: return Collective::kP2P;
    case Coll::kBarrier: return Collective::kBarrier;
  }
  return Collective::kBarrier;
}

}  // namespace

Runner::Runner(const Options& o, Comm& control, std::vector<BenchComm> comms, Memory& mem,
               std::ostream* out)
    : o_(o),
      control_(control),
      comms_(std::move(comms)),
      mem_(mem),
      out_(out),
      rank_(control.rank()),
      size_(control.size()) {
  capacity_ = o.max_bytes + 64;
  send_ = mem_.alloc(capacity_);
  recv_ = mem_.alloc(capacity_);
  host_.resize(capacity_);
}

Runner::~Runner() {
  mem_.release(send_);
  mem_.release(recv_);
}

bool Runner::supported(const BenchComm& bc, Coll c, DataType dt, ReduceOp op) {
  if (coll_reduces(c) && !reduce_supported_on_host(op.kind, dt)) return false;
  return bc.comm->unsafe_get_backend().supports(canonical(c), dt, op.kind);
}

void Runner::fill_inputs(const Point& p, bool ip) {
  size_t es = dtype_size(p.dt);
  Layout l = layout_of(p.c, p.shape, ip, rank_, size_, p.root, static_cast<char*>(send_),
                       static_cast<char*>(recv_), es);
  // The output first gets a pattern no input uses, so elements nobody wrote are counted wrong.
  size_t out_bytes = std::max<size_t>(p.shape.count, p.shape.recv) * es;
  std::memset(host_.data(), 0xA5, out_bytes);
  mem_.to_device(recv_, host_.data(), out_bytes);
  for (int64_t j = 0; j < l.in_count; ++j)
    store_value(p.dt, host_.data(), j, input_value(rank_, j, p.dt, p.op.kind));
  mem_.to_device(l.in, host_.data(), l.in_count * es);
}

int64_t Runner::check_outputs(const Point& p, bool ip) {
  size_t es = dtype_size(p.dt);
  Layout l = layout_of(p.c, p.shape, ip, rank_, size_, p.root, static_cast<char*>(send_),
                       static_cast<char*>(recv_), es);
  if (!l.check_out || l.out_count == 0) return 0;
  mem_.to_host(host_.data(), l.out, l.out_count * es);
  const int n = size_;
  std::vector<double> vals(n);
  int64_t wrong = 0;
  const ReduceKind k = p.op.kind;
  for (int64_t i = 0; i < l.out_count; ++i) {
    double want = 0;
    bool reduced = false;
    switch (p.c) {
      case Coll::kAllReduce:
      case Coll::kReduce:
        for (int r = 0; r < n; ++r) vals[r] = input_value(r, i, p.dt, k);
        want = reduce_reference(p.dt, p.op, vals.data(), n);
        reduced = true;
        break;
      case Coll::kReduceScatter:
        for (int r = 0; r < n; ++r) vals[r] = input_value(r, rank_ * p.shape.recv + i, p.dt, k);
        want = reduce_reference(p.dt, p.op, vals.data(), n);
        reduced = true;
        break;
      case Coll::kBroadcast:
        want = input_value(p.root, i, p.dt, k);
        break;
      case Coll::kAllGather:
      case Coll::kGather:
        want = input_value(static_cast<int>(i / p.shape.send), i % p.shape.send, p.dt, k);
        break;
      case Coll::kScatter:
        want = input_value(p.root, rank_ * p.shape.recv + i, p.dt, k);
        break;
      case Coll::kAllToAll: {
        int64_t chunk = p.shape.count / n;
        want = input_value(static_cast<int>(i / chunk), rank_ * chunk + i % chunk, p.dt, k);
        break;
      }
      case Coll::kSendRecv:
        // Odd ranks receive their even partner's data; even ranks get it echoed back.
        want = input_value(rank_ & ~1, i, p.dt, k);
        break;
      case Coll::kBarrier:
        break;
    }
    // Reference values pass through the dtype, as the inputs did.
    uint64_t buf = 0;
    if (!reduced || !dtype_is_floating(p.dt)) {
      store_value(p.dt, &buf, 0, want);
      want = load_value(p.dt, &buf, 0);
    }
    if (!values_match(p.dt, load_value(p.dt, host_.data(), i), want, n, reduced)) ++wrong;
  }
  return wrong;
}

Row Runner::measure(const BenchComm& bc, const Point& p, bool ip) {
  Comm& comm = *bc.comm;
  size_t es = dtype_size(p.dt);
  Layout l = layout_of(p.c, p.shape, ip, rank_, size_, p.root, static_cast<char*>(send_),
                       static_cast<char*>(recv_), es);
  Device dev = o_.device;
  void* st = mem_.stream();
  auto T = [&](char* ptr, int64_t n) { return Tensor(ptr, n, p.dt, dev, st); };
  OpOptions oo;
  oo.timeout = Timeout(static_cast<int64_t>(o_.timeout_s * 1000));
  if (!bc.spec.algorithm.empty()) oo.hints["algorithm"] = bc.spec.algorithm;
  const ReduceOp rop = p.op;
  const int root = p.root;
  std::function<void()> op;
  Tensor in = T(l.in, l.in_count), out = T(l.out, l.out_count);
  switch (p.c) {
    case Coll::kAllReduce:
      op = [&comm, out, rop, oo] { comm.all_reduce(out, rop, false, oo); };
      break;
    case Coll::kBroadcast:
      op = [&comm, out, root, oo] { comm.broadcast(out, root, false, oo); };
      break;
    case Coll::kReduce:
      op = [&comm, out, root, rop, oo] { comm.reduce(out, root, rop, false, oo); };
      break;
    case Coll::kAllGather:
      op = [&comm, in, out, oo] { comm.all_gather_single(out, in, false, oo); };
      break;
    case Coll::kReduceScatter:
      op = [&comm, in, out, rop, oo] { comm.reduce_scatter_single(out, in, rop, false, oo); };
      break;
    case Coll::kAllToAll:
      op = [&comm, in, out, oo] { comm.all_to_all_single(out, in, false, oo); };
      break;
    case Coll::kGather:
      op = [&comm, in, out, root, oo] { comm.gather_single(out, in, root, false, oo); };
      break;
    case Coll::kScatter: {
      std::vector<Tensor> ins;
      if (rank_ == root)
        for (int r = 0; r < size_; ++r) ins.push_back(in.slice(r * p.shape.recv, p.shape.recv));
      op = [&comm, ins, out, root, oo] { comm.scatter(out, ins, root, false, oo); };
      break;
    }
    case Coll::kSendRecv: {
      int peer = rank_ ^ 1;
      if (peer >= size_) {
        op = [] {};
      } else if ((rank_ & 1) == 0) {
        op = [&comm, in, out, peer, oo] {
          comm.send(in, peer, false, oo);
          comm.recv(out, peer, false, oo);
        };
      } else {
        op = [&comm, out, peer, oo] {
          comm.recv(out, peer, false, oo);
          comm.send(out, peer, false, oo);
        };
      }
      break;
    }
    case Coll::kBarrier:
      op = [&comm, oo] { comm.barrier(false, oo); };
      break;
  }
  if (o_.graph) op = mem_.capture(op);

  Row row;
  row.collective = coll_name(p.c);
  row.backend = bc.spec.label();
  row.world_size = size_;
  row.link = bc.comm->link();
  row.dtype = p.c == Coll::kBarrier ? "none" : dtype_name(p.dt);
  row.op = op_label(p.c, p.op);
  row.root = coll_has_root(p.c) ? root : -1;
  row.size = p.shape.bytes;
  row.count = p.shape.count;
  row.in_place = ip;
  row.graph = o_.graph;

  int64_t wrong = 0;
  if (p.c != Coll::kBarrier) {
    // Inputs are filled even with -c 0: uninitialised floats (denormals, NaN) would time
    // differently from real data.
    fill_inputs(p, ip);
    if (o_.check) {
      control_.barrier();
      op();
      mem_.sync();
      wrong = check_outputs(p, ip);
    }
  }
  if (o_.blocking) {
    // -z 1: every op completes before the next starts (nccl-tests' blocking mode).
    op = [inner = std::move(op), this] {
      inner();
      mem_.sync();
    };
  }
  auto w0 = Clock::now();
  for (int i = 0; i < o_.warmup; ++i) op();
  mem_.sync();
  double warm_us = std::chrono::duration<double, std::micro>(Clock::now() - w0).count();
  // Back-to-back ops are timed in batches: -m ops each (nccl-tests' agg iters; -n batches), or
  // by default batches long enough (~kBatchUs) that reading the clock (over 100 ns in some VMs)
  // and the GPU stream sync do not weigh on sub-microsecond ops, yet at least kMinBatches of
  // them so min and max mean something; ops longer than that are timed one by one.
  constexpr double kBatchUs = 20;
  constexpr int kMinBatches = 5;
  int batch = 1, nbatches = o_.iters, total_ops = o_.iters;
  if (o_.agg_iters > 0) {
    batch = o_.agg_iters;
    total_ops = o_.iters * batch;
  } else {
    int most = std::max(1, o_.iters / kMinBatches);
    if (o_.warmup > 0 && warm_us > 0)
      batch = std::clamp(static_cast<int>(kBatchUs / (warm_us / o_.warmup)), 1, most);
    nbatches = o_.iters / batch;
  }
  control_.barrier();
  std::vector<double> us(nbatches);
  double total = 0;
  for (int b = 0; b < nbatches; ++b) {
    int count = b + 1 == nbatches ? total_ops - b * batch : batch;
    auto t0 = Clock::now();
    for (int i = 0; i < count; ++i) op();
    mem_.sync();
    double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    total += t;
    us[b] = t / count;
  }
  // Ping-pong: one round trip carries the message twice; report the one-way time.
  double scale = p.c == Coll::kSendRecv ? 0.5 : 1.0;
  for (auto& t : us) t *= scale;
  double mean = total * scale / total_ops;
  std::sort(us.begin(), us.end());
  double median =
      us.size() % 2 ? us[us.size() / 2] : (us[us.size() / 2 - 1] + us[us.size() / 2]) / 2;
  double times[4] = {median, mean, us.front(), us.back()};
  reduce_over_ranks(times, 4);
  int64_t wrongs[1] = {wrong};
  if (o_.check) control_.all_reduce(Tensor(wrongs, 1, DataType::kInt64), ReduceOp::SUM);
  row.time_us = times[0];
  row.mean_us = times[1];
  row.min_us = times[2];
  row.max_us = times[3];
  row.wrong = o_.check && p.c != Coll::kBarrier ? wrongs[0] : -1;
  row.algbw = row.time_us > 0 ? static_cast<double>(row.size) / (row.time_us * 1e3) : 0;
  row.busbw = row.algbw * busbw_factor(p.c, size_);
  if (row.wrong > 0) total_wrong_ += row.wrong;
  return row;
}

void Runner::reduce_over_ranks(double* v, int n) {
  Tensor t(v, n, DataType::kFloat64);
  switch (o_.average) {
    case Options::Average::kRank0:
      control_.broadcast(t, 0);
      break;
    case Options::Average::kMean:
      control_.all_reduce(t, ReduceOp::SUM);
      for (int i = 0; i < n; ++i) v[i] /= size_;
      break;
    case Options::Average::kMin:
      control_.all_reduce(t, ReduceOp::MIN);
      break;
    case Options::Average::kMax:
      control_.all_reduce(t, ReduceOp::MAX);
      break;
  }
}

void Runner::run_collective(Coll c, DataType dt, ReduceOp op, std::vector<Row>& rows) {
  bool several = comms_.size() > 1;
  std::vector<const BenchComm*> active;
  for (const auto& bc : comms_) {
    if (supported(bc, c, dt, op)) {
      active.push_back(&bc);
    } else if (rank_ == 0) {
      std::cerr << "# note: backend " << bc.spec.label() << " skips " << coll_name(c) << " on "
                << dtype_name(dt)
                << (coll_reduces(c) ? std::string(" with ") + reduce_kind_name(op.kind) : "")
                << " (not supported)\n";
    }
  }
  if (active.empty()) return;
  if (c == Coll::kSendRecv && size_ < 2) {
    if (rank_ == 0) std::cerr << "# note: sendrecv needs at least 2 ranks, skipped\n";
    return;
  }
  if (rank_ == 0 && out_) {
    *out_ << "#\n# " << coll_name(c) << ", " << size_ << " ranks"
          << (c == Coll::kBarrier ? "" : std::string(", ") + dtype_name(dt))
          << (coll_reduces(c) ? std::string(", ") + reduce_kind_name(op.kind) : "") << "\n";
    print_header(*out_, several);
  }
  std::vector<uint64_t> sizes = c == Coll::kBarrier ? std::vector<uint64_t>{0} : size_list(o_);
  uint64_t last_bytes = UINT64_MAX;
  for (uint64_t req : sizes) {
    Point p{c,  dt, op, coll_has_root(c) ? o_.root : -1, shape_for(c, req, dtype_size(dt), size_),
            req};
    if (c != Coll::kBarrier && p.shape.bytes == last_bytes) continue;  // rounding repeated a size
    last_bytes = p.shape.bytes;
    double first_time[2] = {0, 0};
    for (size_t b = 0; b < active.size(); ++b) {
      Row r[2];
      bool have[2] = {false, false};
      for (int ip = 0; ip < 2; ++ip) {
        bool available = ip ? coll_has_in_place(c) : coll_has_out_of_place(c);
        if (!available || (o_.inplace >= 0 && o_.inplace != ip)) continue;
        r[ip] = measure(*active[b], p, ip == 1);
        if (b == 0) first_time[ip] = r[ip].time_us;
        if (b > 0 && first_time[ip] > 0) r[ip].ratio = r[ip].time_us / first_time[ip];
        have[ip] = true;
      }
      if (rank_ == 0 && out_)
        print_row(*out_, have[0] ? &r[0] : nullptr, have[1] ? &r[1] : nullptr, several);
      for (int ip = 0; ip < 2; ++ip)
        if (have[ip]) rows.push_back(r[ip]);
      if (out_) out_->flush();
    }
  }
}

std::vector<Row> Runner::run() {
  std::vector<Row> rows;
  for (Coll c : o_.colls) {
    if (c == Coll::kBarrier) {
      run_collective(c, DataType::kUInt8, ReduceOp::SUM, rows);
      continue;
    }
    for (DataType dt : o_.dtypes) {
      if (!coll_reduces(c)) {
        run_collective(c, dt, ReduceOp::SUM, rows);
        continue;
      }
      for (ReduceOp op : o_.ops) run_collective(c, dt, op, rows);
    }
  }
  return rows;
}

}  // namespace commx::bench
