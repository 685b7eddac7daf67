// ReduceOp, OpType, DataType names and devices for Python.
// Layer: Python bindings.
#include <sstream>

#include "module.h"

namespace commx_py {
namespace {

// torchcomms' RedOpType names.
const char* torchcomms_name(commx::ReduceKind k) {
  switch (k) {
    case commx::ReduceKind::kSum:
      return "SUM";
    case commx::ReduceKind::kProduct:
      return "PRODUCT";
    case commx::ReduceKind::kMin:
      return "MIN";
    case commx::ReduceKind::kMax:
      return "MAX";
    case commx::ReduceKind::kAvg:
      return "AVG";
    case commx::ReduceKind::kBand:
      return "BAND";
    case commx::ReduceKind::kBor:
      return "BOR";
    case commx::ReduceKind::kBxor:
      return "BXOR";
    case commx::ReduceKind::kPremulSum:
      return "PREMUL_SUM";
  }
  return "?";
}

}  // namespace

void bind_types(py::module_& m) {
  py::class_<commx::ReduceOp> op(m, "ReduceOp",
                                 "A reduction: ReduceOp.SUM, ..., or ReduceOp.PREMUL_SUM(factor).");
  op.def_property_readonly(
        "kind",
        [](const commx::ReduceOp& o) { return std::string(commx::reduce_kind_name(o.kind)); })
      .def_property_readonly(
          "type", [](const commx::ReduceOp& o) { return std::string(torchcomms_name(o.kind)); })
      .def_readonly("factor", &commx::ReduceOp::factor)
      .def("__eq__", [](const commx::ReduceOp& a, const commx::ReduceOp& b) { return a == b; })
      .def("__hash__",
           [](const commx::ReduceOp& o) {
             return std::hash<double>()(o.factor) * 31 + static_cast<size_t>(o.kind);
           })
      .def("__repr__",
           [](const commx::ReduceOp& o) {
             std::ostringstream s;
             s << "ReduceOp." << torchcomms_name(o.kind);
             if (o.kind == commx::ReduceKind::kPremulSum) s << "(" << o.factor << ")";
             return s.str();
           })
      // PREMUL_SUM(factor): factor is a number or a one-element tensor (torchcomms accepts both).
      .def_static(
          "PREMUL_SUM",
          [](py::object factor) {
            if (py::hasattr(factor, "item")) factor = factor.attr("item")();
            return commx::ReduceOp::premul_sum(factor.cast<double>());
          },
          py::arg("factor"));
  op.attr("SUM") = commx::ReduceOp::SUM;
  op.attr("PRODUCT") = commx::ReduceOp::PRODUCT;
  op.attr("MIN") = commx::ReduceOp::MIN;
  op.attr("MAX") = commx::ReduceOp::MAX;
  op.attr("AVG") = commx::ReduceOp::AVG;
  op.attr("BAND") = commx::ReduceOp::BAND;
  op.attr("BOR") = commx::ReduceOp::BOR;
  op.attr("BXOR") = commx::ReduceOp::BXOR;

  py::enum_<commx::OpType> ot(m, "OpType");
  for (int i = 0; i < commx::kNumOpTypes; ++i) {
    auto t = static_cast<commx::OpType>(i);
    ot.value(commx::op_type_name(t), t);
  }

  m.def(
      "dtype_name",
      [](py::object obj) {
        // Accepts anything with __dlpack__ and names its commx DataType.
        KeepAlive keep;
        return std::string(commx::dtype_name(to_tensor(obj, keep, "tensor").dtype));
      },
      py::arg("tensor"));
  m.def(
      "parse_device", [](py::object d) { return to_device(d).str(); }, py::arg("device"),
      "Normalises a device ('cpu', 'cuda', 'cuda:1', torch.device) to commx's spelling.");
}

}  // namespace commx_py
