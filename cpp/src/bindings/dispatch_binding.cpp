// KernelRegistry, Dispatcher, OpContext and Python-registered kernels (DESIGN.md §4).
// C++ Decisions cross into Python as the dataclasses of xpuruntime.dispatch.decision.
// Selection and dispatch release the GIL; Python kernels take it back to run.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cctype>
#include <memory>

#include "bindings/bindings.h"
#include "bindings/tensor_convert.h"
#include "xpuruntime/dispatcher.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/stream.h"

namespace xpuruntime::bindings {
namespace {

// ---- conversions ---------------------------------------------------------------

py::object decision_module() {
  return py::module_::import("xpuruntime.dispatch.decision");
}

py::object to_py(const Decision& d, const py::object& mod) {
  py::list cands;
  for (const auto& c : d.candidates) {
    cands.append(mod.attr("Candidate")(c.kernel, c.verdict, c.reason_code, c.detail,
                                       c.time_ms ? py::cast(*c.time_ms) : py::none(), c.algorithm));
  }
  py::list shapes;
  for (const auto& s : d.shapes) shapes.append(py::cast(s));
  py::object pin = py::none();
  if (d.pin) {
    py::dict p;
    p["kernel"] = d.pin->kernel;
    p["algorithm"] = d.pin->algorithm;
    pin = p;
  }
  py::object timings = d.timings.empty() ? py::object(py::none()) : py::object(py::cast(d.timings));
  return mod.attr("Decision")(
      d.op, d.device, py::cast(d.dtypes), shapes, cands, d.chosen, d.rule, py::arg("node") = d.node,
      py::arg("pin") = pin, py::arg("timings") = timings, py::arg("detail") = d.detail,
      py::arg("algorithm") = d.algorithm, py::arg("key") = d.key, py::arg("seq") = d.seq,
      py::arg("hits") = d.hits);
}

// A Python Decision (xpuruntime.dispatch.decision.Decision) as the C++ struct, so
// decisions made outside a select() (a kernel refusing a case only when it ran) land
// in the same log.
Decision from_py(const py::handle& o) {
  Decision d;
  d.op = o.attr("op").cast<std::string>();
  d.node = o.attr("node").cast<std::string>();
  d.device = o.attr("device").cast<std::string>();
  d.dtypes = o.attr("dtypes").cast<std::vector<std::string>>();
  for (const auto& s : o.attr("shapes")) d.shapes.push_back(s.cast<Shape>());
  for (const auto& c : o.attr("candidates")) {
    Candidate k;
    k.kernel = c.attr("kernel").cast<std::string>();
    k.verdict = c.attr("verdict").cast<std::string>();
    k.reason_code = c.attr("reason_code").cast<std::string>();
    k.detail = c.attr("detail").cast<std::string>();
    py::object t = c.attr("time_ms");
    if (!t.is_none()) k.time_ms = t.cast<double>();
    k.algorithm = c.attr("algorithm").cast<std::string>();
    d.candidates.push_back(std::move(k));
  }
  d.chosen = o.attr("chosen").cast<std::string>();
  d.algorithm = o.attr("algorithm").cast<std::string>();
  d.rule = o.attr("rule").cast<std::string>();
  py::object pin = o.attr("pin");
  if (!pin.is_none()) {
    d.pin = KernelPin{pin["kernel"].cast<std::string>(), pin["algorithm"].cast<std::string>()};
  }
  py::object timings = o.attr("timings");
  if (!timings.is_none()) d.timings = timings.cast<std::map<std::string, double>>();
  d.detail = o.attr("detail").cast<std::string>();
  d.key = o.attr("key").cast<std::string>();
  d.hits = o.attr("hits").cast<uint64_t>();
  return d;
}

py::object to_py(const Decision& d) { return to_py(d, decision_module()); }

// A policy argument: None (-> nullopt), a _core.KernelPolicy, or a wrapper with _get_internal().
std::optional<KernelPolicy> policy_arg(const py::object& p) {
  if (p.is_none()) return std::nullopt;
  if (py::isinstance<KernelPolicy>(p)) return p.cast<KernelPolicy>();
  if (py::hasattr(p, "_get_internal")) return p.attr("_get_internal")().cast<KernelPolicy>();
  XRT_THROW(InvalidArgumentError, "expected a KernelPolicy, got ",
            std::string(py::str(p.get_type().attr("__name__"))));
}

std::optional<ExecutionPolicy> exec_policy_arg(const py::object& p) {
  if (p.is_none()) return std::nullopt;
  if (py::isinstance<ExecutionPolicy>(p)) return p.cast<ExecutionPolicy>();
  if (py::hasattr(p, "_get_internal")) return p.attr("_get_internal")().cast<ExecutionPolicy>();
  XRT_THROW(InvalidArgumentError, "expected an ExecutionPolicy, got ",
            std::string(py::str(p.get_type().attr("__name__"))));
}

// Attributes travel as text (OpContext::attrs); Python bools become "1"/"0".
std::map<std::string, std::string> attrs_arg(const py::object& attrs) {
  std::map<std::string, std::string> out;
  if (attrs.is_none()) return out;
  for (const auto& [k, v] : attrs.cast<py::dict>()) {
    std::string key = py::str(k);
    if (py::isinstance<py::bool_>(v)) {
      out[key] = v.cast<bool>() ? "1" : "0";
    } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
      std::string s;
      for (const auto& e : v) s += (s.empty() ? "" : ",") + std::string(py::str(e));
      out[key] = s;
    } else {
      out[key] = py::str(v);
    }
  }
  return out;
}

// Text attribute -> int, float, or str for Python kernels.
py::object attr_value(const std::string& s) {
  if (s.empty()) return py::str(s);
  try {
    std::size_t pos = 0;
    long long i = std::stoll(s, &pos);
    if (pos == s.size()) return py::int_(i);
  } catch (const std::exception&) {
  }
  try {
    std::size_t pos = 0;
    double f = std::stod(s, &pos);
    if (pos == s.size()) return py::float_(f);
  } catch (const std::exception&) {
  }
  return py::str(s);
}

TensorSpec spec_arg(const py::handle& h) {
  if (py::isinstance<TensorSpec>(h)) return h.cast<TensorSpec>();
  auto t = h.cast<py::tuple>();
  XRT_CHECK(t.size() == 2 || t.size() == 3, InvalidArgumentError,
            "a tensor spec is (dtype, shape) or (dtype, shape, strides), got ",
            std::string(py::repr(h)));
  TensorSpec s;
  s.dtype = dtype_from_name(t[0].cast<std::string>());
  s.shape = t[1].cast<Shape>();
  if (t.size() == 3) s.strides = t[2].cast<Shape>();
  return s;
}

NativeStream current_stream_of(const Device& d) {
  return !d.is_cpu() ? StreamManager::instance().current_stream(d)->native() : nullptr;
}

// ---- Python kernels -------------------------------------------------------------

// A kernel whose supports/run/algorithms are Python callables. Holds the callables
// (GIL needed to touch them) and takes the GIL for every call.
class PyKernel final : public Kernel {
 public:
  PyKernel(KernelDef def, py::object fn, py::object supports, py::object algorithms, bool numpy_io)
      : Kernel(std::move(def)),
        fn_(std::move(fn)),
        supports_(std::move(supports)),
        algorithms_(std::move(algorithms)),
        numpy_io_(numpy_io),
        has_supports_(!supports_.is_none()),
        has_algorithms_(!algorithms_.is_none()) {}

  ~PyKernel() override {
    if (!python_alive()) {  // the interpreter is gone: leak rather than touch it
      fn_.release();
      supports_.release();
      algorithms_.release();
      return;
    }
    py::gil_scoped_acquire gil;
    fn_ = py::object();
    supports_ = py::object();
    algorithms_ = py::object();
  }

  Support supports(const OpContext& ctx) const override {
    if (!has_supports_) return Support::yes();  // no GIL needed: most kernels take everything
    if (!python_alive()) return Support::no(reason::kBackendUnavailable, "Python is finalizing");
    py::gil_scoped_acquire gil;
    try {
      py::object r = supports_(ctx);
      // True / False / (False, "why") / (False, reason_code, "why") / a string naming why not.
      if (py::isinstance<py::tuple>(r)) {
        auto t = r.cast<py::tuple>();
        bool ok = t.size() > 0 && py::bool_(t[0]);
        if (ok) return Support::yes();
        if (t.size() > 2) return Support::no(py::str(t[1]), py::str(t[2]));
        return Support::no(reason::kPythonSupportsFalse, t.size() > 1 ? std::string(py::str(t[1])) : "");
      }
      if (py::isinstance<py::str>(r)) return Support::no(reason::kPythonSupportsFalse, r.cast<std::string>());
      if (py::bool_(r)) return Support::yes();
      return Support::no(reason::kPythonSupportsFalse, "supports() returned False");
    } catch (py::error_already_set& e) {
      return Support::no(reason::kPythonSupportsError, std::string("supports() raised ") + e.what());
    }
  }

  std::vector<std::string> algorithms(const OpContext& ctx) const override {
    if (!has_algorithms_ || !python_alive()) return {};
    py::gil_scoped_acquire gil;
    if (PyCallable_Check(algorithms_.ptr())) return algorithms_(ctx).cast<std::vector<std::string>>();
    return algorithms_.cast<std::vector<std::string>>();
  }

  void run(KernelLaunch& l) const override {
    XRT_CHECK(python_alive(), BackendUnavailableError, "Python kernel '", def().name,
              "' cannot run: the interpreter is finalizing");
    py::gil_scoped_acquire gil;
    py::list args;
    for (const auto& t : l.inputs) {
      args.append(numpy_io_ && t.device().is_cpu() ? py::object(tensor_to_numpy(t)) : py::cast(t));
    }
    py::dict kwargs;
    if (l.ctx) {
      for (const auto& [k, v] : l.ctx->attrs) kwargs[py::str(k)] = attr_value(v);
    }
    if (has_algorithms_) kwargs["algorithm"] = l.algorithm;
    py::object r;
    try {
      r = fn_(*py::tuple(args), **kwargs);
    } catch (py::error_already_set& e) {
      XRT_THROW(XpuRuntimeError, "Python kernel '", def().name, "' for op '", def().op,
                "' raised: ", e.what());
    }
    std::vector<py::object> outs;
    if (py::isinstance<py::tuple>(r) || py::isinstance<py::list>(r)) {
      for (const auto& o : r) outs.push_back(py::reinterpret_borrow<py::object>(o));
    } else if (!r.is_none()) {
      outs.push_back(r);
    }
    if (l.outputs.empty()) {
      for (const auto& o : outs) l.outputs.push_back(tensor_from_python(o));
      return;
    }
    XRT_CHECK(outs.size() == l.outputs.size(), InvalidArgumentError, "Python kernel '", def().name,
              "' for op '", def().op, "' returned ", outs.size(), " outputs, the call has ",
              l.outputs.size());
    for (std::size_t i = 0; i < outs.size(); ++i) {
      Tensor src = tensor_from_python(outs[i]);
      Tensor& dst = l.outputs[i];
      if (src.data_ptr() == dst.data_ptr() && src.shape() == dst.shape()) continue;  // wrote in place
      XRT_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), InvalidArgumentError,
                "Python kernel '", def().name, "' output ", i, " is ", src.str(), ", expected ",
                dst.str());
      py::gil_scoped_release release;
      dst.copy_from(src, l.stream);
    }
  }

 private:
  py::object fn_;
  py::object supports_;
  py::object algorithms_;
  bool numpy_io_;
  bool has_supports_;  // fixed at construction, so checks need no GIL
  bool has_algorithms_;
};

// Python handle of a ScopedPolicy, so a context manager can end it deterministically.
struct ScopeHandle {
  std::unique_ptr<Dispatcher::ScopedPolicy> scope;
  void close() { scope.reset(); }
};

std::shared_ptr<KernelRegistry> global_registry() {
  return {&KernelRegistry::instance(), [](KernelRegistry*) {}};
}

std::shared_ptr<Dispatcher> global_dispatcher() {
  return {&Dispatcher::instance(), [](Dispatcher*) {}};
}

py::dict def_to_dict(const KernelDef& d) {
  py::dict o;
  o["op"] = d.op;
  o["name"] = d.name;
  o["provider"] = d.provider;
  o["device"] = std::string(d.device.name());
  py::list devices;
  devices.append(std::string(d.device.name()));
  for (DeviceKind t : d.more_devices) devices.append(std::string(t.name()));
  o["devices"] = devices;
  py::list dts;
  for (DType t : d.dtypes) dts.append(std::string(dtype_name(t)));
  o["dtypes"] = dts;
  o["layouts"] = d.layouts;
  o["min_capability"] = d.min_capability;
  o["max_capability"] = d.max_capability;
  o["workspace_bytes"] = d.workspace_bytes;
  o["priority"] = d.priority;
  o["deterministic"] = d.deterministic;
  o["requested_only"] = d.requested_only;
  o["description"] = d.description;
  return o;
}

// Python-level dispatch: builds the context from tensors and runs the chosen kernel.
py::tuple dispatch_py(Dispatcher& d, const std::string& op, const py::sequence& inputs,
                      const py::object& outputs, const py::object& policy,
                      const py::object& exec_policy, const py::object& attrs,
                      const std::string& node) {
  KernelLaunch launch;
  for (const auto& i : inputs) launch.inputs.push_back(tensor_from_python(i));
  bool given_outputs = !outputs.is_none();
  if (given_outputs) {
    for (const auto& o : outputs.cast<py::sequence>()) launch.outputs.push_back(tensor_from_python(o));
  }
  OpContext ctx = OpContext::from_tensors(op, launch.inputs, launch.outputs, node);
  ctx.attrs = attrs_arg(attrs);
  if (auto ep = exec_policy_arg(exec_policy)) ctx.apply(*ep);
  launch.stream = current_stream_of(ctx.device);
  std::optional<KernelPolicy> p = policy_arg(policy);
  Decision dec;
  {
    py::gil_scoped_release release;
    dec = p ? d.dispatch(ctx, launch, *p) : d.dispatch(ctx, launch);
  }
  py::object outs;
  if (given_outputs) {
    outs = outputs;
  } else {
    py::list l;
    for (const auto& t : launch.outputs) l.append(py::cast(t));
    outs = l;
  }
  return py::make_tuple(outs, to_py(dec));
}

}  // namespace

void bind_dispatch(py::module_& m) {
  // The stable names Python reads instead of declaring its own copies.
  m.attr("RULES") = py::make_tuple(rule::kPinned, rule::kPolicyRequire, rule::kPolicyPrefer,
                                   rule::kFallback, rule::kAutoFirstSupported,
                                   rule::kAutoBestPerformance, rule::kNone);
  m.attr("REASON_CODES") = py::make_tuple(
      reason::kDtypeUnsupported, reason::kShapeUnsupported, reason::kLayoutUnsupported,
      reason::kCapabilityTooLow, reason::kCapabilityTooHigh, reason::kWorkspaceExceeded,
      reason::kBackendUnavailable, reason::kDeviceMismatch, reason::kNotInPolicy,
      reason::kNondeterministic, reason::kAttributeUnsupported, reason::kPythonSupportsFalse,
      reason::kPythonSupportsError, reason::kPinMismatch, reason::kSupportsError, reason::kRunFailed,
      reason::kOpUnsupported, reason::kNoKernel);
  m.attr("AUTO_KERNEL") = std::string(kAutoKernel);  // the policy's "any kernel" entry
  // The same names as attributes (`_core.reason.SHAPE_UNSUPPORTED`, `_core.rule.FALLBACK`),
  // so Python code spells a code through C++'s declaration instead of a literal.
  for (const char* sub : {"RULES", "REASON_CODES"}) {
    py::module_ ns = m.def_submodule(std::string(sub) == "RULES" ? "rule" : "reason");
    for (const auto& v : m.attr(sub)) {
      std::string name = v.cast<std::string>();
      for (auto& ch : name) {
        ch = ch == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      }
      ns.attr(name.c_str()) = v;
    }
  }

  py::class_<TensorSpec>(m, "TensorSpec", "dtype, shape and strides of one operand.")
      .def(py::init([](const std::string& dtype, const Shape& shape, const Shape& strides) {
             return TensorSpec{dtype_from_name(dtype), shape, strides};
           }),
           py::arg("dtype"), py::arg("shape"), py::arg("strides") = Shape{})
      .def_property_readonly("dtype", [](const TensorSpec& s) { return std::string(dtype_name(s.dtype)); })
      .def_property_readonly("shape", [](const TensorSpec& s) { return py::tuple(py::cast(s.shape)); })
      .def_property_readonly("strides", [](const TensorSpec& s) { return py::tuple(py::cast(s.strides)); })
      .def_property_readonly("layout", &TensorSpec::layout)
      .def_property_readonly("ndim", [](const TensorSpec& s) { return s.shape.size(); })
      .def_property_readonly("numel", &TensorSpec::numel)
      .def("__repr__", [](const TensorSpec& s) {
        std::string r = "TensorSpec(" + std::string(dtype_name(s.dtype)) + ", [";
        for (std::size_t i = 0; i < s.shape.size(); ++i) r += (i ? ", " : "") + std::to_string(s.shape[i]);
        return r + "], " + s.layout() + ")";
      });

  py::class_<OpContext>(m, "OpContext", "What the dispatcher and kernels know about one op call.")
      .def(py::init([](const std::string& op, const py::sequence& inputs, const py::sequence& outputs,
                       const std::string& device, int capability, const std::string& node,
                       const py::object& attrs, const py::object& exec_policy) {
             OpContext c;
             c.op = op;
             c.node = node;
             c.device = Device::parse(device);
             c.capability = capability;
             for (const auto& i : inputs) c.inputs.push_back(spec_arg(i));
             for (const auto& o : outputs) c.outputs.push_back(spec_arg(o));
             c.attrs = attrs_arg(attrs);
             if (auto ep = exec_policy_arg(exec_policy)) c.apply(*ep);
             return c;
           }),
           py::arg("op"), py::arg("inputs") = py::list(), py::arg("outputs") = py::list(),
           py::arg("device") = "cpu", py::arg("capability") = 0, py::arg("node") = "",
           py::arg("attrs") = py::none(), py::arg("exec_policy") = py::none())
      .def_static("from_tensors",
                  [](const std::string& op, const py::sequence& inputs, const py::sequence& outputs,
                     const std::string& node) {
                    std::vector<Tensor> in, out;
                    for (const auto& i : inputs) in.push_back(tensor_from_python(i));
                    for (const auto& o : outputs) out.push_back(tensor_from_python(o));
                    return OpContext::from_tensors(op, in, out, node);
                  },
                  py::arg("op"), py::arg("inputs"), py::arg("outputs") = py::list(), py::arg("node") = "")
      .def_readwrite("op", &OpContext::op)
      .def_readwrite("node", &OpContext::node)
      .def_property_readonly("device", [](const OpContext& c) { return c.device.str(); })
      .def_readwrite("capability", &OpContext::capability)
      .def_readonly("inputs", &OpContext::inputs)
      .def_readonly("outputs", &OpContext::outputs)
      .def_property_readonly("attrs",
                             [](const OpContext& c) {
                               py::dict d;
                               for (const auto& [k, v] : c.attrs) d[py::str(k)] = attr_value(v);
                               return d;
                             })
      .def_readwrite("workspace_limit_bytes", &OpContext::workspace_limit_bytes)
      .def_readwrite("allow_tf32", &OpContext::allow_tf32)
      .def_readwrite("deterministic", &OpContext::deterministic)
      .def("apply", [](OpContext& c, const py::object& ep) {
        if (auto p = exec_policy_arg(ep)) c.apply(*p);
      })
      .def("case_key", &OpContext::case_key)
      .def("device_class", &OpContext::device_class)
      .def("__repr__", [](const OpContext& c) { return "OpContext(" + c.case_key() + ")"; });

  py::class_<KernelRegistry, std::shared_ptr<KernelRegistry>>(
      m, "KernelRegistry", "op -> kernels; instance() is the process registry.")
      .def(py::init([] { return std::make_shared<KernelRegistry>(); }),
           "An empty registry that knows the project's declared kernel names (tests).")
      .def_static("instance", &global_registry)
      .def("register_python_kernel",
           [](KernelRegistry& r, const std::string& op, const std::string& name, py::function fn,
              const py::object& supports, const std::string& device, const py::object& dtypes,
              const py::object& layouts, int priority, const std::string& description,
              int min_capability, int max_capability, std::size_t workspace_bytes,
              bool deterministic, const py::object& algorithms, bool numpy_io, bool replace,
              const std::vector<std::string>& more_devices, bool requested_only) {
             XRT_CHECK(supports.is_none() || PyCallable_Check(supports.ptr()), InvalidArgumentError,
                       "register(", op, ", ", name, "): supports must be callable or None");
             KernelDef d;
             d.op = op;
             d.name = name;
             d.provider = "python";
             d.device = Device::parse(device).kind;
             for (const auto& m : more_devices) d.more_devices.push_back(Device::parse(m).kind);
             if (!dtypes.is_none()) {
               for (const auto& t : dtypes) d.dtypes.push_back(dtype_from_name(py::str(t).cast<std::string>()));
             }
             if (!layouts.is_none()) d.layouts = layouts.cast<std::vector<std::string>>();
             d.priority = priority;
             d.description = description;
             d.min_capability = min_capability;
             d.max_capability = max_capability;
             d.workspace_bytes = workspace_bytes;
             d.deterministic = deterministic;
             d.allocates_outputs = true;
             d.requested_only = requested_only;
             r.register_kernel(std::make_shared<PyKernel>(d, fn, supports, algorithms, numpy_io), replace);
           },
           py::arg("op"), py::arg("name"), py::arg("fn"), py::arg("supports") = py::none(),
           py::arg("device") = "cpu", py::arg("dtypes") = py::none(), py::arg("layouts") = py::none(),
           py::arg("priority") = 0, py::arg("description") = "", py::arg("min_capability") = 0,
           py::arg("max_capability") = 0, py::arg("workspace_bytes") = 0,
           py::arg("deterministic") = true, py::arg("algorithms") = py::none(),
           py::arg("numpy_io") = true, py::arg("replace") = false,
           py::arg("more_devices") = std::vector<std::string>{}, py::arg("requested_only") = false)
      .def("unregister", &KernelRegistry::unregister_kernel, py::arg("op"), py::arg("name"))
      .def("list",
           [](const KernelRegistry& r, const std::optional<std::string>& op,
              const std::optional<std::string>& device) {
             std::optional<DeviceKind> dev;
             if (device) dev = Device::parse(*device).kind;
             py::list out;
             for (const auto& d : r.list(op, dev)) out.append(def_to_dict(d));
             return out;
           },
           py::arg("op") = py::none(), py::arg("device") = py::none())
      .def("check",
           [](const KernelRegistry& r, const std::string& op, const std::string& name, const OpContext& ctx) {
             KernelPtr k = r.find(op, name);
             XRT_CHECK(k != nullptr, InvalidArgumentError, "no kernel '", name, "' for op '", op, "'");
             Support s;
             {
               py::gil_scoped_release release;
               s = KernelRegistry::check(*k, ctx);
             }
             return py::make_tuple(s.ok, s.reason_code, s.detail);
           },
           py::arg("op"), py::arg("name"), py::arg("ctx"))
      .def("register_known_kernel_name", &KernelRegistry::register_known_kernel_name, py::arg("op"),
           py::arg("name"))
      .def("known_kernel_names", &KernelRegistry::known_kernel_names, py::arg("op"))
      .def("is_known_kernel_name", &KernelRegistry::is_known_kernel_name, py::arg("op"), py::arg("name"))
      .def("known_ops", &KernelRegistry::known_ops)
      .def("is_known_op", &KernelRegistry::is_known_op, py::arg("op"))
      .def("register_known_op", &KernelRegistry::register_known_op, py::arg("op"))
      .def_static("canonical_op_for_alias", &KernelRegistry::canonical_op_for_alias, py::arg("op"))
      .def("validate_policy",
           [](const KernelRegistry& r, const py::object& p) {
             if (auto kp = policy_arg(p)) kp->validate(r);
           },
           py::arg("policy"))
      .def_property_readonly("generation", &KernelRegistry::generation);

  py::class_<ScopeHandle>(m, "_PolicyScope")
      .def("close", &ScopeHandle::close, "Ends the override (call on the thread that opened it).");

  py::class_<Dispatcher, std::shared_ptr<Dispatcher>>(m, "Dispatcher",
                                                      "Chooses kernels under a KernelPolicy and records Decisions.")
      .def(py::init([](std::shared_ptr<KernelRegistry> r, std::size_t cap) {
             // The registry is kept alive by the returned object (keep_alive below).
             return std::make_shared<Dispatcher>(*r, cap);
           }),
           py::arg("registry"), py::arg("log_capacity") = DecisionLog::kDefaultCapacity,
           py::keep_alive<1, 2>())
      .def_static("instance", &global_dispatcher)
      .def("set_policy",
           [](Dispatcher& d, const py::object& p) {
             auto kp = policy_arg(p);
             d.set_policy(kp ? *kp : KernelPolicy{});
           },
           py::arg("policy"))
      .def("get_policy", &Dispatcher::get_policy)
      .def("effective_policy", &Dispatcher::effective_policy)
      .def("select",
           [](Dispatcher& d, const OpContext& ctx, const py::object& policy,
              const std::vector<std::string>& runnable, const std::string& fallback_kernel,
              const py::object& timings, const std::map<std::string, std::string>& failures,
              const std::string& untimed_reason, bool record, const std::string& note,
              const std::map<std::string, double>& noise, const std::string& regime) {
             std::optional<KernelPolicy> p = policy_arg(policy);
             SelectOptions opt;
             opt.runnable = runnable;
             opt.fallback_kernel = fallback_kernel;
             opt.timed = !timings.is_none();
             if (opt.timed) opt.timings_ms = timings.cast<std::map<std::string, double>>();
             opt.failures = failures;
             opt.noise_ms = noise;
             opt.regime = regime;
             opt.untimed_reason = untimed_reason;
             opt.record = record;
             opt.note = note;
             const bool plain = runnable.empty() && fallback_kernel.empty() && !opt.timed &&
                                failures.empty() && untimed_reason.empty() && record &&
                                note.empty() && regime.empty();
             Decision dec;
             {
               py::gil_scoped_release release;
               if (plain) {
                 dec = p ? d.select(ctx, *p) : d.select(ctx);
               } else {
                 dec = d.select(ctx, p ? *p : d.effective_policy(), opt);
               }
             }
             return to_py(dec);
           },
           py::arg("ctx"), py::arg("policy") = py::none(), py::kw_only(),
           py::arg("runnable") = std::vector<std::string>{}, py::arg("fallback_kernel") = "",
           py::arg("timings") = py::none(), py::arg("failures") = std::map<std::string, std::string>{},
           py::arg("untimed_reason") = "", py::arg("record") = true, py::arg("note") = "",
           py::arg("noise") = std::map<std::string, double>{}, py::arg("regime") = "",
           "Chooses a kernel and records the Decision. A caller that runs kernels itself "
           "passes the kernels it can run (runnable), the kernel the fallback rule takes, "
           "and, under best_performance, the device times it measured (kernel -> ms), their "
           "noise (kernel -> ms: closer times are a tie, won by the earlier candidate) and "
           "the regime they were measured in, or why it could not time; record=False "
           "evaluates without recording.")
      .def("record",
           [](Dispatcher& d, const py::object& decision) { return d.log().append(from_py(decision)); },
           py::arg("decision"),
           "Appends a Decision made outside select() (a kernel that refused a case when it "
           "ran); returns its sequence number.")
      .def("add_hits", [](Dispatcher& d, uint64_t seq, uint64_t n) { return d.log().add_hits(seq, n); },
           py::arg("seq"), py::arg("n") = 1,
           "Counts n more calls answered by decision `seq` (false when it left the log).")
      .def("dispatch", &dispatch_py, py::arg("op"), py::arg("inputs"), py::arg("outputs") = py::none(),
           py::arg("policy") = py::none(), py::arg("exec_policy") = py::none(),
           py::arg("attrs") = py::none(), py::arg("node") = "",
           "Selects and runs a kernel; returns (outputs, Decision).")
      .def("explain",
           [](const Dispatcher& d, std::size_t last) {
             auto mod = decision_module();
             py::list items;
             for (const auto& dec : d.log().snapshot(last)) items.append(to_py(dec, mod));
             return mod.attr("DecisionLog")(items);
           },
           py::arg("last") = 0, "The recorded decisions (oldest first) as a DecisionLog.")
      .def("clear_log", [](Dispatcher& d) { d.log().clear(); })
      .def_property("log_capacity", [](const Dispatcher& d) { return d.log().capacity(); },
                    [](Dispatcher& d, std::size_t c) { d.log().set_capacity(c); })
      .def_property_readonly("total_recorded", [](const Dispatcher& d) { return d.log().total_recorded(); })
      .def("export_pins",
           [](const Dispatcher& d, const py::object& base) {
             auto b = policy_arg(base);
             return b ? d.export_pins(*b) : d.export_pins();
           },
           py::arg("base") = py::none())
      .def("clear_tuning_cache", &Dispatcher::clear_tuning_cache)
      .def_property_readonly("tuning_cache_size", &Dispatcher::tuning_cache_size)
      .def("set_tuning_options",
           [](Dispatcher& d, int warmup, int iterations) { d.set_tuning_options({warmup, iterations}); },
           py::arg("warmup") = 1, py::arg("iterations") = 5)
      .def("push_scoped_policy",
           [](Dispatcher& d, const py::object& p) {
             auto kp = policy_arg(p);
             auto h = std::make_unique<ScopeHandle>();
             h->scope = std::make_unique<Dispatcher::ScopedPolicy>(d, kp ? *kp : KernelPolicy{});
             return h;
           },
           py::arg("policy"), py::keep_alive<0, 1>(),
           "Overrides the policy for this thread until the returned handle is closed "
           "(use xpuruntime.dispatch.policy_scope).");
}

}  // namespace xpuruntime::bindings
