// Work for Python: wait (GIL released), wait_blocking, is_completed, status; tensors stay alive
// until the op ends even if the Work object is dropped.
// Layer: Python bindings.
#include "module.h"
#include "work.h"

namespace commx_py {
namespace {

struct Orphan {
  commx::Work work;
  KeepAlive keep;
};
// Leaked on purpose (see errors.cc): holds Python objects past interpreter teardown.
std::vector<Orphan>& orphans() {
  static auto* v = new std::vector<Orphan>();
  return *v;
}

}  // namespace

PyWork::~PyWork() {
  if (!keep_.empty() && !work_.is_completed())
    orphans().push_back(Orphan{std::move(work_), std::move(keep_)});
}

void PyWork::release_if_done() {
  if (work_.is_completed()) keep_.clear();
}

void PyWork::wait() {
  // GPU: the stream to order after the op is torch's current one (the backend alone would use
  // the legacy default stream, which does not order torch's non-blocking side streams).
  void* stream = cuda_device_ != kNotCuda ? torch_current_stream(cuda_device_) : nullptr;
  {
    py::gil_scoped_release nogil;
    if (cuda_device_ != kNotCuda)
      work_.wait_stream(stream);
    else
      work_.wait();
  }
  // On a GPU, wait() only orders the current stream after the op: the tensors stay held.
  release_if_done();
}

void PyWork::wait_blocking() {
  {
    py::gil_scoped_release nogil;
    work_.wait_blocking();
  }
  keep_.clear();
}

bool PyWork::is_completed() {
  bool done = work_.is_completed();
  if (done) keep_.clear();
  return done;
}

void prune_orphans() {
  auto& v = orphans();
  for (size_t i = 0; i < v.size();) {
    if (v[i].work.is_completed()) {
      v[i] = std::move(v.back());
      v.pop_back();
    } else {
      ++i;
    }
  }
}

void bind_work(py::module_& m) {
  py::enum_<commx::WorkStatus>(m, "WorkStatus")
      .value("NOT_STARTED", commx::WorkStatus::kNotStarted)
      .value("INPROGRESS", commx::WorkStatus::kInProgress)
      .value("COMPLETED", commx::WorkStatus::kCompleted)
      .value("TIMEDOUT", commx::WorkStatus::kTimedOut)
      .value("ERROR", commx::WorkStatus::kError);

  py::class_<PyWork, std::shared_ptr<PyWork>>(m, "Work", "The handle of an issued op.")
      .def("wait", &PyWork::wait,
           "CPU: blocks until the op ends. GPU: makes the current stream (torch's current "
           "stream when torch is imported) wait for it. Raises the op's error if it failed.")
      .def("wait_blocking", &PyWork::wait_blocking, "Blocks the calling thread until the op ends.")
      .def("is_completed", &PyWork::is_completed)
      .def("status", &PyWork::status)
      .def(
          "exception",
          [](PyWork& w) -> py::object {
            std::exception_ptr e = w.work().error();
            if (!e) return py::none();
            try {
              std::rethrow_exception(e);
            } catch (const commx::Error& err) {
              raise_python_error(err);
              py::error_already_set py_err;
              return py_err.value();
            } catch (const std::exception& other) {
              return py::module_::import("builtins").attr("RuntimeError")(other.what());
            }
          },
          "The error of a failed op (a commx.Error), else None.");
}

}  // namespace commx_py
