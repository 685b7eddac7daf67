// Comm hooks for Python: one C++ pre-op, post-op and abort hook per comm, installed on first use,
// each calling a Python dispatcher (commx._hooks keeps the callbacks and their removal handles).
// Layer: Python bindings.
#include <tuple>

#include "comm.h"
#include "module.h"

namespace commx_py {
namespace {

// A Python callable held by a C++ hook, which may outlive the interpreter's good days: released
// with the GIL while Python runs, leaked once it is finalising.
bool python_gone() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

// A Python callable held by a C++ hook, which may outlive the interpreter's good days: released
// with the GIL while Python runs, leaked once it is finalising. Hooks run on threads without
// the GIL (the op's caller released it; the watchdog never had it): calls take it.
class PyCallable {
 public:
  explicit PyCallable(py::object f) : f_(new py::object(std::move(f)), Release{}) {}

  // Calls the function with what `make_args()` builds under the GIL.
  template <typename MakeArgs>
  void call(MakeArgs&& make_args) const {
    if (python_gone()) return;
    py::gil_scoped_acquire gil;
    try {
      std::apply(*f_, make_args());
    } catch (py::error_already_set& e) {
      throw error_from_python(e);  // a hook that raises fails the op, as a C++ hook would
    }
  }

 private:
  struct Release {
    void operator()(py::object* o) const {
      if (python_gone()) return;  // leak: no interpreter to decref in
      py::gil_scoped_acquire gil;
      delete o;
    }
  };
  std::shared_ptr<py::object> f_;
};

std::tuple<py::tuple> op_info(const commx::OpInfo& i) {
  return {py::make_tuple(commx::op_type_name(i.type), i.seq, commx::dtype_name(i.dtype), i.count,
                         i.root)};
}

}  // namespace

void bind_comm_hooks(py::class_<PyComm, std::shared_ptr<PyComm>>& c) {
  c.def(
       "_install_hooks",
       [](PyComm& p, py::object pre, py::object post, py::object on_abort) {
         if (!p.comm) throw commx::Error(commx::ErrorCode::kInvalidArgument, "this Comm object is empty");
         PyCallable pre_cb(std::move(pre)), post_cb(std::move(post)), abort_cb(std::move(on_abort));
         p.comm->register_pre_hook([pre_cb](const commx::Comm&, const commx::OpInfo& i) {
           pre_cb.call([&] { return op_info(i); });
         });
         p.comm->register_post_hook(
             [post_cb](const commx::Comm&, const commx::OpInfo& i, const commx::Work&) {
               post_cb.call([&] { return op_info(i); });
             });
         p.comm->register_abort_hook(
             [abort_cb](const commx::Comm&) { abort_cb.call([] { return std::tuple<>(); }); });
       },
       py::arg("pre"), py::arg("post"), py::arg("on_abort"),
       "Installs the comm's three C++ hooks, each calling the given Python function: pre/post "
       "with (op name, sequence number, dtype name, element count, root), on_abort with nothing.");
}

}  // namespace commx_py
