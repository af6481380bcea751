// KernelPolicy / ExecutionPolicy (DESIGN.md §3; seed 004 §3.3). The Python wrappers
// in xpuruntime.policies add keyword construction, YAML and file I/O on top.
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "core/policy/known_names.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/policy.h"

namespace xpuruntime::bindings {
namespace {

// Values arrive from any Python code, so a wrong type or text that is not valid
// Unicode is a PolicyError here, never pybind11's TypeError or a UnicodeEncodeError.

// What a message shows of a Python value: its type, and for text a bounded quote
// (never repr(): it recurses into nested containers and may be huge).
std::string describe(const py::handle& v) {
  std::string type = py::str(py::type::handle_of(v).attr("__name__"));
  if (!py::isinstance<py::str>(v)) return "a value of type " + type;
  // surrogatepass keeps lone surrogates as bytes that quote_input() then escapes.
  py::bytes raw = v.attr("encode")("utf-8", "surrogatepass");
  return quote_input(std::string_view(raw));
}

// `v` as UTF-8 text; PolicyError naming `what` when it is not a str or holds lone
// surrogates (which have no UTF-8 form).
std::string text_arg(const py::handle& v, std::string_view what) {
  XRT_CHECK(py::isinstance<py::str>(v), PolicyError, what, " must be a string, got ",
            describe(v));
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(v.ptr(), &size);
  if (data == nullptr) {
    PyErr_Clear();
    XRT_THROW(PolicyError, what, " ", describe(v),
              " is not valid Unicode text (it holds a lone surrogate, as from bytes decoded "
              "with errors='surrogateescape'); pass the name as proper text");
  }
  return std::string(data, static_cast<std::size_t>(size));
}

std::string op_key(const py::handle& k) { return text_arg(k, "a KernelPolicy op key"); }

// A preference value from Python: "name" or ["a", "b"].
std::vector<std::string> kernel_names(const std::string& op, const py::handle& v) {
  std::string what = "the kernel for op " + quote_input(op);
  if (py::isinstance<py::str>(v)) return {text_arg(v, what)};
  if (py::isinstance<py::sequence>(v) && !py::isinstance<py::bytes>(v)) {
    std::vector<std::string> out;
    for (const auto& e : v) {
      out.push_back(text_arg(e, "each kernel name for op " + quote_input(op)));
    }
    return out;
  }
  XRT_THROW(PolicyError, "KernelPolicy preference for op ", quote_input(op),
            " must be a kernel name or a list of names, got ", describe(v));
}

py::object names_to_py(const std::vector<std::string>& names) {
  if (names.size() == 1) return py::str(names[0]);
  return py::cast(names);
}

std::optional<ExecutionPolicy::Target> optional_target(const py::object& v) {
  if (v.is_none()) return std::nullopt;
  return target_from_string(text_arg(v, "ExecutionPolicy allow_fallback"));
}

}  // namespace

void bind_policy(py::module_& m) {
  py::enum_<KernelPolicy::AutoSelectStrategy>(m, "AutoSelectStrategy")
      .value("FirstSupported", KernelPolicy::AutoSelectStrategy::FirstSupported)
      .value("BestPerformance", KernelPolicy::AutoSelectStrategy::BestPerformance);
  m.attr("POLICY_SCHEMA_VERSION") = kPolicySchemaVersion;

  py::class_<KernelPolicy>(m, "KernelPolicy",
                           "C++ kernel policy (source of truth); use xpuruntime.KernelPolicy.")
      .def(py::init<>())
      .def(py::init([](const py::kwargs& kwargs) {
        KernelPolicy p;
        for (const auto& [k, v] : kwargs) {
          std::string op = op_key(k);
          p.set(op, kernel_names(op, v));
        }
        return p;
      }))
      .def_property(
          "preferences",
          [](const KernelPolicy& p) {
            py::dict d;
            for (const auto& [op, names] : p.preferences) d[py::str(op)] = names_to_py(names);
            return d;
          },
          [](KernelPolicy& p, const py::dict& d) {
            std::map<std::string, std::vector<std::string>> prefs;
            for (const auto& [k, v] : d) {
              std::string op = op_key(k);
              prefs[op] = kernel_names(op, v);
              XRT_CHECK(!prefs[op].empty(), PolicyError, "KernelPolicy preference for op ",
                        quote_input(op), " is an empty list");
            }
            p.preferences = std::move(prefs);
          },
          "op -> kernel name (str) or ordered list of names.")
      .def_readwrite("auto_strategy", &KernelPolicy::auto_strategy)
      .def_property(
          "auto_strategy_name", [](const KernelPolicy& p) { return std::string(to_string(p.auto_strategy)); },
          [](KernelPolicy& p, const py::object& s) {
            p.auto_strategy = auto_strategy_from_string(text_arg(s, "KernelPolicy auto_strategy"));
          })
      .def_property(
          "mode", [](const KernelPolicy& p) { return std::string(to_string(p.mode)); },
          [](KernelPolicy& p, const py::object& s) {
            p.mode = policy_mode_from_string(text_arg(s, "KernelPolicy mode"));
          })
      .def_readwrite("schema_version", &KernelPolicy::schema_version)
      .def_property(
          "pins",
          [](const KernelPolicy& p) {
            py::dict d;
            for (const auto& [key, pin] : p.pins) {
              py::dict e;
              e["kernel"] = pin.kernel;
              e["algorithm"] = pin.algorithm;
              d[py::str(key)] = e;
            }
            return d;
          },
          [](KernelPolicy& p, const py::dict& d) {
            std::map<std::string, KernelPin> pins;
            for (const auto& [k, v] : d) {
              std::string key = text_arg(k, "a KernelPolicy pin key");
              std::string where = "KernelPolicy pin " + quote_input(key);
              KernelPin pin;
              if (py::isinstance<py::str>(v)) {
                pin.kernel = text_arg(v, where);
              } else {
                XRT_CHECK(py::isinstance<py::dict>(v), PolicyError, where,
                          " must be a kernel name or {'kernel': ..., 'algorithm': ...}, got ",
                          describe(v));
                py::dict e = v.cast<py::dict>();
                for (const auto& [fk, fv] : e) {
                  std::string f = text_arg(fk, "a field of " + where);
                  XRT_CHECK(f == "kernel" || f == "algorithm", PolicyError,
                            unknown_choice_message("pin field", f, where, {"algorithm", "kernel"}));
                }
                pin.kernel =
                    e.contains("kernel") ? text_arg(e["kernel"], "the kernel of " + where) : "";
                pin.algorithm = e.contains("algorithm")
                                    ? text_arg(e["algorithm"], "the algorithm of " + where)
                                    : "";
              }
              pins[key] = std::move(pin);
            }
            p.pins = std::move(pins);
          },
          "case key -> {'kernel': name, 'algorithm': id} (written by Dispatcher.export_pins).")
      .def("set",
           [](KernelPolicy& p, const py::object& op_obj, const py::object& v) -> KernelPolicy& {
             std::string op = op_key(op_obj);
             return p.set(op, kernel_names(op, v));
           },
           py::arg("op"), py::arg("kernel"), py::return_value_policy::reference_internal)
      .def("get",
           [](const KernelPolicy& p, const py::object& op) -> py::object {
             auto names = p.get(op_key(op));
             if (names.empty()) return py::none();
             return names_to_py(names);
           },
           py::arg("op"))
      .def(
          "get_list", [](const KernelPolicy& p, const py::object& op) { return p.get(op_key(op)); },
          py::arg("op"))
      .def(
          "remove",
          [](KernelPolicy& p, const py::object& op) -> KernelPolicy& {
            return p.remove(op_key(op));
          },
          py::arg("op"), py::return_value_policy::reference_internal)
      .def("validate", [](const KernelPolicy& p) { p.validate(KernelRegistry::instance()); },
           "Checks op keys, kernel names and pins against the process registry (PolicyError).")
      .def("to_json", &KernelPolicy::to_json, py::arg("indent") = 2)
      .def("canonical_json", &KernelPolicy::canonical_json)
      .def_static("from_json", &KernelPolicy::from_json, py::arg("text"))
      .def_property_readonly("fingerprint", &KernelPolicy::fingerprint)
      .def("copy", [](const KernelPolicy& p) { return KernelPolicy(p); })
      .def("__copy__", [](const KernelPolicy& p) { return KernelPolicy(p); })
      .def("__deepcopy__", [](const KernelPolicy& p, const py::object&) { return KernelPolicy(p); })
      .def(py::self == py::self)
      .def("__repr__", &KernelPolicy::repr);
  // Mutable and comparable: unhashable like a dict.
  m.attr("KernelPolicy").attr("__hash__") = py::none();

  py::class_<ExecutionPolicy>(m, "ExecutionPolicy",
                              "C++ execution policy (source of truth); use xpuruntime.ExecutionPolicy.")
      .def(py::init<>())
      .def_property(
          "target", [](const ExecutionPolicy& p) { return std::string(to_string(p.target)); },
          [](ExecutionPolicy& p, const py::object& s) {
            p.target = target_from_string(text_arg(s, "ExecutionPolicy target"));
          })
      .def_property(
          "precision", [](const ExecutionPolicy& p) { return std::string(to_string(p.precision)); },
          [](ExecutionPolicy& p, const py::object& s) {
            p.precision = precision_from_string(text_arg(s, "ExecutionPolicy precision"));
          })
      .def_readwrite("static_shape", &ExecutionPolicy::static_shape)
      .def_property(
          "allow_fallback",
          [](const ExecutionPolicy& p) -> py::object {
            if (!p.allow_fallback) return py::none();
            return py::str(std::string(to_string(*p.allow_fallback)));
          },
          [](ExecutionPolicy& p, const py::object& v) { p.allow_fallback = optional_target(v); })
      .def_readwrite("deterministic", &ExecutionPolicy::deterministic)
      .def_readwrite("cuda_graph", &ExecutionPolicy::cuda_graph)
      .def_readwrite("workspace_limit_bytes", &ExecutionPolicy::workspace_limit_bytes)
      .def_readwrite("engine", &ExecutionPolicy::engine)
      .def_readwrite("allow_tf32", &ExecutionPolicy::allow_tf32)
      .def_readwrite("keep_io_types", &ExecutionPolicy::keep_io_types)
      .def_readwrite("threads", &ExecutionPolicy::threads)
      .def_readwrite("strict", &ExecutionPolicy::strict)
      .def_readwrite("engines", &ExecutionPolicy::engines)
      .def_readwrite("pins", &ExecutionPolicy::pins)
      .def_readwrite("max_islands", &ExecutionPolicy::max_islands)
      .def_readwrite("max_fallback_nodes", &ExecutionPolicy::max_fallback_nodes)
      .def_readwrite("max_copy_bytes", &ExecutionPolicy::max_copy_bytes)
      .def_readwrite("forbid", &ExecutionPolicy::forbid)
      .def_readwrite("schema_version", &ExecutionPolicy::schema_version)
      .def("has_strict", &ExecutionPolicy::has_strict, py::arg("assertion"))
      .def("validate", &ExecutionPolicy::validate)
      .def("to_json", &ExecutionPolicy::to_json, py::arg("indent") = 2)
      .def("canonical_json", &ExecutionPolicy::canonical_json)
      .def_static("from_json", &ExecutionPolicy::from_json, py::arg("text"))
      .def_property_readonly("fingerprint", &ExecutionPolicy::fingerprint)
      .def("copy", [](const ExecutionPolicy& p) { return ExecutionPolicy(p); })
      .def(py::self == py::self)
      .def("__repr__", &ExecutionPolicy::repr);
  m.attr("ExecutionPolicy").attr("__hash__") = py::none();

  py::module_ pu = m.def_submodule("policy_util", "Helpers shared by the policy wrappers.");
  pu.def("sha256_hex", [](const py::bytes& b) { return sha256_hex(std::string(b)); }, py::arg("data"));
  pu.def("edit_distance", &edit_distance, py::arg("a"), py::arg("b"));
  pu.def("closest_match", &closest_match, py::arg("word"), py::arg("choices"));
  pu.def("unknown_choice_message", &unknown_choice_message, py::arg("what"), py::arg("word"),
         py::arg("where"), py::arg("choices"));
  pu.def("strict_assertions", &strict_assertions);
  pu.def("quote_input", [](std::string_view value) { return quote_input(value); }, py::arg("value"),
         "The value as error messages quote it: valid UTF-8, escaped, at most a few hundred "
         "bytes (str or bytes).");
  pu.def("canonical_ops", &known_names::canonical_ops,
         "The canonical op keys shared by training and inference (matmul, conv, attention, ...).");
  pu.def("op_aliases", &known_names::op_aliases,
         "Spellings users reach for -> the canonical op key (\"gemm\" -> \"matmul\").");
}

}  // namespace xpuruntime::bindings
