// _core.routed: a registry kernel bound to one case of a routed torch call, run on raw
// device pointers and a stream (DESIGN.md §8: the hot path of xpuruntime.pytorch).
//
// A PreparedCall is made once per case (op, dtypes, shapes, strides, attributes): the
// kernel is found in the one KernelRegistry, checked against the case (its KernelDef and
// supports(), the same checks the Dispatcher made when it chose it) and its workspace
// sized. Each run then wraps the caller's pointers as non-owning strided views with the
// case's shapes and strides and calls the kernel on the caller's stream: no DLPack
// capsule, no stream object, no event, no synchronization, no allocation beyond the
// view headers (a kernel may still copy an operand whose layout it cannot read, as it
// does inside plans). Declarations and exports only: the kernels are the registry's.
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/plugin.h"

namespace xpuruntime::bindings {
namespace {

// One operand of the case: what a view over a caller's pointer is made of.
struct Operand {
  DType dtype = DType::kFloat32;
  Shape shape;
  Shape strides;
  std::size_t nbytes = 0;  // the extent the view spans (0 for an empty operand)
};

Operand operand_of(const TensorSpec& s) {
  Operand o;
  o.dtype = s.dtype;
  o.shape = s.shape;
  o.strides = s.strides.empty() ? Tensor::contiguous_strides(s.shape) : s.strides;
  XRT_CHECK(o.strides.size() == o.shape.size(), InvalidArgumentError, "routed call: a spec has ",
            o.shape.size(), " dims and ", o.strides.size(), " strides");
  int64_t last = 0;
  for (std::size_t i = 0; i < o.shape.size(); ++i) {
    XRT_CHECK(o.shape[i] >= 0 && o.strides[i] >= 0, InvalidArgumentError,
              "routed call: negative sizes or strides are not supported");
    if (o.shape[i] == 0) return o;  // empty: no extent
    last += (o.shape[i] - 1) * o.strides[i];
  }
  o.nbytes = static_cast<std::size_t>(last + 1) * dtype_size(o.dtype);
  return o;
}

// Makes sure the kernels of the case's device kind are registered (the CUDA plugin's
// register when it loads).
void load_kernels_for(const Device& d) {
  DeviceManager::instance();
  if (!d.is_cpu()) load_plugin(plugin_for_device(d.kind));
}

class PreparedCall {
 public:
  PreparedCall(const std::string& kernel, OpContext ctx, std::string algorithm)
      : ctx_(std::move(ctx)), algorithm_(std::move(algorithm)) {
    load_kernels_for(ctx_.device);
    kernel_ = KernelRegistry::instance().find(ctx_.op, kernel);
    if (!kernel_) {
      std::string names;
      for (const auto& k : KernelRegistry::instance().kernels(ctx_.op)) {
        names += (names.empty() ? "" : ", ") + k->def().name;
      }
      XRT_THROW(UnsupportedOperationError, "routed ", ctx_.op, ": no kernel '", kernel,
                "' is registered in this process (registered: ", names.empty() ? "none" : names,
                "); load the device plugin that provides it or choose another kernel");
    }
    const Support s = KernelRegistry::check(*kernel_, ctx_);
    XRT_CHECK(s.ok, UnsupportedOperationError, "routed ", ctx_.op, ": kernel '", kernel, "' cannot run ",
              ctx_.case_key(), ": ", s.reason_code, " (", s.detail, ")");
    for (const auto& i : ctx_.inputs) inputs_.push_back(operand_of(i));
    for (const auto& o : ctx_.outputs) outputs_.push_back(operand_of(o));
    workspace_bytes_ = kernel_->workspace_bytes(ctx_);
  }

  std::size_t workspace_bytes() const { return workspace_bytes_; }
  const std::string& kernel_name() const { return kernel_->def().name; }
  const std::string& provider() const { return kernel_->def().provider; }
  const OpContext& context() const { return ctx_; }
  // Bytes each operand's view spans from its pointer (0 for an empty one): what a
  // caller's checking mode compares with the memory its tensors own.
  std::vector<std::size_t> input_extents() const { return extents(inputs_); }
  std::vector<std::size_t> output_extents() const { return extents(outputs_); }

  // Runs the kernel on the caller's pointers (one per input and output of the case, 0 for
  // an empty operand) on `stream`. Thread-safe (the kernel's run is).
  void run(const std::vector<uintptr_t>& inputs, const std::vector<uintptr_t>& outputs, uintptr_t stream,
           uintptr_t workspace, std::size_t workspace_bytes) const {
    XRT_CHECK(inputs.size() == inputs_.size() && outputs.size() == outputs_.size(), InvalidArgumentError,
              "routed ", ctx_.op, " (", kernel_name(), "): the case has ", inputs_.size(), " inputs and ",
              outputs_.size(), " outputs, the call passed ", inputs.size(), " and ", outputs.size());
    XRT_CHECK(workspace_bytes >= workspace_bytes_ && (workspace != 0 || workspace_bytes_ == 0),
              InvalidArgumentError, "routed ", ctx_.op, " (", kernel_name(), "): the kernel needs a ",
              workspace_bytes_, "-byte workspace, the call passed ", workspace_bytes, " bytes");
    KernelLaunch launch;
    launch.ctx = &ctx_;
    launch.stream = reinterpret_cast<NativeStream>(stream);
    launch.algorithm = algorithm_;
    launch.workspace = reinterpret_cast<void*>(workspace);
    launch.workspace_bytes = workspace_bytes;
    launch.inputs.reserve(inputs.size());
    launch.outputs.reserve(outputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) launch.inputs.push_back(view(inputs_[i], inputs[i]));
    for (std::size_t i = 0; i < outputs.size(); ++i) launch.outputs.push_back(view(outputs_[i], outputs[i]));
    kernel_->run(launch);
  }

 private:
  Tensor view(const Operand& o, uintptr_t ptr) const {
    XRT_CHECK(ptr != 0 || o.nbytes == 0, InvalidArgumentError, "routed ", ctx_.op, " (", kernel_name(),
              "): a null pointer for a non-empty operand");
    auto storage = std::make_shared<Storage>(reinterpret_cast<void*>(ptr), o.nbytes, ctx_.device, nullptr);
    return Tensor(std::move(storage), o.shape, o.strides, 0, o.dtype);
  }

  static std::vector<std::size_t> extents(const std::vector<Operand>& ops) {
    std::vector<std::size_t> out;
    out.reserve(ops.size());
    for (const auto& o : ops) out.push_back(o.nbytes);
    return out;
  }

  OpContext ctx_;
  std::string algorithm_;
  KernelPtr kernel_;
  std::vector<Operand> inputs_, outputs_;
  std::size_t workspace_bytes_ = 0;
};

}  // namespace

void bind_routed(py::module_& m) {
  py::module_ r = m.def_submodule(
      "routed", "Registry kernels bound to one case of a routed torch call, run on raw pointers.");
  py::class_<PreparedCall, std::shared_ptr<PreparedCall>>(
      r, "PreparedCall",
      "A registry kernel bound to one case (an OpContext with every operand's dtype, shape and "
      "strides): found, checked and its workspace sized once; run() on raw pointers and a stream.")
      .def(py::init([](const std::string& kernel, const OpContext& ctx, const std::string& algorithm) {
             return std::make_shared<PreparedCall>(kernel, ctx, algorithm);
           }),
           py::arg("kernel"), py::arg("ctx"), py::arg("algorithm") = "",
           "Raises UnsupportedOperationError (with the reason code) when the kernel is not "
           "registered or cannot run the case.")
      .def_property_readonly("workspace_bytes", &PreparedCall::workspace_bytes)
      .def_property_readonly("kernel", &PreparedCall::kernel_name)
      .def_property_readonly("provider", &PreparedCall::provider)
      .def_property_readonly("context", &PreparedCall::context)
      .def_property_readonly("input_extents", &PreparedCall::input_extents,
                             "Bytes each input's view spans from its pointer (0: empty).")
      .def_property_readonly("output_extents", &PreparedCall::output_extents,
                             "Bytes each output's view spans from its pointer (0: empty).")
      .def("run", &PreparedCall::run, py::arg("inputs"), py::arg("outputs"), py::arg("stream") = 0,
           py::arg("workspace") = 0, py::arg("workspace_bytes") = 0, py::call_guard<py::gil_scoped_release>(),
           "Runs the kernel on data pointers (one per input and output of the case, in its "
           "order; 0 for an empty operand) on `stream` (a native stream handle; 0 = the "
           "default stream / the CPU), with the caller's workspace. The caller keeps the "
           "memory alive and orders the stream; nothing is synchronized or allocated here.");
}

}  // namespace xpuruntime::bindings
