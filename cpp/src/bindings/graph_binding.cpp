// _core.graph: the native engine (compile an ONNX-derived graph into an
// ExecutionPlan, save/load plans, run them). The Python front end
// (xpuruntime.inference.frontend) builds the graph description; initializers and
// inputs cross zero-copy, outputs come back as numpy arrays owning the C++ buffer.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include "bindings/bindings.h"
#include "bindings/tensor_convert.h"
#include "graph/plan_verify.h"
#include "xpuruntime/cpu_plugin_abi.h"
#include "xpuruntime/error.h"
#include "xpuruntime/graph/compiler.h"
#include "xpuruntime/graph/executor.h"
#include "xpuruntime/provider.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/ops/op_schema.h"
#include "xpuruntime/plugin.h"

namespace xpuruntime::bindings {
namespace {

using graph::Attr;
using graph::Dim;
using graph::HostTensor;

DType dtype_of(const py::dtype& dt) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'f' && size == 8) return DType::kFloat64;
  if (kind == 'f' && size == 2) return DType::kFloat16;
  if (kind == 'i' && size == 8) return DType::kInt64;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 2) return DType::kInt16;
  if (kind == 'i' && size == 1) return DType::kInt8;
  if (kind == 'u' && size == 1) return DType::kUInt8;
  if (kind == 'b') return DType::kBool;
  XRT_THROW(InvalidArgumentError, "numpy dtype ", std::string(py::str(dt)),
            " is not supported by the native engine (float16/32/64, int8/16/32/64, uint8, bool)");
}

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return py::dtype("float32");
    case DType::kFloat64: return py::dtype("float64");
    case DType::kFloat16: return py::dtype("float16");
    case DType::kInt64: return py::dtype("int64");
    case DType::kInt32: return py::dtype("int32");
    case DType::kInt16: return py::dtype("int16");
    case DType::kInt8: return py::dtype("int8");
    case DType::kUInt8: return py::dtype("uint8");
    case DType::kBool: return py::dtype("bool");
    default: break;
  }
  XRT_THROW(UnsupportedOperationError, "dtype ", dtype_name(t), " has no numpy equivalent here");
}

// A host tensor viewing a C-contiguous numpy array; `keep` holds the array
// (released with the GIL) when the tensor may outlive the call.
HostTensor host_view(const py::array& a, bool keep) {
  XRT_CHECK(a.flags() & py::array::c_style, InvalidArgumentError,
            "arrays passed to the native engine must be C-contiguous");
  graph::Shape shape(a.shape(), a.shape() + a.ndim());
  std::shared_ptr<void> holder;
  if (keep) {
    auto* ref = new py::object(a);  // owned by the shared_ptr below
    holder = std::shared_ptr<void>(ref, [](void* p) {
      auto* o = static_cast<py::object*>(p);
      if (!python_alive()) return;  // interpreter gone: leak rather than touch it
      py::gil_scoped_acquire gil;
      delete o;
    });
  }
  return HostTensor::wrap(dtype_of(a.dtype()), shape, const_cast<void*>(a.data()), holder);
}

py::array to_numpy(const HostTensor& t) {
  auto* keep = new std::shared_ptr<void>(t.holder);
  py::capsule cap(keep, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
  return py::array(numpy_dtype(t.dtype), shape, {}, t.data, cap);
}

Attr attr_from_py(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return Attr::of_int(v.cast<bool>());
  if (py::isinstance<py::int_>(v)) return Attr::of_int(v.cast<int64_t>());
  if (py::isinstance<py::float_>(v)) return Attr::of_float(v.cast<double>());
  if (py::isinstance<py::str>(v)) return Attr::of_string(v.cast<std::string>());
  if (py::isinstance<py::bytes>(v)) return Attr::of_string(v.cast<std::string>());
  if (py::isinstance<py::array>(v)) {
    py::array a = py::array::ensure(v, py::array::c_style);
    HostTensor view = host_view(a, false);
    HostTensor own = HostTensor::alloc(view.dtype, view.shape);
    if (view.nbytes()) std::memcpy(own.data, view.data, view.nbytes());
    return Attr::of_tensor(own);
  }
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    py::sequence s = py::reinterpret_borrow<py::sequence>(v);
    bool all_int = true, all_num = true, all_str = true;
    for (const auto& e : s) {
      all_int = all_int && py::isinstance<py::int_>(e);
      all_num = all_num && (py::isinstance<py::int_>(e) || py::isinstance<py::float_>(e));
      all_str = all_str && (py::isinstance<py::str>(e) || py::isinstance<py::bytes>(e));
    }
    if (all_int) return Attr::of_ints(s.cast<std::vector<int64_t>>());
    if (all_num) return Attr::of_floats(s.cast<std::vector<double>>());
    if (all_str) {
      Attr a;
      a.kind = Attr::Kind::kStrings;
      for (const auto& e : s) a.strings.push_back(e.cast<std::string>());
      return a;
    }
  }
  XRT_THROW(InvalidModelError, "attribute value ", std::string(py::repr(v)),
            " is not supported by the native engine (graphs, sparse tensors and type protos are not)");
}

std::vector<Dim> dims_from_py(const py::handle& dims) {
  std::vector<Dim> out;
  for (const auto& d : dims) {
    Dim x;
    if (py::isinstance<py::int_>(d)) x.value = d.cast<int64_t>();
    else if (py::isinstance<py::str>(d)) x.symbol = d.cast<std::string>();
    out.push_back(x);
  }
  return out;
}

py::list dims_to_py(const std::optional<std::vector<Dim>>& dims, const std::optional<graph::Shape>& shape) {
  py::list l;
  if (dims) {
    for (const Dim& d : *dims) {
      if (d.value >= 0) l.append(d.value);
      else if (!d.symbol.empty()) l.append(d.symbol);
      else l.append(py::none());
    }
  } else if (shape) {
    for (int64_t d : *shape) l.append(d);
  }
  return l;
}

// Graph from the front end's description (see xpuruntime/inference/frontend.py).
graph::Graph graph_from_py(const py::dict& desc) {
  graph::Graph g;
  g.name = desc.contains("name") ? desc["name"].cast<std::string>() : "";
  for (const auto& item : desc["initializers"]) {
    auto t = item.cast<py::tuple>();
    const std::string name = t[0].cast<std::string>();
    py::array a = py::array::ensure(t[1], py::array::c_style);
    XRT_CHECK(a, InvalidModelError, "initializer '", name, "' is not an array");
    int id = g.value_id(name);
    g.values[id].constant = host_view(a, true);
    g.values[id].dtype = g.values[id].constant.dtype;
    g.values[id].dtype_known = true;
  }
  for (const auto& item : desc["inputs"]) {
    auto t = item.cast<py::tuple>();
    const std::string name = t[0].cast<std::string>();
    int id = g.value_id(name);
    if (g.values[id].constant.defined()) continue;  // an initializer with a default
    g.values[id].dtype = dtype_from_name(t[1].cast<std::string>());
    g.values[id].dtype_known = true;
    g.values[id].declared = dims_from_py(t[2]);
    g.inputs.push_back(id);
  }
  for (const auto& item : desc["nodes"]) {
    auto t = item.cast<py::tuple>();
    graph::Node n;
    n.name = t[0].cast<std::string>();
    n.op_type = t[1].cast<std::string>();
    n.domain = t[2].cast<std::string>();
    for (const auto& s : t[3]) {
      std::string nm = s.cast<std::string>();
      n.inputs.push_back(nm.empty() ? -1 : g.value_id(nm));
    }
    for (const auto& s : t[4]) {
      std::string nm = s.cast<std::string>();
      n.outputs.push_back(nm.empty() ? -1 : g.value_id(nm));
    }
    for (const auto& [k, v] : t[5].cast<py::dict>()) n.attrs[k.cast<std::string>()] = attr_from_py(v);
    g.add_node(std::move(n));
  }
  for (const auto& item : desc["outputs"]) {
    auto t = item.cast<py::tuple>();
    const std::string name = t[0].cast<std::string>();
    int id = g.find(name);
    XRT_CHECK(id >= 0, InvalidModelError, "graph output '", name,
              "' is not produced by any node, input or initializer");
    g.values[id].declared = dims_from_py(t[2]);
    g.outputs.push_back(id);
  }
  return g;
}

py::list io_info(const graph::ExecutionPlan& p, const std::vector<int>& ids) {
  py::list l;
  for (int id : ids) {
    const auto& v = p.values[id];
    l.append(py::make_tuple(v.name, std::string(dtype_name(v.dtype)), dims_to_py(v.declared, v.shape)));
  }
  return l;
}

// The GEMM kernel a step runs: its own kernel for MatMul/Gemm, the recorded
// sub-decision "<node>/gemm" for a convolution that lowers to one; "" otherwise.
std::string gemm_of(const graph::ExecutionPlan& p, const graph::PlanStep& s) {
  if (s.op_key == "matmul") return s.kernel;
  const std::string sub = s.node.name + "/gemm";
  for (const std::string& text : p.decisions) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object() && j.value("node", "") == sub && j.value("op", "") == "matmul")
      return j.value("chosen", "");
  }
  return "";
}

}  // namespace

void bind_graph(py::module_& m) {
  py::module_ g = m.def_submodule("graph", "The native engine: compile, save/load and run plans.");
  g.attr("PLAN_FORMAT_VERSION") = graph::kPlanFormatVersion;
  g.def(
      "seal_plan",
      [](const py::bytes& b) {
        std::string bytes(b);
        graph::seal_plan_bytes(bytes);
        return py::bytes(bytes);
      },
      py::arg("data"),
      "Plan file bytes with their SHA-256 digests rewritten for their current contents. "
      "For tests that edit a plan's header on purpose: the loader then checks the edit "
      "itself instead of reporting a checksum mismatch.");

  py::class_<graph::ExecutionPlan, std::shared_ptr<graph::ExecutionPlan>>(g, "ExecutionPlan")
      .def("save", &graph::ExecutionPlan::save, py::arg("path"),
           py::call_guard<py::gil_scoped_release>())
      .def("serialize", [](const graph::ExecutionPlan& p) { return py::bytes(p.serialize()); })
      .def_static(
          "load",
          [](const std::string& path, const std::string& device, const std::string& fp) {
            graph::PlanExpectation e{device, fp};
            return std::make_shared<graph::ExecutionPlan>(graph::ExecutionPlan::load(path, e));
          },
          py::arg("path"), py::arg("device") = "", py::arg("policy_fingerprint") = "")
      .def_static(
          "deserialize",
          [](const py::bytes& b, const std::string& device, const std::string& fp) {
            graph::PlanExpectation e{device, fp};
            std::string bytes(b);
            py::gil_scoped_release nogil;  // digests and checks of a large plan take a while
            return std::make_shared<graph::ExecutionPlan>(
                graph::ExecutionPlan::deserialize(std::move(bytes), e));
          },
          py::arg("data"), py::arg("device") = "", py::arg("policy_fingerprint") = "")
      .def("summary", &graph::ExecutionPlan::summary)
      .def_property_readonly("format_version", [](const graph::ExecutionPlan& p) { return p.header.format_version; })
      .def_property_readonly("device", [](const graph::ExecutionPlan& p) { return p.header.device; })
      .def_property_readonly("policy_fingerprint", [](const graph::ExecutionPlan& p) { return p.header.policy_fingerprint; })
      .def_property_readonly("model_hash", [](const graph::ExecutionPlan& p) { return p.header.model_hash; })
      .def_property_readonly("environment", [](const graph::ExecutionPlan& p) { return p.header.environment; })
      .def_property_readonly("preview", [](const graph::ExecutionPlan& p) { return p.header.preview; },
                             "True for an offline preview (compiled with dry_run): not runnable")
      .def_property_readonly("threads", [](const graph::ExecutionPlan& p) { return p.header.threads; },
                             "ExecutionPolicy.threads the plan runs with (0 = the default)")
      .def_property_readonly("decisions", [](const graph::ExecutionPlan& p) { return p.decisions; })
      .def_property_readonly("pass_log", [](const graph::ExecutionPlan& p) { return p.pass_log; })
      .def_property_readonly(
          "timings_ms", [](const graph::ExecutionPlan& p) { return p.timings_ms; },
          "Where the build or load went (ms): read, verify, parse, passes, prepare, "
          "prepare:<kernel>")
      .def_property_readonly("inputs", [](const graph::ExecutionPlan& p) { return io_info(p, p.inputs); })
      .def_property_readonly("outputs", [](const graph::ExecutionPlan& p) { return io_info(p, p.outputs); })
      .def_property_readonly("memory", [](const graph::ExecutionPlan& p) {
        py::dict d;
        d["arena_bytes"] = p.memory.arena_bytes;
        d["intermediate_bytes"] = p.memory.intermediate_bytes;
        d["constant_bytes"] = p.memory.constant_bytes;
        d["dynamic_values"] = p.memory.dynamic_values;
        d["static_values"] = p.memory.static_values;
        return d;
      })
      .def_property_readonly("steps", [](const graph::ExecutionPlan& p) {
        py::list l;
        for (const auto& s : p.steps) {
          py::dict d;
          d["name"] = s.node.name;
          d["op_type"] = s.node.op_type;
          d["op_key"] = s.op_key;
          d["kernel"] = s.kernel;
          d["rule"] = s.rule;
          d["view"] = s.alias;
          d["fused"] = s.node.has("_ops") ? s.node.attr_str("_ops", "") : std::string();
          d["activation"] = s.node.attr_str("_act", "");
          d["gemm"] = gemm_of(p, s);
          // The step's workspace: planned in the arena (bytes, -1 offset: none) and what
          // its prepared kernel asks for (above the planned bytes: the shared workspace).
          d["workspace_bytes"] = s.workspace_bytes;
          d["prepared_workspace_bytes"] = s.prepared ? s.prepared->workspace_bytes() : 0;
          py::list shapes;
          for (int o : s.node.outputs)
            if (o >= 0) shapes.append(dims_to_py(std::nullopt, p.values[o].shape));
          d["output_shapes"] = shapes;
          l.append(d);
        }
        return l;
      });

  py::class_<graph::Executor, std::shared_ptr<graph::Executor>>(g, "Executor")
      .def(py::init([](std::shared_ptr<graph::ExecutionPlan> p) {
             return std::make_shared<graph::Executor>(std::move(p));
           }),
           py::arg("plan"))
      .def("describe_inputs", &graph::Executor::describe_inputs)
      .def(
          "run",
          [](const graph::Executor& ex, const py::dict& inputs, const py::object& output_names) {
            std::vector<std::string> names;
            std::vector<HostTensor> tensors;
            std::vector<py::array> keep;  // alive while the GIL is released
            for (const auto& [k, v] : inputs) {
              names.push_back(k.cast<std::string>());
              XRT_CHECK(py::isinstance<py::array>(v), InvalidArgumentError, "input '",
                        names.back(), "' must be a numpy array here");
              py::array a = py::reinterpret_borrow<py::array>(v);
              keep.push_back(a);
              tensors.push_back(host_view(a, false));
            }
            std::vector<std::string> outs;
            if (!output_names.is_none()) outs = output_names.cast<std::vector<std::string>>();
            std::vector<HostTensor> res;
            {
              py::gil_scoped_release nogil;
              res = ex.run(names, tensors, outs);
            }
            py::list l;
            for (const HostTensor& t : res) l.append(to_numpy(t));
            return l;
          },
          py::arg("inputs"), py::arg("output_names") = py::none())
      .def(
          "run_io",
          [](const graph::Executor& ex, const py::dict& inputs, const py::object& output_names,
             const py::object& outputs, int64_t stream, bool use_graph) {
            graph::RunRequest req;
            std::vector<Tensor> keep;  // the callers' tensors stay alive while the GIL is released
            const Device plan_dev = ex.provider().device();
            auto edge = [&](const std::string& what, const py::handle& obj) {
              Tensor t = tensor_from_python(obj);
              XRT_CHECK(t.is_contiguous(), InvalidArgumentError, what,
                        " must be contiguous (call .contiguous() on it first)");
              const Device d = t.device();
              XRT_CHECK(d.is_cpu() || (d.kind == plan_dev.kind && d.index == plan_dev.index),
                        InvalidArgumentError, what, " is on ", d.str(), " but the plan runs on ",
                        plan_dev.str(), "; move it there first");
              keep.push_back(t);
              return graph::EdgeTensor{t.dtype(), t.shape(), t.data_ptr(), !d.is_cpu()};
            };
            for (const auto& [k, v] : inputs) {
              req.input_names.push_back(k.cast<std::string>());
              req.inputs.push_back(edge("input '" + req.input_names.back() + "'", v));
            }
            if (!output_names.is_none()) req.output_names = output_names.cast<std::vector<std::string>>();
            if (!outputs.is_none()) {
              for (const auto& o : outputs.cast<py::sequence>())
                req.outputs.push_back(edge("output buffer " + std::to_string(req.outputs.size()), o));
            }
            req.stream = reinterpret_cast<NativeStream>(static_cast<uintptr_t>(stream));
            req.use_graph = use_graph;
            graph::RunStats st;
            std::vector<HostTensor> res;
            {
              py::gil_scoped_release nogil;
              res = ex.run(req, &st);
            }
            py::list l;
            for (const HostTensor& t : res) l.append(t.defined() ? py::object(to_numpy(t)) : py::none());
            py::dict d;
            d["steps_run"] = st.steps_run;
            d["copies_to_device"] = st.copies_to_device;
            d["copies_to_host"] = st.copies_to_host;
            d["copies_on_device"] = st.copies_on_device;
            d["copy_bytes"] = st.copy_bytes;
            d["device_copy_bytes"] = st.device_copy_bytes;
            d["dynamic_bytes_peak"] = st.dynamic_bytes_peak;
            d["graph_captured"] = st.graph_captured;
            d["graph_replayed"] = st.graph_replayed;
            return py::make_tuple(l, d);
          },
          py::arg("inputs"), py::arg("output_names") = py::none(), py::arg("outputs") = py::none(),
          py::arg("stream") = 0, py::arg("use_graph") = false,
          "Runs with host or device tensors (anything DLPack or numpy), optional caller output "
          "buffers (written in place), the caller's stream (a raw handle; 0: the run's own) and "
          "graph replay. Returns (outputs: numpy or None where a buffer was given, stats dict).")
      .def("timings_ms", &graph::Executor::timings_ms,
           "Set-up time (ms): upload (constants), graph_first_run and graph_capture once a "
           "graph run captured the plan")
      .def("graph_status", &graph::Executor::graph_status,
           "'captured', 'not captured yet', or why the plan cannot be replayed as a graph");

  g.def(
      "compile",
      [](const py::dict& desc, const KernelPolicy& kp, const ExecutionPolicy& ep,
         const std::string& model_hash, const std::map<std::string, graph::Shape>& shapes,
         bool fold, bool fuse, const std::string& device, bool dry_run,
         const std::string& target) {
        graph::CompileOptions o;
        o.device = device;
        o.dry_run = dry_run;
        o.target = target;
        o.kernel_policy = kp;
        o.exec_policy = ep;
        o.model_hash = model_hash;
        o.input_shapes = shapes;
        o.fold_constants = fold;
        o.fold_batchnorm = fuse;
        o.fuse = fuse;
        graph::Graph gr = graph_from_py(desc);
        py::gil_scoped_release nogil;
        return std::make_shared<graph::ExecutionPlan>(graph::compile(std::move(gr), o));
      },
      py::arg("graph"), py::arg("kernel_policy"), py::arg("exec_policy"),
      py::arg("model_hash") = "", py::arg("input_shapes") = std::map<std::string, graph::Shape>{},
      py::arg("fold") = true, py::arg("fuse") = true, py::arg("device") = "cpu",
      py::arg("dry_run") = false, py::arg("target") = "",
      "Compiles a graph description into an ExecutionPlan for `device`. dry_run=True "
      "compiles an offline preview for `target` (CUDA: 'sm_90'; '' = this machine's "
      "device): passes, fusions and kernel choices, no kernel prepared, no device "
      "touched; the plan is for reading (summary, decisions), not for running or saving.");
  g.def(
      "check_supported",
      [](const py::dict& desc, const std::string& device) {
        graph::Graph gr = graph_from_py(desc);
        py::gil_scoped_release nogil;
        graph::check_supported(gr, device);
      },
      py::arg("graph"), py::arg("device") = "cpu",
      "Raises UnsupportedOperationError listing every op of the graph the native engine "
      "cannot run on `device`, all at once (what compile() checks first).");
  g.def(
      "node_support",
      [](const py::dict& desc, const std::string& device) {
        graph::Graph gr = graph_from_py(desc);
        std::vector<graph::NodeSupport> rows;
        {
          py::gil_scoped_release nogil;
          rows = graph::node_support(gr, device);
        }
        py::list l;
        for (const graph::NodeSupport& s : rows) {
          py::dict d;
          d["node"] = s.node;
          d["op_type"] = s.op_type;
          d["domain"] = s.domain;
          d["op_key"] = s.op_key;
          d["supported"] = s.supported;
          d["folds"] = s.folds;
          d["reason_code"] = s.reason_code;
          d["detail"] = s.detail;
          d["kernels"] = s.kernels;
          l.append(d);
        }
        return l;
      },
      py::arg("graph"), py::arg("device") = "cpu",
      "Per node, in topological order: whether the native engine can run it on `device` "
      "(dict: node, op_type, domain, op_key, supported, folds, reason_code, detail, kernels). "
      "The registry check of check_supported(), without kernel preparation or a device.");
  g.def(
      "scratch_peak_bytes",
      [] {
        // The CPU plugin's entry (the CPU kernels' scratch lives there).
        const auto fn = plugin_entry<cpu::ScratchPeakBytesEntry>("cpu", cpu::entry::kScratchPeakBytes);
        XRT_CHECK(fn != nullptr, BackendUnavailableError,
                  "scratch_peak_bytes: the CPU plugin does not serve '",
                  cpu::entry::kScratchPeakBytes, "' (plugin status: see _core.plugin_statuses())");
        return fn();
      },
        "Largest per-thread scratch buffer the CPU kernels used so far (im2col), in bytes.");
  g.def("policy_fingerprint", &graph::policy_fingerprint, py::arg("kernel_policy"),
        py::arg("exec_policy"));
  g.def(
      "supported_ops",
      [](const std::string& device) {
        // One row per (op type, kernel) the native engine runs on the device; MatMul and
        // Gemm are dispatched among the matmul kernels.
        const graph::ProviderPtr provider = graph::ProviderRegistry::instance().get(device);
        const KernelRegistry& registry = KernelRegistry::instance();
        py::list l;
        for (const std::string& t : ops::schema_op_types()) {
          const ops::OpSchema* s = ops::find_schema(t);
          if (!s->domain.empty()) continue;  // fused ops the compiler makes
          // Kernels a plan step can hold: not the torch-side ones a caller must request by
          // name, nor those that allocate their own outputs (Python kernels).
          std::vector<KernelDef> defs;
          for (KernelDef& d : registry.list(s->key, provider->kernel_device()))
            if (!d.requested_only && !d.allocates_outputs) defs.push_back(std::move(d));
          if (defs.empty()) continue;
          py::list schema_dtypes;
          for (DType x : s->dtypes) schema_dtypes.append(std::string(dtype_name(x)));
          if (s->key == "matmul") {
            l.append(py::make_tuple(t, s->key, std::string("(matmul kernels)"), schema_dtypes,
                                    s->description));
            continue;
          }
          for (const KernelDef& d : defs) {
            py::list dts;
            for (DType x : d.dtypes) dts.append(std::string(dtype_name(x)));
            l.append(py::make_tuple(t, s->key, d.name, d.dtypes.empty() ? schema_dtypes : dts,
                                    d.description.empty() ? s->description : d.description));
          }
        }
        return l;
      },
      py::arg("device") = "cpu",
      "Rows (op_type, op_key, kernel, dtypes, description) of what the native engine runs on "
      "`device`.");
  g.def("providers", [] { return graph::ProviderRegistry::instance().names(); },
        "Device kinds the native engine has an execution provider for.");
}

}  // namespace xpuruntime::bindings
