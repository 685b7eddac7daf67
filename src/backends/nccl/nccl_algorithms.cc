// The nccl backend's table (see nccl_algorithms.h). Layer: backends (nccl).
#include "nccl/nccl_algorithms.h"

#include <vector>

#include "commx/error.h"
#include "cuda_common/cuda_util.h"

namespace commx::nccl {

void check_nccl(const Api& api, ncclComm_t comm, ncclResult_t r, const char* what,
                const std::string& where) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string detail = api.GetErrorString(r);
  if (api.GetLastError) {
    const char* last = api.GetLastError(comm);
    if (last && *last) detail += std::string(": ") + last;
  }
  throw Error(ErrorCode::kNccl, where + what + " failed: " + detail);
}

void NcclCall::send(const void* p, size_t bytes, int peer) const {
  check(api.Send(p, bytes, ncclUint8, peer, comm, stream), "ncclSend");
}

void NcclCall::recv(void* p, size_t bytes, int peer) const {
  check(api.Recv(p, bytes, ncclUint8, peer, comm, stream), "ncclRecv");
}

void NcclCall::copy(void* dst, const void* src, size_t bytes) const {
  if (bytes && dst != src)
    COMMX_CUDA_CHECK_CTX(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), where);
}

namespace {

// Data movement needs no dtype: move bytes.
size_t nbytes(const Tensor& t) { return t.nbytes(); }

// Whether any view of `a` shares a byte with any view of `b`.
bool views_overlap(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (const Tensor& x : a)
    for (const Tensor& y : b) {
      auto xs = static_cast<const char*>(x.data), ys = static_cast<const char*>(y.data);
      if (x.nbytes() && y.nbytes() && xs < ys + y.nbytes() && ys < xs + x.nbytes()) return true;
    }
  return false;
}

bool outputs_one_buffer(const OpDesc& op, const Topology&) { return op.outputs_one_buffer(); }
bool inputs_one_buffer(const OpDesc& op, const Topology&) { return op.inputs_one_buffer(); }

void all_reduce(const NcclCall& c) {
  const OpDesc& op = c.op;
  c.check(c.api.AllReduce(op.input.data, op.output.data, op.input.count, c.dt, c.ro, c.comm,
                          c.stream),
          "ncclAllReduce");
}

void reduce(const NcclCall& c) {
  const OpDesc& op = c.op;
  c.check(c.api.Reduce(op.input.data, op.output.data, op.input.count, c.dt, c.ro, op.root, c.comm,
                       c.stream),
          "ncclReduce");
}

void broadcast(const NcclCall& c) {
  const OpDesc& op = c.op;
  c.check(c.api.Broadcast(op.input.data, op.output.data, nbytes(op.input), ncclUint8, op.root,
                          c.comm, c.stream),
          "ncclBroadcast");
}

void all_gather(const NcclCall& c) {
  const OpDesc& op = c.op;
  c.check(c.api.AllGather(op.input.data, op.outputs[0].data, nbytes(op.input), ncclUint8, c.comm,
                          c.stream),
          "ncclAllGather");
}

// One broadcast per root: outputs need not be contiguous nor equal in size.
void all_gather_broadcasts(const NcclCall& c) {
  const OpDesc& op = c.op;
  c.group([&] {
    for (int q = 0; q < c.size; ++q) {
      const void* src = q == c.rank ? op.input.data : op.outputs[q].data;
      c.check(c.api.Broadcast(src, op.outputs[q].data, nbytes(op.outputs[q]), ncclUint8, q, c.comm,
                              c.stream),
              "ncclBroadcast");
    }
  });
}

void reduce_scatter(const NcclCall& c) {
  const OpDesc& op = c.op;
  c.check(c.api.ReduceScatter(op.inputs[0].data, op.output.data, op.output.count, c.dt, c.ro,
                              c.comm, c.stream),
          "ncclReduceScatter");
}

// One reduce per root; the receive buffer is used on the root only.
void reduce_scatter_reduces(const NcclCall& c) {
  const OpDesc& op = c.op;
  c.group([&] {
    for (int q = 0; q < c.size; ++q)
      c.check(c.api.Reduce(op.inputs[q].data, op.output.data, op.inputs[q].count, c.dt, c.ro, q,
                           c.comm, c.stream),
              "ncclReduce");
  });
}

void all_to_all(const NcclCall& c) {
  const OpDesc& op = c.op;
  const int n = c.size;
  // In place (input and output views share memory) a receive may land before the send that
  // reads the same bytes: send from a copy then.
  std::vector<const void*> from(n);
  char* staged = nullptr;
  if (views_overlap(op.inputs, op.outputs)) {
    size_t total = 0;
    for (const Tensor& t : op.inputs) total += nbytes(t);
    COMMX_CUDA_CHECK_CTX(cudaMallocAsync(reinterpret_cast<void**>(&staged), total, c.stream),
                         c.where);
    size_t off = 0;
    for (int q = 0; q < n; ++q) {
      c.copy(staged + off, op.inputs[q].data, nbytes(op.inputs[q]));
      from[q] = staged + off;
      off += nbytes(op.inputs[q]);
    }
  } else {
    for (int q = 0; q < n; ++q) from[q] = op.inputs[q].data;
  }
  c.group([&] {
    for (int q = 0; q < n; ++q) {
      c.send(from[q], nbytes(op.inputs[q]), q);
      c.recv(op.outputs[q].data, nbytes(op.outputs[q]), q);
    }
  });
  if (staged) COMMX_CUDA_CHECK_CTX(cudaFreeAsync(staged, c.stream), c.where);
}

void gather(const NcclCall& c) {
  const OpDesc& op = c.op;
  const bool root = c.rank == op.root;
  c.group([&] {
    if (root) {
      for (int q = 0; q < c.size; ++q)
        if (q != c.rank) c.recv(op.outputs[q].data, nbytes(op.outputs[q]), q);
    } else {
      c.send(op.input.data, nbytes(op.input), op.root);
    }
  });
  if (root) c.copy(op.outputs[c.rank].data, op.input.data, nbytes(op.input));
}

void scatter(const NcclCall& c) {
  const OpDesc& op = c.op;
  const bool root = c.rank == op.root;
  c.group([&] {
    if (root) {
      for (int q = 0; q < c.size; ++q)
        if (q != c.rank) c.send(op.inputs[q].data, nbytes(op.inputs[q]), q);
    } else {
      c.recv(op.output.data, nbytes(op.output), op.root);
    }
  });
  if (root) c.copy(op.output.data, op.inputs[c.rank].data, nbytes(op.output));
}

void barrier(const NcclCall& c) {
  c.check(c.api.AllReduce(c.scratch, c.scratch, 1, ncclFloat32, ncclSum, c.comm, c.stream),
          "ncclAllReduce (barrier)");
}

void p2p(const NcclCall& c) {
  c.group([&] {
    for (const auto& p : c.op.p2p) {
      if (p.is_send)
        c.send(p.tensor.data, nbytes(p.tensor), p.peer);
      else
        c.recv(p.tensor.data, nbytes(p.tensor), p.peer);
    }
  });
}

using C = Collective;
const NcclAlgorithm kTable[] = {
    {"allreduce", C::kAllReduce, nullptr, all_reduce},
    {"reduce", C::kReduce, nullptr, reduce},
    {"broadcast", C::kBroadcast, nullptr, broadcast},
    {"allgather", C::kAllGather, outputs_one_buffer, all_gather, "broadcasts"},
    {"broadcasts", C::kAllGather, nullptr, all_gather_broadcasts},
    {"reducescatter", C::kReduceScatter, inputs_one_buffer, reduce_scatter, "reduces"},
    {"reduces", C::kReduceScatter, nullptr, reduce_scatter_reduces},
    {"sendrecv", C::kAllToAll, nullptr, all_to_all},
    {"sendrecv", C::kGather, nullptr, gather},
    {"sendrecv", C::kScatter, nullptr, scatter},
    {"allreduce", C::kBarrier, nullptr, barrier},
    {"sendrecv", C::kP2P, nullptr, p2p},
};

}  // namespace

std::span<const NcclAlgorithm> nccl_algorithms() { return kTable; }

}  // namespace commx::nccl
