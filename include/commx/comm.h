// Comm: a communicator bound to one device, shaped after torchcomms' TorchComm.
// Layer: public API. Validates arguments, numbers ops, runs hooks and the flight recorder, then
// hands each op to the backend chosen by name.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "commx/backend.h"
#include "commx/options.h"
#include "commx/tensor.h"
#include "commx/work.h"

namespace commx {

class Comm;
class CommImpl;
class Window;

// Send/recv issued together (torchcomms' batch_op_create()).
class BatchOp {
 public:
  explicit BatchOp(Comm* comm) : comm_(comm) {}
  BatchOp& send(const Tensor& t, int dst);
  BatchOp& recv(const Tensor& t, int src);
  Work issue(bool async_op = false, const OpOptions& opts = {});

 private:
  Comm* comm_;
  std::vector<P2POp> ops_;
};

struct OpInfo {
  OpType type;
  uint64_t seq;
  DataType dtype;
  int64_t count;
  int root;
};
using PreHook = std::function<void(const Comm&, const OpInfo&)>;
using PostHook = std::function<void(const Comm&, const OpInfo&, const Work&)>;
using AbortHook = std::function<void(const Comm&)>;

class Comm : public std::enable_shared_from_this<Comm> {
 public:
  // Eager and collective over all ranks: every rank calls it with the same backend and name.
  static std::shared_ptr<Comm> create(const std::string& backend, Device device,
                                      const std::string& name, CommOptions options = {});
  ~Comm();

  int rank() const;
  int size() const;
  const std::string& name() const;
  Device device() const;
  std::string backend_name() const;
  // The links between the ranks as the backend found them at init ("shm", "tcp", "nvlink",
  // "pcie", "same_gpu" for ranks sharing a GPU; "any" where the backend does not tell): the
  // tuning-table link of this comm.
  std::string link() const;
  Timeout timeout() const;
  const std::shared_ptr<Store>& store() const;

  // In place: `t` holds the input and receives the result.
  Work all_reduce(const Tensor& t, ReduceOp op, bool async_op = false, const OpOptions& o = {});
  Work reduce(const Tensor& t, int root, ReduceOp op, bool async_op = false, const OpOptions& o = {});
  Work broadcast(const Tensor& t, int root, bool async_op = false, const OpOptions& o = {});
  Work all_gather(const std::vector<Tensor>& outputs, const Tensor& input, bool async_op = false,
                  const OpOptions& o = {});
  Work all_gather_single(const Tensor& output, const Tensor& input, bool async_op = false,
                         const OpOptions& o = {});
  Work all_gather_v(const std::vector<Tensor>& outputs, const Tensor& input, bool async_op = false,
                    const OpOptions& o = {});
  Work reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                      bool async_op = false, const OpOptions& o = {});
  Work reduce_scatter_single(const Tensor& output, const Tensor& input, ReduceOp op,
                             bool async_op = false, const OpOptions& o = {});
  Work reduce_scatter_v(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                        bool async_op = false, const OpOptions& o = {});
  Work all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                  bool async_op = false, const OpOptions& o = {});
  Work all_to_all_single(const Tensor& output, const Tensor& input, bool async_op = false,
                         const OpOptions& o = {});
  // Splits are element counts per rank (torchcomms passes uint64 host splits).
  Work all_to_all_v_single(const Tensor& output, const Tensor& input,
                           const std::vector<int64_t>& output_splits,
                           const std::vector<int64_t>& input_splits, bool async_op = false,
                           const OpOptions& o = {});
  // All-to-all-v whose counts never leave the device (NCCLX's device_alltoallv_single), for
  // MoE token routing: capturable in a CUDA graph and replayable with new counts. The split
  // tensors are int64[size()] on the comm's device, in rows of `row_size` elements:
  // input_split_sizes[j] (read by the device when the op runs) rows go to rank j, taken back to
  // back from the input in rank order; output_split_sizes[k] is written with the rows received
  // from rank k, packed in rank order from the start of `output`. `output.count` is the capacity:
  // when any rank would receive more, or send more than its input holds, or a count is negative,
  // the op fails on every rank naming that rank, and nothing is written past a buffer (cpu:
  // InvalidArgument from the op; cuda: the comm's device error, which leaves the comm unusable).
  // Every rank passes the same row_size. See docs/api.md for the memory it uses.
  Work all_to_all_v_dynamic(const Tensor& output, const Tensor& input,
                            const Tensor& output_split_sizes, const Tensor& input_split_sizes,
                            int64_t row_size, bool async_op = false, const OpOptions& o = {});
  // The same with counts in elements (row_size 1), under torchcomms NCCLX's name.
  Work device_alltoallv_single(const Tensor& output, const Tensor& input,
                               const Tensor& output_split_sizes, const Tensor& input_split_sizes,
                               bool async_op = false, const OpOptions& o = {});
  // MoE dispatch: E = expert_counts.count experts, E / size() on each rank (expert e on rank
  // e / (E / size())). `input` holds this rank's token rows sorted by expert, expert_counts[e]
  // rows for expert e (a router's histogram, int64 on the device). Each rank receives the rows
  // for its local experts grouped by local expert, then by source rank, so each expert's tokens
  // are contiguous; output_split_sizes (int64[E]) is written with the rows per (local expert l,
  // source k) at l * size() + k.
  Work dispatch(const Tensor& output, const Tensor& input, const Tensor& output_split_sizes,
                const Tensor& expert_counts, int64_t row_size, bool async_op = false,
                const OpOptions& o = {});
  // MoE combine, the reverse of dispatch: `input` holds the expert outputs in dispatch's output
  // layout, input_split_sizes is dispatch's output_split_sizes; every row goes back to its source
  // rank, into its original position (global expert order, as dispatch's input), and
  // output_split_sizes (int64[E]) is written with the rows received per global expert.
  Work combine(const Tensor& output, const Tensor& input, const Tensor& output_split_sizes,
               const Tensor& input_split_sizes, int64_t row_size, bool async_op = false,
               const OpOptions& o = {});
  // `outputs` is read on the root only (others pass an empty list).
  Work gather(const std::vector<Tensor>& outputs, const Tensor& input, int root,
              bool async_op = false, const OpOptions& o = {});
  Work gather_single(const Tensor& output, const Tensor& input, int root, bool async_op = false,
                     const OpOptions& o = {});
  // `inputs` is read on the root only.
  Work scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root,
               bool async_op = false, const OpOptions& o = {});
  Work barrier(bool async_op = false, const OpOptions& o = {});
  Work send(const Tensor& t, int dst, bool async_op = false, const OpOptions& o = {});
  Work recv(const Tensor& t, int src, bool async_op = false, const OpOptions& o = {});
  BatchOp batch_op_create() { return BatchOp(this); }
  Work batch_p2p(const std::vector<P2POp>& ops, bool async_op = false, const OpOptions& o = {});

  // Collective over the listed ranks (indices in this comm, the new rank is the position in the
  // list). An empty list returns null; a caller absent from a non-empty list is an error.
  std::shared_ptr<Comm> split(const std::vector<int>& ranks, const std::string& name,
                              CommOptions options = {});
  // Fault tolerance, as NCCL's ncclCommShrink: a new comm of every rank not in `exclude`, in rank
  // order, made by those ranks alone (the excluded ones, e.g. dead or hung, take no part). Works
  // on a comm that failed or was aborted. Every caller must pass the same list; a caller listed
  // in it is an error.
  std::shared_ptr<Comm> shrink(const std::vector<int>& exclude, const std::string& name,
                               CommOptions options = {});

  // Collective: a one-sided window of `count` elements of `dtype` on every rank, zeroed (see
  // commx/window.h). Unsupported where the backend has none (today: cpu over shared memory).
  std::shared_ptr<Window> new_window(int64_t count, DataType dtype);

  // Non-blocking: fails pending work with Aborted; later ops throw Aborted.
  void abort();
  bool is_aborted() const;
  void finalize();

  // The flight recorder's record of the last ops (JSON), and writing it to $COMMX_TRACE_DIR
  // (returns the file's path, empty when the variable is unset). Read dumps with commx-analyze.
  std::string flight_record_json();
  std::string dump_flight_record();

  void register_pre_hook(PreHook h);
  void register_post_hook(PostHook h);
  void register_abort_hook(AbortHook h);

  Backend& unsafe_get_backend();
  CommImpl& impl() { return *impl_; }

 private:
  Comm() = default;
  Work issue(OpDesc op, bool async_op, const OpOptions& o);
  // all_to_all_v_dynamic and its MoE forms (dispatch, combine): one op, told apart by `form`.
  Work issue_dynamic(DynamicA2AForm form, const Tensor& output, const Tensor& input,
                     const Tensor& output_counts, const Tensor& input_counts, int64_t row_size,
                     bool async_op, const OpOptions& o);
  std::unique_ptr<CommImpl> impl_;
  friend class CommImpl;
};

}  // namespace commx
