// Backends written in Python (torchcomms' register_backend(name, cls)): a Python class with
// init(ctx), run(op, async_op), and optionally supports/abort/finalize/accepts_device, adapted to
// commx::Backend. Ops reach Python as OpDesc objects whose tensors export DLPack views.
// Layer: Python bindings.
#include "module.h"

namespace commx_py {
namespace {

// A Work that is already complete: Python backends run each op before returning.
class DoneWork : public commx::WorkState {
 public:
  bool is_completed() override { return true; }
  commx::WorkStatus status() override { return commx::WorkStatus::kCompleted; }
  void wait_blocking() override {}
  std::exception_ptr error() override { return nullptr; }
};

// DLPack 1.x versioned structures (include/commx/dlpack.h has the legacy ones only); consumers
// such as numpy 2 treat legacy capsules as read-only, so writable views need these.
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

struct ManagedView {
  DLManagedTensor legacy{};
  DLManagedTensorVersioned versioned{};
  int64_t shape = 0;
};

void delete_legacy(DLManagedTensor* self) { delete static_cast<ManagedView*>(self->manager_ctx); }
void delete_versioned(DLManagedTensorVersioned* self) {
  delete static_cast<ManagedView*>(self->manager_ctx);
}

// A DLPack capsule over `t` (1-D); the consumer renames it "used_dltensor[_versioned]" and
// calls the deleter. `versioned` when the consumer asked for max_version >= 1.
py::capsule export_dlpack(const commx::Tensor& t, bool versioned) {
  auto* v = new ManagedView();
  PyObject* cap;
  if (versioned) {
    commx::to_dlpack(t, &v->versioned.dl_tensor, &v->shape);
    v->versioned.version = {1, 0};
    v->versioned.manager_ctx = v;
    v->versioned.deleter = delete_versioned;
    cap = PyCapsule_New(&v->versioned, "dltensor_versioned", [](PyObject* c) {
      if (PyCapsule_IsValid(c, "dltensor_versioned")) {  // never consumed
        auto* m =
            static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, "dltensor_versioned"));
        m->deleter(m);
      }
    });
  } else {
    commx::to_dlpack(t, &v->legacy.dl_tensor, &v->shape);
    v->legacy.manager_ctx = v;
    v->legacy.deleter = delete_legacy;
    cap = PyCapsule_New(&v->legacy, "dltensor", [](PyObject* c) {
      if (PyCapsule_IsValid(c, "dltensor")) {
        auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
        m->deleter(m);
      }
    });
  }
  if (cap == nullptr) {
    delete v;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

class PythonBackend : public commx::Backend {
 public:
  PythonBackend(std::string name, py::object impl)
      : name_(std::move(name)), impl_(std::move(impl)) {}
  ~PythonBackend() override {
    py::gil_scoped_acquire gil;
    impl_ = py::object();
  }
  std::string name() const override { return name_; }
  void init(const commx::BackendContext& ctx) override {
    call([&] { impl_.attr("init")(ctx); });
  }
  commx::Work run(const commx::OpDesc& op, bool async_op) override {
    call([&] { impl_.attr("run")(op, async_op); });
    return commx::Work(std::make_shared<DoneWork>());
  }
  bool supports(commx::Collective c, commx::DataType dtype, commx::ReduceKind kind) const override {
    bool ok = true;
    call([&] {
      if (py::hasattr(impl_, "supports"))
        ok = impl_.attr("supports")(commx::collective_name(c), commx::dtype_name(dtype),
                                    commx::reduce_kind_name(kind))
                 .cast<bool>();
    });
    return ok;
  }
  void abort() override {
    call([&] {
      if (py::hasattr(impl_, "abort")) impl_.attr("abort")();
    });
  }
  void finalize() override {
    call([&] {
      if (py::hasattr(impl_, "finalize")) impl_.attr("finalize")();
    });
  }
  bool accepts_device(const commx::Device& d) const override {
    bool ok = d.is_cpu();
    call([&] {
      if (py::hasattr(impl_, "accepts_device"))
        ok = impl_.attr("accepts_device")(d.str()).cast<bool>();
    });
    return ok;
  }
  const py::object& impl() const { return impl_; }

 private:
  template <typename F>
  void call(F&& f) const {
    py::gil_scoped_acquire gil;
    try {
      f();
    } catch (py::error_already_set& e) {
      throw error_from_python(e);
    }
  }
  std::string name_;
  py::object impl_;
};

py::object timedelta_of(commx::Timeout t) {
  return py::module_::import("datetime")
      .attr("timedelta")(py::arg("milliseconds") = static_cast<double>(t.count()));
}

}  // namespace

void bind_python_backends(py::module_& m) {
  py::class_<commx::Tensor>(m, "TensorView",
                            "A 1-D view of an op's buffer; numpy.from_dlpack/torch.from_dlpack "
                            "read it zero-copy.")
      .def_readonly("count", &commx::Tensor::count)
      .def_property_readonly("dtype",
                             [](const commx::Tensor& t) { return commx::dtype_name(t.dtype); })
      .def_property_readonly("device", [](const commx::Tensor& t) { return t.device.str(); })
      .def_property_readonly(
          "data_ptr", [](const commx::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data); })
      .def("__dlpack__",
           [](const commx::Tensor& t, py::args, py::kwargs kw) {
             bool versioned = false;
             if (kw.contains("max_version") && !kw["max_version"].is_none())
               versioned = py::tuple(kw["max_version"])[0].cast<int>() >= 1;
             return export_dlpack(t, versioned);
           })
      .def("__dlpack_device__", [](const commx::Tensor& t) {
        return py::make_tuple(t.device.is_cpu() ? 1 : 2,
                              t.device.is_cpu() ? 0 : std::max(t.device.index, 0));
      });

  py::class_<commx::P2POp>(m, "P2POp")
      .def_readonly("is_send", &commx::P2POp::is_send)
      .def_readonly("tensor", &commx::P2POp::tensor)
      .def_readonly("peer", &commx::P2POp::peer);

  py::class_<commx::OpDesc>(m, "OpDesc", "One op as a backend receives it.")
      .def_readonly("type", &commx::OpDesc::type)
      .def_property_readonly(
          "collective", [](const commx::OpDesc& o) { return commx::collective_name(o.collective); },
          "The canonical collective the op lowers to ('all_gather' for every all_gather form).")
      .def_readonly("seq", &commx::OpDesc::seq)
      .def_readonly("input", &commx::OpDesc::input)
      .def_readonly("output", &commx::OpDesc::output)
      .def_readonly("inputs", &commx::OpDesc::inputs)
      .def_readonly("outputs", &commx::OpDesc::outputs)
      .def_readonly("op", &commx::OpDesc::op)
      .def_readonly("root", &commx::OpDesc::root)
      .def_readonly("p2p", &commx::OpDesc::p2p)
      .def_readonly("hints", &commx::OpDesc::hints)
      .def_property_readonly("timeout",
                             [](const commx::OpDesc& o) { return timedelta_of(o.timeout); })
      .def_property_readonly("name", [](const commx::OpDesc& o) { return o.name(); })
      .def(
          "context",
          [](const commx::OpDesc& o, const commx::BackendContext& c) {
            return commx::op_context(c, o);
          },
          py::arg("ctx"), "The '[comm ...] op #seq: ' prefix for error messages.");

  py::class_<commx::BackendContext>(m, "BackendContext")
      .def_readonly("comm_name", &commx::BackendContext::comm_name)
      .def_readonly("rank", &commx::BackendContext::rank)
      .def_readonly("size", &commx::BackendContext::size)
      .def_property_readonly("device",
                             [](const commx::BackendContext& c) { return c.device.str(); })
      .def_readonly("store", &commx::BackendContext::store)
      .def_readonly("world_ranks", &commx::BackendContext::world_ranks)
      .def_property_readonly("hints",
                             [](const commx::BackendContext& c) { return c.options.hints; })
      .def_property_readonly("timeout", [](const commx::BackendContext& c) {
        return timedelta_of(c.options.timeout.value_or(commx::kDefaultTimeout));
      });

  m.def(
      "register_python_backend",
      [](const std::string& name, py::object factory) {
        // Leaked on purpose: the registry outlives the interpreter.
        auto* f = new py::object(std::move(factory));
        commx::register_backend(name, [name, f]() -> std::unique_ptr<commx::Backend> {
          py::gil_scoped_acquire gil;
          try {
            return std::make_unique<PythonBackend>(name, (*f)());
          } catch (py::error_already_set& e) {
            throw error_from_python(e);
          }
        });
      },
      py::arg("name"), py::arg("factory"));

  m.def(
      "_python_backend_of",
      [](uintptr_t address) -> py::object {
        auto* b = dynamic_cast<PythonBackend*>(reinterpret_cast<commx::Backend*>(address));
        return b ? b->impl() : py::object(py::none());
      },
      py::arg("address"));
}

}  // namespace commx_py
