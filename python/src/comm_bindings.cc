// Comm for Python, in torchcomms' names and argument order: every op takes tensors through
// DLPack, `async_op`, then `hints=` and `timeout=`; the GIL is released while it communicates.
// Layer: Python bindings.
#include "comm.h"
#include "commx/backends.h"
#include "module.h"
#include "work.h"

namespace commx_py {
namespace {

using WorkPtr = std::shared_ptr<PyWork>;

// Runs `f` (which calls the C++ API of `comm`) without the GIL and wraps its Work with what it
// uses and the comm's CUDA device (for Work.wait on torch's current stream).
template <typename F>
WorkPtr issue(const commx::Comm& comm, KeepAlive keep, F&& f) {
  prune_orphans();
  commx::Device dev = comm.device();
  commx::Work w;
  {
    py::gil_scoped_release nogil;
    w = f();
  }
  return std::make_shared<PyWork>(std::move(w), std::move(keep),
                                  dev.is_cuda() ? dev.index : PyWork::kNotCuda);
}

// Elements per row of a tensor split along dim 0 (1 for a 1-D tensor or a non-tensor).
int64_t row_elems_of(py::handle tensor) {
  int64_t row = 1;
  if (py::hasattr(tensor, "shape")) {
    py::tuple shape = py::tuple(tensor.attr("shape"));
    for (size_t d = 1; d < shape.size(); ++d) row *= shape[d].cast<int64_t>();
  }
  return row;
}

commx::Comm& get(PyComm& c) {
  if (!c.comm) throw commx::Error(commx::ErrorCode::kInvalidArgument, "this Comm object is empty");
  return *c.comm;
}

// all_to_all_v_dynamic in any of its forms: the counts are tensors on the comm's device (read
// and written there, never here); rows are `row_size` elements, by default one row of dim 0 of
// the input (as torch splits count).
WorkPtr dynamic_a2a(PyComm& p, commx::DynamicA2AForm form, py::object out, py::object in,
                    py::object out_counts, py::object in_counts, py::object row_size, bool async,
                    py::object h, py::object to) {
  const std::string name = form == commx::DynamicA2AForm::kPlain
                               ? "all_to_all_v_dynamic"
                               : commx::dynamic_a2a_form_name(form);
  KeepAlive keep;
  auto o_t = to_tensor(out, keep, (name + " output").c_str());
  auto i_t = to_tensor(in, keep, (name + " input").c_str());
  auto oc = to_tensor(out_counts, keep, (name + " output_split_sizes").c_str());
  auto ic = to_tensor(in_counts, keep, (name + " input counts").c_str());
  const int64_t row = row_size.is_none() ? row_elems_of(in) : row_size.cast<int64_t>();
  auto o = to_op_options(to, h);
  commx::Comm& c = get(p);
  return issue(c, std::move(keep), [&] {
    switch (form) {
      case commx::DynamicA2AForm::kDispatch:
        return c.dispatch(o_t, i_t, oc, ic, row, async, o);
      case commx::DynamicA2AForm::kCombine:
        return c.combine(o_t, i_t, oc, ic, row, async, o);
      default:
        return c.all_to_all_v_dynamic(o_t, i_t, oc, ic, row, async, o);
    }
  });
}


// Split sizes count rows of dim 0, as torch and torchcomms count them; the C++ API counts
// elements, so each split is scaled by the elements of one row of `tensor`.
std::vector<int64_t> to_splits(py::handle seq, py::handle tensor, const char* what) {
  int64_t row = 1;
  if (py::hasattr(tensor, "shape")) {
    py::tuple shape = py::tuple(tensor.attr("shape"));
    for (size_t d = 1; d < shape.size(); ++d) row *= shape[d].cast<int64_t>();
  }
  std::vector<int64_t> out;
  for (py::handle v : seq) {
    int64_t n = v.cast<int64_t>();
    if (n < 0)
      throw commx::Error(commx::ErrorCode::kInvalidArgument,
                         std::string(what) + ": split sizes must not be negative");
    out.push_back(n * row);
  }
  return out;
}

std::shared_ptr<PyComm> make_py_comm(std::shared_ptr<commx::Comm> comm, py::object store_owner) {
  auto p = std::make_shared<PyComm>();
  p->comm = std::move(comm);
  p->store_owner = std::move(store_owner);
  return p;
}

// A comm made from `p` (split, shrink) by `make(options)`, with the GIL released meanwhile; null
// stays None.
template <typename Make>
std::shared_ptr<PyComm> child_comm(PyComm& p, py::object h, py::object to, Make&& make) {
  commx::CommOptions o;
  o.timeout = to_timeout(to);
  o.hints = to_hints(h);
  std::shared_ptr<commx::Comm> child;
  {
    py::gil_scoped_release nogil;
    child = make(std::move(o));
  }
  if (!child) return nullptr;
  return make_py_comm(std::move(child), p.store_owner);
}

// Send/recv collected in Python and issued together.
struct PyBatchOp {
  std::shared_ptr<commx::Comm> comm;
  std::vector<commx::P2POp> ops;
  KeepAlive keep;
  py::list added;  // (is_send, tensor as given, peer) per op, for BatchSendRecv.ops
};

constexpr auto kAsync = "async_op";

}  // namespace

void bind_comm(py::module_& m) {
  auto hints = py::arg("hints") = py::none();
  auto timeout = py::arg("timeout") = py::none();
  auto async_op = py::arg(kAsync) = false;

  // dynamic_attr: Python keeps the batch's comm on it (BatchSendRecv.get_comm_backend, pickling).
  py::class_<PyBatchOp>(m, "BatchSendRecv", py::dynamic_attr(),
                        "Sends and receives issued together.")
      .def(
          "send",
          [](PyBatchOp& b, py::object t, int dst) -> PyBatchOp& {
            b.ops.push_back(commx::P2POp{true, to_tensor(t, b.keep, "send tensor"), dst});
            b.added.append(py::make_tuple(true, t, dst));
            return b;
          },
          py::arg("tensor"), py::arg("dst"), py::return_value_policy::reference_internal)
      .def(
          "recv",
          [](PyBatchOp& b, py::object t, int src) -> PyBatchOp& {
            b.ops.push_back(commx::P2POp{false, to_tensor(t, b.keep, "recv tensor"), src});
            b.added.append(py::make_tuple(false, t, src));
            return b;
          },
          py::arg("tensor"), py::arg("src"), py::return_value_policy::reference_internal)
      .def(
          "issue",
          [](PyBatchOp& b, bool async, py::object h, py::object to) {
            auto ops = std::move(b.ops);
            auto keep = std::move(b.keep);
            b.ops.clear();
            b.keep.clear();
            b.added = py::list();
            auto o = to_op_options(to, h);
            auto comm = b.comm;
            return issue(*comm, std::move(keep), [&] { return comm->batch_p2p(ops, async, o); });
          },
          async_op, hints, timeout)
      .def_property_readonly("num_ops", [](const PyBatchOp& b) { return b.ops.size(); })
      .def_property_readonly("_added", [](const PyBatchOp& b) { return b.added; });

  // dynamic_attr: the Python layer keeps per-comm state (creation options, hooks, defaults set by
  // set_timeout/set_hints) on the object.
  py::class_<PyComm, std::shared_ptr<PyComm>> c(m, "Comm", py::dynamic_attr(),
                                                "A communicator (torchcomms' TorchComm).");
  bind_comm_window(c);
  bind_comm_hooks(c);
  c.def("get_rank", [](PyComm& p) { return get(p).rank(); })
      .def("get_size", [](PyComm& p) { return get(p).size(); })
      .def("get_name", [](PyComm& p) { return get(p).name(); })
      .def("get_backend", [](PyComm& p) { return get(p).backend_name(); })
      .def("_device_str", [](PyComm& p) { return get(p).device().str(); })
      .def("get_timeout",
           [](PyComm& p) {
             return py::module_::import("datetime")
                 .attr("timedelta")(py::arg("milliseconds") =
                                        static_cast<double>(get(p).timeout().count()));
           })
      .def(
          "flight_record_json", [](PyComm& p) { return get(p).flight_record_json(); },
          "The flight recorder's record of the last ops, as JSON (read with commx-analyze).")
      .def(
          "dump_flight_record",
          [](PyComm& p) {
            std::string path;
            {
              py::gil_scoped_release nogil;
              path = get(p).dump_flight_record();
            }
            return path.empty() ? py::object(py::none()) : py::object(py::str(path));
          },
          "Writes the flight record to $COMMX_TRACE_DIR; returns its path, or None when the "
          "variable is unset.")
      .def("_backend_address",
           [](PyComm& p) { return reinterpret_cast<uintptr_t>(&get(p).unsafe_get_backend()); })
      .def(
          "abort",
          [](PyComm& p) {
            py::gil_scoped_release nogil;
            get(p).abort();
          },
          "Non-blocking: fails pending work with AbortedError; later ops raise AbortedError.")
      .def("is_aborted", [](PyComm& p) { return get(p).is_aborted(); })
      .def("finalize",
           [](PyComm& p) {
             py::gil_scoped_release nogil;
             get(p).finalize();
           })
      .def(
          "get_store", [](PyComm& p) { return get(p).store(); },
          "This comm's private (prefixed) store.")
      .def("flight_record_json", [](PyComm& p) { return get(p).flight_record_json(); },
           "The flight recorder's record of this comm's last ops (JSON).")
      .def(
          "dump_flight_record", [](PyComm& p) { return get(p).dump_flight_record(); },
          "Writes the record to $COMMX_TRACE_DIR/<comm>.rank<r>.json; returns the path ('' "
          "without COMMX_TRACE_DIR).")

      .def(
          "all_reduce",
          [](PyComm& p, py::object t, const commx::ReduceOp& op, bool async, py::object h,
             py::object to) {
            KeepAlive keep;
            auto tt = to_tensor(t, keep, "all_reduce tensor");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep), [&] { return get(p).all_reduce(tt, op, async, o); });
          },
          py::arg("tensor"), py::arg("op"), async_op, hints, timeout)
      .def(
          "reduce",
          [](PyComm& p, py::object t, int root, const commx::ReduceOp& op, bool async, py::object h,
             py::object to) {
            KeepAlive keep;
            auto tt = to_tensor(t, keep, "reduce tensor");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep), [&] { return get(p).reduce(tt, root, op, async, o); });
          },
          py::arg("tensor"), py::arg("root"), py::arg("op"), async_op, hints, timeout)
      .def(
          "broadcast",
          [](PyComm& p, py::object t, int root, bool async, py::object h, py::object to) {
            KeepAlive keep;
            auto tt = to_tensor(t, keep, "broadcast tensor");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep), [&] { return get(p).broadcast(tt, root, async, o); });
          },
          py::arg("tensor"), py::arg("root"), async_op, hints, timeout)
      .def(
          "all_gather",
          [](PyComm& p, py::object outs, py::object in, bool async, py::object h, py::object to) {
            KeepAlive keep;
            auto o_t = to_tensors(outs, keep, "all_gather tensor_list");
            auto i_t = to_tensor(in, keep, "all_gather tensor");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep), [&] { return get(p).all_gather(o_t, i_t, async, o); });
          },
          py::arg("tensor_list"), py::arg("tensor"), async_op, hints, timeout)
      .def(
          "all_gather_v",
          [](PyComm& p, py::object outs, py::object in, bool async, py::object h, py::object to) {
            KeepAlive keep;
            auto o_t = to_tensors(outs, keep, "all_gather_v tensor_list");
            auto i_t = to_tensor(in, keep, "all_gather_v tensor");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep), [&] { return get(p).all_gather_v(o_t, i_t, async, o); });
          },
          py::arg("tensor_list"), py::arg("tensor"), async_op, hints, timeout)
      .def(
          "all_gather_single",
          [](PyComm& p, py::object out, py::object in, bool async, py::object h, py::object to) {
            KeepAlive keep;
            auto o_t = to_tensor(out, keep, "all_gather_single output");
            auto i_t = to_tensor(in, keep, "all_gather_single input");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep),
                         [&] { return get(p).all_gather_single(o_t, i_t, async, o); });
          },
          py::arg("output"), py::arg("input"), async_op, hints, timeout)
      .def(
          "reduce_scatter",
          [](PyComm& p, py::object out, py::object ins, const commx::ReduceOp& op, bool async,
             py::object h, py::object to) {
            KeepAlive keep;
            auto o_t = to_tensor(out, keep, "reduce_scatter output");
            auto i_t = to_tensors(ins, keep, "reduce_scatter input_list");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep),
                         [&] { return get(p).reduce_scatter(o_t, i_t, op, async, o); });
          },
          py::arg("output"), py::arg("input_list"), py::arg("op"), async_op, hints, timeout)
      .def(
          "reduce_scatter_v",
          [](PyComm& p, py::object out, py::object ins, const commx::ReduceOp& op, bool async,
             py::object h, py::object to) {
            KeepAlive keep;
            auto o_t = to_tensor(out, keep, "reduce_scatter_v output");
            auto i_t = to_tensors(ins, keep, "reduce_scatter_v input_list");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep),
                         [&] { return get(p).reduce_scatter_v(o_t, i_t, op, async, o); });
          },
          py::arg("output"), py::arg("input_list"), py::arg("op"), async_op, hints, timeout)
      .def(
          "reduce_scatter_single",
          [](PyComm& p, py::object out, py::object in, const commx::ReduceOp& op, bool async,
             py::object h, py::object to) {
            KeepAlive keep;
            auto o_t = to_tensor(out, keep, "reduce_scatter_single output");
            auto i_t = to_tensor(in, keep, "reduce_scatter_single input");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep),
                         [&] { return get(p).reduce_scatter_single(o_t, i_t, op, async, o); });
          },
          py::arg("output"), py::arg("input"), py::arg("op"), async_op, hints, timeout)
      .def(
          "all_to_all",
          [](PyComm& p, py::object outs, py::object ins, bool async, py::object h, py::object to) {
            KeepAlive keep;
            auto o_t = to_tensors(outs, keep, "all_to_all output_tensor_list");
            auto i_t = to_tensors(ins, keep, "all_to_all input_tensor_list");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep), [&] { return get(p).all_to_all(o_t, i_t, async, o); });
          },
          py::arg("output_tensor_list"), py::arg("input_tensor_list"), async_op, hints, timeout)
      .def(
          "all_to_all_single",
          [](PyComm& p, py::object out, py::object in, bool async, py::object h, py::object to) {
            KeepAlive keep;
            auto o_t = to_tensor(out, keep, "all_to_all_single output");
            auto i_t = to_tensor(in, keep, "all_to_all_single input");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep),
                         [&] { return get(p).all_to_all_single(o_t, i_t, async, o); });
          },
          py::arg("output"), py::arg("input"), async_op, hints, timeout)
      .def(
          "all_to_all_v_single",
          [](PyComm& p, py::object out, py::object in, py::object out_splits, py::object in_splits,
             bool async, py::object h, py::object to) {
            KeepAlive keep;
            auto o_t = to_tensor(out, keep, "all_to_all_v_single output");
            auto i_t = to_tensor(in, keep, "all_to_all_v_single input");
            auto os = to_splits(out_splits, out, "all_to_all_v_single output_split_sizes");
            auto is = to_splits(in_splits, in, "all_to_all_v_single input_split_sizes");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep),
                         [&] { return get(p).all_to_all_v_single(o_t, i_t, os, is, async, o); });
          },
          py::arg("output"), py::arg("input"), py::arg("output_split_sizes"),
          py::arg("input_split_sizes"), async_op, hints, timeout)
      .def(
          "all_to_all_v_dynamic",
          [](PyComm& p, py::object out, py::object in, py::object out_splits, py::object in_splits,
             py::object row_size, bool async, py::object h, py::object to) {
            return dynamic_a2a(p, commx::DynamicA2AForm::kPlain, out, in, out_splits, in_splits,
                               row_size, async, h, to);
          },
          py::arg("output"), py::arg("input"), py::arg("output_split_sizes"),
          py::arg("input_split_sizes"), py::arg("row_size") = py::none(), async_op, hints, timeout)
      .def(
          "device_alltoallv_single",
          [](PyComm& p, py::object out, py::object in, py::object out_splits, py::object in_splits,
             bool async, py::object h, py::object to) {
            return dynamic_a2a(p, commx::DynamicA2AForm::kPlain, out, in, out_splits, in_splits,
                               py::none(), async, h, to);
          },
          py::arg("output"), py::arg("input"), py::arg("output_split_sizes"),
          py::arg("input_split_sizes"), async_op, hints, timeout)
      .def(
          "dispatch",
          [](PyComm& p, py::object out, py::object in, py::object out_splits, py::object counts,
             py::object row_size, bool async, py::object h, py::object to) {
            return dynamic_a2a(p, commx::DynamicA2AForm::kDispatch, out, in, out_splits, counts,
                               row_size, async, h, to);
          },
          py::arg("output"), py::arg("input"), py::arg("output_split_sizes"),
          py::arg("expert_counts"), py::arg("row_size") = py::none(), async_op, hints, timeout)
      .def(
          "combine",
          [](PyComm& p, py::object out, py::object in, py::object out_splits, py::object in_splits,
             py::object row_size, bool async, py::object h, py::object to) {
            return dynamic_a2a(p, commx::DynamicA2AForm::kCombine, out, in, out_splits, in_splits,
                               row_size, async, h, to);
          },
          py::arg("output"), py::arg("input"), py::arg("output_split_sizes"),
          py::arg("input_split_sizes"), py::arg("row_size") = py::none(), async_op, hints, timeout)
      .def(
          "gather",
          [](PyComm& p, py::object outs, py::object in, int root, bool async, py::object h,
             py::object to) {
            KeepAlive keep;
            auto o_t = to_tensors(outs, keep, "gather output_tensor_list");
            auto i_t = to_tensor(in, keep, "gather input_tensor");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep), [&] { return get(p).gather(o_t, i_t, root, async, o); });
          },
          py::arg("output_tensor_list"), py::arg("input_tensor"), py::arg("root"), async_op, hints,
          timeout)
      .def(
          "gather_single",
          [](PyComm& p, py::object out, py::object in, int root, bool async, py::object h,
             py::object to) {
            KeepAlive keep;
            auto o_t = to_tensor(out, keep, "gather_single output");
            auto i_t = to_tensor(in, keep, "gather_single input");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep),
                         [&] { return get(p).gather_single(o_t, i_t, root, async, o); });
          },
          py::arg("output"), py::arg("input"), py::arg("root"), async_op, hints, timeout)
      .def(
          "scatter",
          [](PyComm& p, py::object out, py::object ins, int root, bool async, py::object h,
             py::object to) {
            KeepAlive keep;
            auto o_t = to_tensor(out, keep, "scatter output_tensor");
            auto i_t = to_tensors(ins, keep, "scatter input_tensor_list");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep), [&] { return get(p).scatter(o_t, i_t, root, async, o); });
          },
          py::arg("output_tensor"), py::arg("input_tensor_list"), py::arg("root"), async_op, hints,
          timeout)
      .def(
          "barrier",
          [](PyComm& p, bool async, py::object h, py::object to) {
            auto o = to_op_options(to, h);
            return issue(get(p), {}, [&] { return get(p).barrier(async, o); });
          },
          async_op, hints, timeout)
      .def(
          "send",
          [](PyComm& p, py::object t, int dst, bool async, py::object h, py::object to) {
            KeepAlive keep;
            auto tt = to_tensor(t, keep, "send tensor");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep), [&] { return get(p).send(tt, dst, async, o); });
          },
          py::arg("tensor"), py::arg("dst"), async_op, hints, timeout)
      .def(
          "recv",
          [](PyComm& p, py::object t, int src, bool async, py::object h, py::object to) {
            KeepAlive keep;
            auto tt = to_tensor(t, keep, "recv tensor");
            auto o = to_op_options(to, h);
            return issue(get(p), std::move(keep), [&] { return get(p).recv(tt, src, async, o); });
          },
          py::arg("tensor"), py::arg("src"), async_op, hints, timeout)
      .def("batch_op_create",
           [](PyComm& p) {
             return PyBatchOp{p.comm, {}, {}, py::list()};
           })
      .def(
          "split",
          [](PyComm& p, std::vector<int> ranks, const std::string& name, py::object h,
             py::object to) {
            return child_comm(p, h, to, [&](commx::CommOptions o) { return get(p).split(ranks, name, o); });
          },
          py::arg("ranks"), py::arg("name"), hints, timeout,
          "Collective; the new rank is the position in `ranks`; an empty list returns None.")
      .def(
          "shrink",
          [](PyComm& p, std::vector<int> exclude, const std::string& name, py::object h,
             py::object to) {
            return child_comm(p, h, to, [&](commx::CommOptions o) { return get(p).shrink(exclude, name, o); });
          },
          py::arg("exclude"), py::arg("name"), hints, timeout,
          "Collective among the ranks not in `exclude` (they take no part, e.g. dead ones): a new "
          "comm of the others in rank order (as ncclCommShrink). Works on a failed or aborted "
          "comm.");

  m.def(
      "new_comm",
      [](const std::string& backend, py::object device, const std::string& name,
         py::object abort_process, py::object to, py::object store, py::object h, py::object rank,
         py::object size, bool enable_reconfigure, py::object store_owner) {
        commx::CommOptions o;
        o.timeout = to_timeout(to);
        if (!abort_process.is_none())
          o.abort_process_on_timeout_or_error = abort_process.cast<bool>();
        if (!store.is_none()) o.store = store.cast<std::shared_ptr<commx::Store>>();
        o.hints = to_hints(h);
        if (!rank.is_none()) o.rank = rank.cast<int>();
        if (!size.is_none()) o.size = size.cast<int>();
        o.enable_reconfigure = enable_reconfigure;
        commx::Device dev = to_device(device);
        std::shared_ptr<commx::Comm> comm;
        {
          py::gil_scoped_release nogil;
          comm = commx::Comm::create(backend, dev, name, o);
        }
        return make_py_comm(std::move(comm), store_owner);
      },
      py::arg("backend"), py::arg("device"), py::arg("name"),
      py::arg("abort_process_on_timeout_or_error") = py::none(), timeout,
      py::arg("store") = py::none(), hints, py::arg("rank") = py::none(),
      py::arg("size") = py::none(), py::arg("enable_reconfigure") = false,
      py::arg("store_owner") = py::none());

  m.def("registered_backends", &commx::registered_backends);
  m.def("available_backends", &commx::available_backends,
        "Registered backends and those a plugin file next to libcommx (or in COMMX_PLUGIN_DIR) "
        "offers.");
  m.def("has_backend", &commx::has_backend, py::arg("name"));
}

}  // namespace commx_py
