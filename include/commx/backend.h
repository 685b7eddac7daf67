// The interface every backend implements (native cpu/cuda, wrappers over nccl/gloo/mpi, plugins).
// Layer: public API for backend authors. The core validates arguments and numbers ops before a
// backend sees them; a backend only executes an OpDesc and reports completion through a Work.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "commx/collective.h"
#include "commx/options.h"
#include "commx/store.h"
#include "commx/tensor.h"
#include "commx/types.h"
#include "commx/work.h"

namespace commx {

// The form of an op as the user called it: names it in errors, flight records and fingerprints.
// Backends execute the canonical Collective it lowers to (commx/collective.h).
enum class OpType : uint8_t {
  kAllReduce,
  kReduce,
  kBroadcast,
  kAllGather,        // outputs: list of size() tensors, input: one
  kAllGatherSingle,  // output: one tensor of size()*input.count
  kAllGatherV,       // outputs: list whose counts may differ per rank
  kReduceScatter,    // inputs: list of size() tensors, output: one
  kReduceScatterSingle,
  kReduceScatterV,  // inputs: list whose counts may differ per rank
  kAllToAll,        // inputs/outputs: lists of size() tensors
  kAllToAllSingle,
  kAllToAllVSingle,  // the caller's split sizes become the per-rank views inputs/outputs
  kGather,           // outputs (root only): list of size() tensors
  kGatherSingle,
  kScatter,  // inputs (root only): list of size() tensors
  kBarrier,
  kSend,
  kRecv,
  kBatchP2P,  // p2p: sends and receives issued together
  kAllToAllVDynamic,  // counts in int64 tensors on the comm's device (AllToAllVDynamic)
};
inline constexpr int kNumOpTypes = 20;
const char* op_type_name(OpType t);
Collective collective_of(OpType t);
// Whether the form's per-rank pieces may differ in count (the v forms, the list all_to_all).
bool has_uneven_pieces(OpType t);

// What a backend implements for a one-sided window (commx/window.h checks every argument first,
// so a backend sees only ranks in range and byte ranges inside the target's buffer).
class WindowImpl {
 public:
  virtual ~WindowImpl() = default;
  // This rank's buffer; rank r's buffer as this process may load and store it (empty when it
  // cannot be mapped here).
  virtual Tensor local() = 0;
  virtual Tensor remote(int rank) = 0;
  // Copies `bytes` from `src` into rank dst's buffer at byte `offset`; done on return.
  virtual void put(const void* src, size_t bytes, int dst, size_t offset) = 0;
  // Tells dst that every put of this rank to it issued before has landed.
  virtual void signal(int dst) = 0;
  // How many signals src sent this rank so far (non-blocking).
  virtual uint64_t signals_from(int src) = 0;
  // Non-blocking: why a signal from src can no longer come (src died, the comm was aborted or
  // finalized), prefixed by `where`; null while it may.
  virtual std::exception_ptr wait_error(int src, const std::string& where) = 0;
  // Until src sent `target` signals: throws Timeout (past `timeout`), PeerFailure (src died) or
  // Aborted (the comm was aborted), each naming src, prefixed by `where`.
  virtual void wait_signals(int src, uint64_t target, Timeout timeout, const std::string& where) = 0;
};

// The forms of all_to_all_v_dynamic. Every rank's send is cut into size() x experts_per_rank
// segments (rows for local expert l of rank j); how the segments are ordered in the input and in
// the output is what tells the forms apart (commx/comm.h says which tensor holds what).
enum class DynamicA2AForm : uint8_t {
  kPlain,     // experts_per_rank = 1: input and output in rank order
  kDispatch,  // input in global expert order (j, l); output by local expert, then source (l, k)
  kCombine,   // input by local expert, then source (l, k); output in global expert order (k, l)
};
const char* dynamic_a2a_form_name(DynamicA2AForm f);

// Most segments (size x experts_per_rank) one all_to_all_v_dynamic may have.
inline constexpr int64_t kMaxDynamicSegments = 256;

// The device-resident part of an all_to_all_v_dynamic: count tensors read and written by the
// device at run time (never by the host), in rows of row_elems elements.
struct AllToAllVDynamic {
  Tensor input_counts{};   // int64[size * experts_per_rank]: rows this rank sends per segment
  Tensor output_counts{};  // int64[size * experts_per_rank]: written with the rows received
  int64_t row_elems = 1;
  int experts_per_rank = 1;
  DynamicA2AForm form = DynamicA2AForm::kPlain;
};

struct P2POp {
  bool is_send = true;
  Tensor tensor;
  int peer = -1;
};

// One op as the backend receives it: validated, numbered and lowered to its canonical collective
// (lower_op). Unused fields stay empty.
//
// After lowering, the per-rank pieces of an op are one Tensor view per rank, whatever form the
// user called: a single-tensor form becomes views into its one buffer, and all_to_all_v_single's
// split sizes become views at the split offsets (Comm builds those, split_views).
//   all_reduce, reduce, broadcast  input, output (output equals input: in place)
//   all_gather                     input; outputs[r] receives rank r's input
//   reduce_scatter                 inputs[r] is reduced into rank r's output
//   all_to_all                     inputs[r] goes to rank r; outputs[r] comes from rank r
//   gather                         input; outputs[r] on the root only (empty elsewhere)
//   scatter                        inputs[r] on the root only (empty elsewhere); output
//   p2p                            p2p (send and recv are lists of one)
// `input`/`output` keep the whole buffer of a single-tensor form, for paths that want it.
struct OpDesc {
  OpType type = OpType::kBarrier;
  Collective collective = Collective::kBarrier;  // set by lower_op
  uint64_t seq = 0;  // per-comm sequence number, from 1
  // Every member has an initializer, so an OpDesc built with designated initializers may name
  // only the fields its op uses.
  Tensor input{};
  Tensor output{};  // equals input for in-place single-tensor ops (all_reduce, broadcast, reduce)
  std::vector<Tensor> inputs{};
  std::vector<Tensor> outputs{};
  ReduceOp op{};
  int root = -1;  // also the peer of send/recv
  std::vector<P2POp> p2p{};
  AllToAllVDynamic dynamic{};  // kAllToAllVDynamic only
  Timeout timeout{0};
  Hints hints{};
  int comm_size = 0;  // set by lower_op

  const char* name() const { return op_type_name(type); }
  // The element type of the data (the reduced type of reductions).
  DataType dtype() const;
  // The element count every rank must agree on (0 where ranks may legitimately differ: the
  // per-peer counts of all_to_all and all_to_all_v_single).
  int64_t agreed_count() const;
  // The size of the op as nccl-tests counts it: the larger side (all_reduce: the tensor;
  // all_gather: the whole output; reduce_scatter: the whole input). Equal on every rank except
  // for all_to_all forms with per-peer counts.
  size_t bytes() const;
  // Every rank's pieces have the same count on every rank (false for the v forms and the list
  // all_to_all, whose per-peer counts may differ).
  bool equal_split() const;
  // The views are equal pieces back to back: one buffer of comm_size pieces starting at
  // outputs[0].data (inputs[0].data), as a library's single-buffer call wants it.
  bool outputs_one_buffer() const;
  bool inputs_one_buffer() const;
};

// Whether the views lie back to back in memory (false for an empty list).
bool back_to_back(const std::vector<Tensor>& views);
// Views of `t` of `splits[r]` elements each, back to back from its start: how the split sizes of
// all_to_all_v_single become its per-rank views (validate_op then checks them against `t`).
std::vector<Tensor> split_views(const Tensor& t, const std::vector<int64_t>& splits);

// Lowers a validated op of rank `rank` in a comm of `size` ranks into its canonical collective:
// sets `collective` and `comm_size` and fills the per-rank views (see OpDesc). The core does it
// before run(); a backend that builds ops of its own for another backend calls it too.
void lower_op(OpDesc& op, int rank, int size);

// What a backend is given at creation.
struct BackendContext {
  std::string comm_name;
  int rank = 0;
  int size = 1;
  Device device;
  std::shared_ptr<Store> store;  // already prefixed for this comm; keys are private to it
  CommOptions options;           // timeout resolved
  // Ranks of this comm in the world comm it was split from (identity for a world comm).
  std::vector<int> world_ranks;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Collective over all ranks of the comm; may throw.
  virtual void init(const BackendContext& ctx) = 0;
  // Executes or enqueues `op`. With async_op=false a host backend completes before returning and
  // a device backend enqueues on the caller's stream; both return a Work for uniformity.
  virtual Work run(const OpDesc& op, bool async_op) = 0;
  // Whether this backend can run collective `c` on `dtype` (with reduction `kind` where `c`
  // reduces); the core turns a false into a clear Unsupported error before the op reaches run().
  virtual bool supports(Collective c, DataType dtype, ReduceKind kind) const = 0;
  // The same question for the forms whose per-rank pieces may differ in count (all_gather_v,
  // reduce_scatter_v, the list all_to_all, all_to_all_v_single: OpDesc::equal_split() is false).
  // A backend that runs them another way than the equal forms (a device backend hands them to a
  // library) overrides it.
  virtual bool supports_uneven(Collective c, DataType dtype, ReduceKind kind) const {
    return supports(c, dtype, kind);
  }
  // Non-blocking: fail every pending op with Aborted and make later ops fail fast.
  virtual void abort() = 0;
  // Releases resources; after finalize no op may be issued.
  virtual void finalize() {}
  // Which devices this backend accepts tensors on.
  virtual bool accepts_device(const Device& d) const = 0;
  // The links between this comm's ranks as init() found them ("shm", "tcp", "nvlink", "pcie",
  // ...): the link column of the tuning-table rows that apply (commx-bench --tune writes it).
  // "any" where the backend does not tell them apart.
  virtual std::string link() const { return "any"; }
  // One-sided window of `count` elements of `dtype` on every rank (collective; see
  // commx/window.h); errors start with `where`. Backends without windows keep this default,
  // which throws Unsupported.
  virtual std::shared_ptr<WindowImpl> new_window(int64_t count, DataType dtype, const std::string& where);
};

// Whether `b` runs an op of form `type` on `dtype` with `kind`: the question the core asks before
// run() (Backend::supports, or supports_uneven for the forms with per-rank counts).
bool backend_runs(const Backend& b, OpType type, DataType dtype, ReduceKind kind);

// "[comm 'name' rank r/n] " -- errors about the comm itself (init, finalize) start so.
inline std::string comm_context(const std::string& comm_name, int rank, int size) {
  return "[comm '" + comm_name + "' rank " + std::to_string(rank) + "/" + std::to_string(size) + "] ";
}
inline std::string comm_context(const BackendContext& ctx) {
  return comm_context(ctx.comm_name, ctx.rank, ctx.size);
}
// "[comm 'name' rank r/n] op #seq: " -- every error about an op starts so.
std::string op_context(const std::string& comm_name, int rank, int size, const OpDesc& op);
inline std::string op_context(const BackendContext& ctx, const OpDesc& op) {
  return op_context(ctx.comm_name, ctx.rank, ctx.size, op);
}

using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// Backends register themselves by name (static registration or a plugin's entry point).
void register_backend(const std::string& name, BackendFactory factory);
bool has_backend(const std::string& name);
std::vector<std::string> registered_backends();
// Finds a registered factory, else loads the plugin named by COMMX_BACKEND_LIB_PATH_<NAME>
// (or lib commx_backend_<name>.so in COMMX_PLUGIN_DIR); throws Unsupported with what was tried.
std::unique_ptr<Backend> create_backend(const std::string& name);

// Plugin ABI: a backend library exports these two C symbols.
//   uint32_t commx_plugin_abi_version();        returns kBackendAbiVersion it was built with
//   void commx_plugin_register();                calls register_backend(...)
inline constexpr uint32_t kBackendAbiVersion = 6;  // 2: Backend::new_window, 3: OpDesc::dynamic,
                                                   // 4: canonical OpDesc, 5: supports() by
                                                   // Collective, no split vectors in OpDesc,
                                                   // 6: Backend::link

}  // namespace commx

#define COMMX_DEFINE_PLUGIN(REGISTER_FN)                                                  \
  extern "C" uint32_t commx_plugin_abi_version() { return ::commx::kBackendAbiVersion; } \
  extern "C" void commx_plugin_register() { REGISTER_FN(); }
