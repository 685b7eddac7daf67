// Window for Python, in torchcomms' TorchCommWindow names: comm.new_window(count, dtype), then
// put(tensor, dst_rank, target_offset_nelems, async_op), signal(dst_rank, async_op),
// wait_signal(peer_rank, async_op, timeout=), and the buffers as numpy arrays over the shared
// memory: local() and map_remote_tensor(rank) (torch.from_numpy shares them too).
// Layer: Python bindings.
#include <pybind11/numpy.h>

#include "comm.h"
#include "commx/window.h"
#include "module.h"
#include "work.h"

namespace commx_py {
namespace {

struct PyWindow {
  std::shared_ptr<commx::Window> win;
};

// "float32", numpy.float32, numpy.dtype("float32"), torch.float32.
commx::DataType to_dtype(py::handle obj) {
  std::string s;
  if (py::isinstance<py::str>(obj))
    s = obj.cast<std::string>();
  else if (py::hasattr(obj, "name") && py::isinstance<py::str>(obj.attr("name")))
    s = obj.attr("name").cast<std::string>();  // numpy.dtype
  else if (py::hasattr(obj, "__name__"))
    s = obj.attr("__name__").cast<std::string>();  // numpy scalar types
  else
    s = py::str(obj).cast<std::string>();  // torch.float32
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  return commx::parse_dtype(s);
}

// The numpy type of a window's elements: its own where numpy has one, else raw bits (bfloat16 as
// uint16, FP8 as uint8: torch.from_numpy(a).view(torch.bfloat16) gives the values).
const char* numpy_type(commx::DataType t) {
  switch (t) {
    case commx::DataType::kFloat32: return "float32";
    case commx::DataType::kFloat64: return "float64";
    case commx::DataType::kFloat16: return "float16";
    case commx::DataType::kBFloat16: return "uint16";
    case commx::DataType::kInt8: return "int8";
    case commx::DataType::kUInt8: return "uint8";
    case commx::DataType::kInt32: return "int32";
    case commx::DataType::kInt64: return "int64";
    case commx::DataType::kUInt32: return "uint32";
    case commx::DataType::kUInt64: return "uint64";
    case commx::DataType::kBool: return "bool";
    default: return "uint8";  // FP8
  }
}

// A numpy array over `t`'s memory that keeps `owner` (the Python window) alive.
py::array as_numpy(const commx::Tensor& t, py::object owner) {
  if (!t.data) throw commx::Error(commx::ErrorCode::kUnsupported, "this buffer is not mapped in this process");
  const py::dtype dt(numpy_type(t.dtype));
  return py::array(dt, {t.count}, {static_cast<py::ssize_t>(dt.itemsize())}, t.data, owner);
}

}  // namespace

void bind_window(py::module_& m) {
  py::class_<PyWindow, std::shared_ptr<PyWindow>>(
      m, "Window",
      "One-sided window (comm.new_window): every rank owns a buffer of the same size; any rank "
      "puts into any buffer and signals its owner, who waits for the signal.")
      .def_property_readonly("count", [](PyWindow& w) { return w.win->count(); })
      .def("local", [](py::object self) { return as_numpy(self.cast<PyWindow&>().win->local(), self); },
           "This rank's buffer (a numpy array over the shared memory).")
      .def(
          "map_remote_tensor",
          [](py::object self, int rank) { return as_numpy(self.cast<PyWindow&>().win->remote(rank), self); },
          py::arg("rank"), "Rank `rank`'s buffer, loaded and stored directly.")
      .def(
          "put",
          [](PyWindow& w, py::object tensor, int dst_rank, int64_t target_offset_nelems, bool async_op) {
            KeepAlive keep;
            commx::Tensor t = to_tensor(tensor, keep, "put tensor");
            commx::Work work;
            {
              py::gil_scoped_release nogil;
              work = w.win->put(t, dst_rank, target_offset_nelems, async_op);
            }
            return std::make_shared<PyWork>(std::move(work), std::move(keep));
          },
          py::arg("tensor"), py::arg("dst_rank"), py::arg("target_offset_nelems") = 0,
          py::arg("async_op") = false,
          "Copies `tensor` into dst_rank's buffer at element target_offset_nelems (done on return).")
      .def(
          "signal",
          [](PyWindow& w, int dst_rank, bool async_op) {
            return std::make_shared<PyWork>(w.win->signal(dst_rank, async_op), KeepAlive{});
          },
          py::arg("dst_rank"), py::arg("async_op") = false,
          "Tells dst_rank that this rank's earlier puts to it have landed.")
      .def(
          "wait_signal",
          [](PyWindow& w, int peer_rank, bool async_op, py::object timeout) {
            auto to = to_timeout(timeout);
            commx::Work work;
            {
              py::gil_scoped_release nogil;
              work = w.win->wait_signal(peer_rank, async_op, to);
            }
            return std::make_shared<PyWork>(std::move(work), KeepAlive{});
          },
          py::arg("peer_rank"), py::arg("async_op") = false, py::arg("timeout") = py::none(),
          "Waits for the next signal from peer_rank (async_op=True: the Work completes then).");
}

// comm.new_window(count, dtype): collective.
void bind_comm_window(py::class_<PyComm, std::shared_ptr<PyComm>>& c) {
  c.def(
      "new_window",
      [](PyComm& p, int64_t count, py::object dtype) {
        if (!p.comm) throw commx::Error(commx::ErrorCode::kInvalidArgument, "this Comm object is empty");
        commx::DataType t = to_dtype(dtype);
        auto w = std::make_shared<PyWindow>();
        {
          py::gil_scoped_release nogil;
          w->win = p.comm->new_window(count, t);
        }
        return w;
      },
      py::arg("count"), py::arg("dtype"),
      "Collective: a one-sided window of `count` elements of `dtype` on every rank, zeroed.");
}

}  // namespace commx_py
