// Shared collective checks (see collective_checks.h). Layer: tests.
#include "collective_checks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "commx/error.h"
#include "values.h"

namespace commx::testing {
namespace {

using namespace commx::bench;

struct Buf {
  DataType dt;
  std::vector<uint8_t> bytes;
  Buf(DataType t, int64_t n) : dt(t), bytes(static_cast<size_t>(n) * dtype_size(t) + 1, 0xA5) {}
  Tensor tensor(int64_t off = 0, int64_t n = -1) {
    int64_t count = n < 0 ? static_cast<int64_t>(bytes.size() / dtype_size(dt)) - off : n;
    return Tensor(bytes.data() + off * dtype_size(dt), count, dt);
  }
  void set(int64_t i, double v) { store_value(dt, bytes.data(), i, v); }
  double get(int64_t i) const { return load_value(dt, bytes.data(), i); }
};

double val(int rank, int64_t i, DataType dt, ReduceKind k) {
  uint64_t b = 0;
  store_value(dt, &b, 0, input_value(rank, i, dt, k));
  return load_value(dt, &b, 0);
}

double reduced(int n, int64_t i, DataType dt, ReduceOp op) {
  std::vector<double> v(n);
  for (int r = 0; r < n; ++r) v[r] = val(r, i, dt, op.kind);
  return reduce_reference(dt, op, v.data(), n);
}

const int64_t kSizes[] = {0, 1, 7, 1029};

const DataType kAllTypes[] = {DataType::kFloat32,  DataType::kFloat64,    DataType::kFloat16,
                              DataType::kBFloat16, DataType::kFloat8E4M3, DataType::kFloat8E5M2,
                              DataType::kInt8,     DataType::kUInt8,      DataType::kInt32,
                              DataType::kInt64,    DataType::kBool,       DataType::kUInt32,
                              DataType::kUInt64};
const ReduceOp kAllOps[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN,
                            ReduceOp::MAX, ReduceOp::AVG,     ReduceOp::BAND,
                            ReduceOp::BOR, ReduceOp::BXOR,    ReduceOp::premul_sum(0.5)};

}  // namespace

void check_reductions(Comm& c) {
  const int n = c.size();
  const int me = c.rank();
  Backend& b = c.unsafe_get_backend();
  EXPECT_TRUE(b.supports(OpType::kAllReduce, DataType::kFloat32, ReduceKind::kSum));
  for (DataType dt : kAllTypes)
    for (ReduceOp op : kAllOps) {
      if (!reduce_supported_on_host(op.kind, dt)) continue;
      if (!b.supports(OpType::kAllReduce, dt, op.kind)) {
        uint64_t x[2] = {0, 0};
        try {
          c.all_reduce(Tensor(x, 1, dt), op);
          ADD_FAILURE() << "unclaimed " << dtype_name(dt) << " " << reduce_kind_name(op.kind)
                        << " ran";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
        }
        continue;
      }
      for (int64_t count : kSizes) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + reduce_kind_name(op.kind) + " count " +
                     std::to_string(count));
        Buf buf(dt, count);
        for (int64_t i = 0; i < count; ++i) buf.set(i, input_value(me, i, dt, op.kind));
        c.all_reduce(buf.tensor(0, count), op);
        int64_t bad = 0;
        for (int64_t i = 0; i < count; ++i)
          bad += !values_match(dt, buf.get(i), reduced(n, i, dt, op), n, true);
        EXPECT_EQ(bad, 0) << "all_reduce";
        // reduce to the last rank: the root gets the result, the others keep their input.
        int root = n - 1;
        for (int64_t i = 0; i < count; ++i) buf.set(i, input_value(me, i, dt, op.kind));
        c.reduce(buf.tensor(0, count), root, op);
        bad = 0;
        for (int64_t i = 0; i < count; ++i) {
          double want = me == root ? reduced(n, i, dt, op) : val(me, i, dt, op.kind);
          bad += !values_match(dt, buf.get(i), want, n, me == root);
        }
        EXPECT_EQ(bad, 0) << "reduce";
      }
    }
  // The reduce_scatter forms on a few dtypes/ops.
  for (DataType dt : {DataType::kFloat32, DataType::kInt32, DataType::kFloat64})
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX})
      for (int64_t cnt : kSizes) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " count " + std::to_string(cnt));
        Buf in(dt, cnt * n), out(dt, cnt);
        for (int64_t i = 0; i < cnt * n; ++i) in.set(i, input_value(me, i, dt, op.kind));
        c.reduce_scatter_single(out.tensor(0, cnt), in.tensor(0, cnt * n), op);
        for (int64_t i = 0; i < cnt; ++i)
          ASSERT_TRUE(values_match(dt, out.get(i), reduced(n, me * cnt + i, dt, op), n, true));
        // list form
        std::vector<Tensor> ins;
        for (int r = 0; r < n; ++r) ins.push_back(in.tensor(r * cnt, cnt));
        Buf out2(dt, cnt);
        c.reduce_scatter(out2.tensor(0, cnt), ins, op);
        for (int64_t i = 0; i < cnt; ++i) ASSERT_EQ(out2.get(i), out.get(i));
        // v form: rank r receives cnt + r elements
        std::vector<Buf> vin;
        std::vector<Tensor> vts;
        int64_t off = 0, my_off = 0;
        for (int r = 0; r < n; ++r) {
          vin.emplace_back(dt, cnt + r);
          if (r == me) my_off = off;
          for (int64_t i = 0; i < cnt + r; ++i)
            vin[r].set(i, input_value(me, off + i, dt, op.kind));
          off += cnt + r;
        }
        for (int r = 0; r < n; ++r) vts.push_back(vin[r].tensor(0, cnt + r));
        Buf vout(dt, cnt + me);
        c.reduce_scatter_v(vout.tensor(0, cnt + me), vts, op);
        for (int64_t i = 0; i < cnt + me; ++i)
          ASSERT_TRUE(values_match(dt, vout.get(i), reduced(n, my_off + i, dt, op), n, true));
      }
}

void check_data_movement(Comm& c) {
  const int n = c.size();
  const ReduceKind k = ReduceKind::kSum;
  const int me = c.rank();
  const int root = n - 1;
  for (DataType dt : {DataType::kFloat32, DataType::kInt8, DataType::kBFloat16, DataType::kFloat64})
    for (int64_t cnt : kSizes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " count " + std::to_string(cnt));
      auto fill = [&](Buf& b, int64_t off, int64_t m) {
        for (int64_t i = 0; i < m; ++i) b.set(off + i, input_value(me, i, dt, k));
      };
      // broadcast from a non-zero root
      {
        Buf b(dt, cnt);
        fill(b, 0, cnt);
        c.broadcast(b.tensor(0, cnt), root);
        for (int64_t i = 0; i < cnt; ++i) ASSERT_EQ(b.get(i), val(root, i, dt, k));
      }
      // all_gather_single out of place and in place, and the list form
      for (int mode = 0; mode < 3; ++mode) {
        Buf in(dt, cnt), out(dt, cnt * n);
        fill(in, 0, cnt);
        if (mode == 0) c.all_gather_single(out.tensor(0, cnt * n), in.tensor(0, cnt));
        if (mode == 1) {
          fill(out, me * cnt, cnt);
          c.all_gather_single(out.tensor(0, cnt * n), out.tensor(me * cnt, cnt));
        }
        if (mode == 2) {
          std::vector<Buf> outs;
          for (int r = 0; r < n; ++r) outs.emplace_back(dt, cnt);
          std::vector<Tensor> ts;
          for (auto& o : outs) ts.push_back(o.tensor(0, cnt));
          c.all_gather(ts, in.tensor(0, cnt));
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < cnt; ++i) ASSERT_EQ(outs[r].get(i), val(r, i, dt, k));
          continue;
        }
        for (int64_t i = 0; i < cnt * n; ++i) ASSERT_EQ(out.get(i), val(i / cnt, i % cnt, dt, k));
      }
      // all_gather_v: rank r contributes cnt + r elements
      {
        std::vector<Buf> outs;
        for (int r = 0; r < n; ++r) outs.emplace_back(dt, cnt + r);
        std::vector<Tensor> ts;
        for (int r = 0; r < n; ++r) ts.push_back(outs[r].tensor(0, cnt + r));
        Buf in(dt, cnt + me);
        fill(in, 0, cnt + me);
        c.all_gather_v(ts, in.tensor(0, cnt + me));
        for (int r = 0; r < n; ++r)
          for (int64_t i = 0; i < cnt + r; ++i) ASSERT_EQ(outs[r].get(i), val(r, i, dt, k));
      }
      // all_to_all_single (out of place, in place), list form and v_single
      for (int mode = 0; mode < 3; ++mode) {
        Buf in(dt, cnt * n), out(dt, cnt * n);
        fill(in, 0, cnt * n);
        if (mode == 0) c.all_to_all_single(out.tensor(0, cnt * n), in.tensor(0, cnt * n));
        if (mode == 1) {
          fill(out, 0, cnt * n);
          c.all_to_all_single(out.tensor(0, cnt * n), out.tensor(0, cnt * n));
        }
        if (mode == 2) {
          std::vector<Tensor> ins, outs;
          for (int r = 0; r < n; ++r) {
            ins.push_back(in.tensor(r * cnt, cnt));
            outs.push_back(out.tensor(r * cnt, cnt));
          }
          c.all_to_all(outs, ins);
        }
        for (int64_t i = 0; i < cnt * n; ++i)
          ASSERT_EQ(out.get(i), val(i / cnt, me * cnt + i % cnt, dt, k));
      }
      {
        // rank s sends (s + d + cnt) % 3 elements to rank d
        auto split = [&](int s, int d) { return static_cast<int64_t>((s + d + cnt) % 3); };
        std::vector<int64_t> in_s(n), out_s(n);
        for (int r = 0; r < n; ++r) in_s[r] = split(me, r), out_s[r] = split(r, me);
        int64_t tin = std::accumulate(in_s.begin(), in_s.end(), int64_t{0});
        int64_t tout = std::accumulate(out_s.begin(), out_s.end(), int64_t{0});
        Buf in(dt, tin), out(dt, tout);
        fill(in, 0, tin);
        c.all_to_all_v_single(out.tensor(0, tout), in.tensor(0, tin), out_s, in_s);
        int64_t pos = 0;
        for (int s = 0; s < n; ++s) {
          int64_t src_off = 0;
          for (int d = 0; d < me; ++d) src_off += split(s, d);
          for (int64_t i = 0; i < out_s[s]; ++i)
            ASSERT_EQ(out.get(pos + i), val(s, src_off + i, dt, k));
          pos += out_s[s];
        }
      }
      // gather (single and list) and scatter to/from a non-zero root
      {
        Buf in(dt, cnt), out(dt, cnt * n);
        fill(in, 0, cnt);
        c.gather_single(out.tensor(0, cnt * n), in.tensor(0, cnt), root);
        if (me == root) {
          for (int64_t i = 0; i < cnt * n; ++i) ASSERT_EQ(out.get(i), val(i / cnt, i % cnt, dt, k));
        }
        std::vector<Buf> outs;
        std::vector<Tensor> ts;
        for (int r = 0; r < n; ++r) outs.emplace_back(dt, cnt);
        for (auto& o : outs) ts.push_back(o.tensor(0, cnt));
        c.gather(me == root ? ts : std::vector<Tensor>{}, in.tensor(0, cnt), root);
        if (me == root) {
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < cnt; ++i) ASSERT_EQ(outs[r].get(i), val(r, i, dt, k));
        }
      }
      {
        Buf in(dt, cnt * n), out(dt, cnt);
        fill(in, 0, cnt * n);
        std::vector<Tensor> ins;
        if (me == root)
          for (int r = 0; r < n; ++r) ins.push_back(in.tensor(r * cnt, cnt));
        c.scatter(out.tensor(0, cnt), ins, root);
        for (int64_t i = 0; i < cnt; ++i) ASSERT_EQ(out.get(i), val(root, me * cnt + i, dt, k));
      }
      c.barrier();
    }
}

void check_p2p_and_async(Comm& c) {
  const int n = c.size();
  const int me = c.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  for (int64_t cnt : kSizes) {
    if (n < 2) break;  // a rank cannot send to itself
    std::vector<float> out(cnt), in(cnt, -1.f);
    for (int64_t i = 0; i < cnt; ++i) out[i] = static_cast<float>(me * 1000 + i);
    // Batched so the ring cannot deadlock; then plain send/recv between pairs.
    c.batch_op_create()
        .send(make_tensor(out.data(), cnt), next)
        .recv(make_tensor(in.data(), cnt), prev)
        .issue();
    for (int64_t i = 0; i < cnt; ++i) ASSERT_EQ(in[i], static_cast<float>(prev * 1000 + i));
    if ((me ^ 1) < n) {
      std::fill(in.begin(), in.end(), -1.f);
      if (me % 2 == 0) {
        c.send(make_tensor(out.data(), cnt), me ^ 1);
        c.recv(make_tensor(in.data(), cnt), me ^ 1);
      } else {
        c.recv(make_tensor(in.data(), cnt), me ^ 1);
        c.send(make_tensor(out.data(), cnt), me ^ 1);
      }
      for (int64_t i = 0; i < cnt; ++i) ASSERT_EQ(in[i], static_cast<float>((me ^ 1) * 1000 + i));
    }
  }
  // Async ops complete in issue order: each all_reduce doubles the previous result.
  std::vector<float> x(33, 1.f);
  std::vector<Work> works;
  for (int i = 0; i < 5; ++i)
    works.push_back(c.all_reduce(make_tensor(x.data(), 33), ReduceOp::SUM, true));
  for (auto& w : works) w.wait();
  for (float v : x) ASSERT_EQ(v, static_cast<float>(std::pow(n, 5)));
}

}  // namespace commx::testing
