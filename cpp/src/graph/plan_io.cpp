// ExecutionPlan serialization (format described in plan.h) and summary().
#include <cstring>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graph/prepare.h"
#include "xpuruntime/error.h"
#include "xpuruntime/graph/plan.h"

namespace xpuruntime::graph {
namespace {

using json = nlohmann::json;
constexpr char kMagic[8] = {'X', 'R', 'T', 'P', 'L', 'A', 'N', '1'};

json dims_json(const std::vector<Dim>& dims) {
  json a = json::array();
  for (const Dim& d : dims) a.push_back(d.value >= 0 ? json(d.value) : json(d.symbol));
  return a;
}

std::vector<Dim> dims_from(const json& a) {
  std::vector<Dim> v;
  for (const json& d : a) {
    Dim x;
    if (d.is_number_integer()) x.value = d.get<int64_t>();
    else x.symbol = d.get<std::string>();
    v.push_back(x);
  }
  return v;
}

json tensor_inline(const HostTensor& t) {
  std::vector<uint8_t> bytes(static_cast<const uint8_t*>(t.data),
                             static_cast<const uint8_t*>(t.data) + t.nbytes());
  return {{"dtype", static_cast<int>(t.dtype)}, {"shape", t.shape}, {"bytes", bytes}};
}

HostTensor tensor_from_inline(const json& j) {
  HostTensor t = HostTensor::alloc(static_cast<DType>(j.at("dtype").get<int>()),
                                   j.at("shape").get<Shape>());
  auto bytes = j.at("bytes").get<std::vector<uint8_t>>();
  XRT_CHECK(bytes.size() == t.nbytes(), InvalidModelError,
            "plan file is corrupt: an attribute tensor has the wrong size");
  if (!bytes.empty()) std::memcpy(t.data, bytes.data(), bytes.size());
  return t;
}

json attr_json(const Attr& a) {
  switch (a.kind) {
    case Attr::Kind::kInt: return {{"i", a.i}};
    case Attr::Kind::kFloat: return {{"f", a.f}};
    case Attr::Kind::kString: return {{"s", a.s}};
    case Attr::Kind::kInts: return {{"ints", a.ints}};
    case Attr::Kind::kFloats: return {{"floats", a.floats}};
    case Attr::Kind::kStrings: return {{"strings", a.strings}};
    case Attr::Kind::kTensor: return {{"t", tensor_inline(a.t)}};
  }
  return {};
}

Attr attr_from(const json& j) {
  if (j.contains("i")) return Attr::of_int(j["i"].get<int64_t>());
  if (j.contains("f")) return Attr::of_float(j["f"].is_null() ? NAN : j["f"].get<double>());
  if (j.contains("s")) return Attr::of_string(j["s"].get<std::string>());
  if (j.contains("ints")) return Attr::of_ints(j["ints"].get<std::vector<int64_t>>());
  if (j.contains("floats")) {
    std::vector<double> v;
    for (const json& x : j["floats"]) v.push_back(x.is_null() ? NAN : x.get<double>());
    return Attr::of_floats(v);
  }
  if (j.contains("strings")) {
    Attr a;
    a.kind = Attr::Kind::kStrings;
    a.strings = j["strings"].get<std::vector<std::string>>();
    return a;
  }
  if (j.contains("t")) return Attr::of_tensor(tensor_from_inline(j["t"]));
  XRT_THROW(InvalidModelError, "plan file is corrupt: unknown attribute encoding");
}

// JSON has no infinities: encode +-inf floats as strings.
json num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

}  // namespace

std::string ExecutionPlan::serialize() const {
  json h;
  h["format_version"] = header.format_version;
  h["device"] = header.device;
  h["policy_fingerprint"] = header.policy_fingerprint;
  h["model_hash"] = header.model_hash;
  h["producer"] = header.producer;
  h["workspace_limit_bytes"] = header.workspace_limit_bytes;
  h["allow_tf32"] = header.allow_tf32;
  h["deterministic"] = header.deterministic;
  json vals = json::array();
  for (const PlanValue& v : values) {
    json j = {{"name", v.name},          {"dtype", static_cast<int>(v.dtype)},
              {"kind", static_cast<int>(v.kind)}, {"arena_offset", v.arena_offset},
              {"alias_of", v.alias_of}, {"constant", v.constant},
              {"last_use", v.last_use}};
    if (v.shape) j["shape"] = *v.shape;
    if (v.declared) j["declared"] = dims_json(*v.declared);
    vals.push_back(std::move(j));
  }
  h["values"] = std::move(vals);
  json steps_j = json::array();
  for (const PlanStep& s : steps) {
    json attrs = json::object();
    for (const auto& [k, a] : s.node.attrs) {
      json aj = attr_json(a);
      if (a.kind == Attr::Kind::kFloat) aj = {{"f", num(a.f)}};
      if (a.kind == Attr::Kind::kFloats) {
        json arr = json::array();
        for (double x : a.floats) arr.push_back(num(x));
        aj = {{"floats", arr}};
      }
      attrs[k] = std::move(aj);
    }
    steps_j.push_back({{"name", s.node.name},
                       {"op_type", s.node.op_type},
                       {"domain", s.node.domain},
                       {"inputs", s.node.inputs},
                       {"outputs", s.node.outputs},
                       {"attrs", std::move(attrs)},
                       {"op_key", s.op_key},
                       {"kernel", s.kernel},
                       {"algorithm", s.algorithm},
                       {"rule", s.rule},
                       {"alias", s.alias}});
  }
  h["steps"] = std::move(steps_j);
  h["inputs"] = inputs;
  h["outputs"] = outputs;
  h["memory"] = {{"arena_bytes", memory.arena_bytes},
                 {"intermediate_bytes", memory.intermediate_bytes},
                 {"constant_bytes", memory.constant_bytes},
                 {"dynamic_values", memory.dynamic_values},
                 {"static_values", memory.static_values}};
  h["decisions"] = decisions;
  h["pass_log"] = pass_log;
  json consts = json::array();
  uint64_t off = 0;
  for (const HostTensor& c : constants) {
    consts.push_back({{"dtype", static_cast<int>(c.dtype)}, {"shape", c.shape}, {"offset", off},
                      {"nbytes", c.nbytes()}});
    off += (c.nbytes() + 63) / 64 * 64;
  }
  h["constants"] = std::move(consts);
  h["blob_bytes"] = off;
  // Model names need not be valid UTF-8: replace bad bytes rather than fail.
  const std::string hs = h.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out(kMagic, sizeof(kMagic));
  uint64_t hl = hs.size();
  out.append(reinterpret_cast<const char*>(&hl), sizeof(hl));
  out += hs;
  out.resize((out.size() + 63) / 64 * 64, '\0');
  const std::size_t blob = out.size();
  out.resize(blob + off, '\0');
  off = 0;
  for (const HostTensor& c : constants) {
    if (c.nbytes()) std::memcpy(out.data() + blob + off, c.data, c.nbytes());
    off += (c.nbytes() + 63) / 64 * 64;
  }
  return out;
}

void ExecutionPlan::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  XRT_CHECK(f.good(), InvalidArgumentError, "cannot open '", path, "' for writing the plan");
  const std::string bytes = serialize();
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  XRT_CHECK(f.good(), InvalidArgumentError, "writing the plan to '", path, "' failed");
}

ExecutionPlan ExecutionPlan::load(const std::string& path, const PlanExpectation& expect) {
  std::ifstream f(path, std::ios::binary);
  XRT_CHECK(f.good(), InvalidArgumentError, "cannot open plan file '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return deserialize(ss.str(), expect);
}

ExecutionPlan ExecutionPlan::deserialize(std::string bytes, const PlanExpectation& expect) {
  XRT_CHECK(bytes.size() >= 16 && std::memcmp(bytes.data(), kMagic, 7) == 0, InvalidModelError,
            "not an xpuruntime plan file (bad magic); save one with InferenceSession.save_plan()");
  XRT_CHECK(bytes[7] == kMagic[7], InvalidModelError,
            "plan file container version '", bytes[7], "' is not supported by this build "
            "(expected '", kMagic[7], "'); recompile the plan with this version");
  uint64_t hl = 0;
  std::memcpy(&hl, bytes.data() + 8, sizeof(hl));
  XRT_CHECK(hl <= bytes.size() - 16, InvalidModelError,
            "plan file is truncated or corrupt (header length ", hl, " exceeds file size ",
            bytes.size(), ")");
  json h;
  try {
    h = json::parse(bytes.begin() + 16, bytes.begin() + 16 + static_cast<std::ptrdiff_t>(hl));
  } catch (const std::exception& e) {
    XRT_THROW(InvalidModelError, "plan file header is corrupt: ", e.what());
  }
  ExecutionPlan p;
  try {
    p.header.format_version = h.at("format_version").get<int>();
    XRT_CHECK(p.header.format_version == kPlanFormatVersion, InvalidModelError,
              "plan format version ", p.header.format_version,
              " is not supported by this build (it reads version ", kPlanFormatVersion,
              "); recompile the plan from the ONNX model with this version");
    p.header.device = h.at("device").get<std::string>();
    p.header.policy_fingerprint = h.at("policy_fingerprint").get<std::string>();
    p.header.model_hash = h.at("model_hash").get<std::string>();
    p.header.producer = h.value("producer", "");
    p.header.workspace_limit_bytes = h.at("workspace_limit_bytes").get<std::size_t>();
    p.header.allow_tf32 = h.at("allow_tf32").get<bool>();
    p.header.deterministic = h.at("deterministic").get<bool>();
    XRT_CHECK(expect.device.empty() || expect.device == p.header.device, InvalidModelError,
              "plan was compiled for device '", p.header.device, "' but this session runs on '",
              expect.device, "'; recompile the plan for this device");
    XRT_CHECK(expect.policy_fingerprint.empty() ||
                  expect.policy_fingerprint == p.header.policy_fingerprint,
              InvalidModelError, "plan was compiled under another policy (fingerprint ",
              p.header.policy_fingerprint.substr(0, 12), "…, this session's policy is ",
              expect.policy_fingerprint.substr(0, 12),
              "…); load it with the same KernelPolicy/ExecutionPolicy or recompile");
    for (const json& j : h.at("values")) {
      PlanValue v;
      v.name = j.at("name").get<std::string>();
      const int dt = j.at("dtype").get<int>();
      XRT_CHECK(dt >= 0 && dt < kNumDTypes, InvalidModelError, "plan file is corrupt: dtype code ", dt);
      v.dtype = static_cast<DType>(dt);
      v.kind = static_cast<PlanValue::Kind>(j.at("kind").get<int>());
      v.arena_offset = j.at("arena_offset").get<int64_t>();
      v.alias_of = j.at("alias_of").get<int>();
      v.constant = j.at("constant").get<int>();
      v.last_use = j.at("last_use").get<int>();
      if (j.contains("shape")) v.shape = j["shape"].get<Shape>();
      if (j.contains("declared")) v.declared = dims_from(j["declared"]);
      p.values.push_back(std::move(v));
    }
    const int nv = static_cast<int>(p.values.size());
    auto check_id = [nv](int id) {
      XRT_CHECK(id >= -1 && id < nv, InvalidModelError, "plan file is corrupt: value id ", id);
    };
    for (const json& j : h.at("steps")) {
      PlanStep s;
      s.node.name = j.at("name").get<std::string>();
      s.node.op_type = j.at("op_type").get<std::string>();
      s.node.domain = j.at("domain").get<std::string>();
      s.node.inputs = j.at("inputs").get<std::vector<int>>();
      s.node.outputs = j.at("outputs").get<std::vector<int>>();
      for (int id : s.node.inputs) check_id(id);
      for (int id : s.node.outputs) check_id(id);
      for (auto it = j.at("attrs").begin(); it != j.at("attrs").end(); ++it) {
        json a = it.value();
        auto fix = [](const json& x) -> json {
          if (x.is_string()) return x.get<std::string>() == "inf" ? INFINITY : -INFINITY;
          return x;
        };
        if (a.contains("f")) a["f"] = fix(a["f"]);
        if (a.contains("floats"))
          for (auto& x : a["floats"]) x = fix(x);
        s.node.attrs[it.key()] = attr_from(a);
      }
      s.op_key = j.at("op_key").get<std::string>();
      s.kernel = j.at("kernel").get<std::string>();
      s.algorithm = j.at("algorithm").get<std::string>();
      s.rule = j.at("rule").get<std::string>();
      s.alias = j.at("alias").get<bool>();
      p.steps.push_back(std::move(s));
    }
    p.inputs = h.at("inputs").get<std::vector<int>>();
    p.outputs = h.at("outputs").get<std::vector<int>>();
    for (int id : p.inputs) check_id(id);
    for (int id : p.outputs) check_id(id);
    const json& m = h.at("memory");
    p.memory.arena_bytes = m.at("arena_bytes").get<int64_t>();
    p.memory.intermediate_bytes = m.at("intermediate_bytes").get<int64_t>();
    p.memory.constant_bytes = m.at("constant_bytes").get<int64_t>();
    p.memory.dynamic_values = m.at("dynamic_values").get<int64_t>();
    p.memory.static_values = m.at("static_values").get<int64_t>();
    p.decisions = h.at("decisions").get<std::vector<std::string>>();
    p.pass_log = h.at("pass_log").get<std::vector<std::string>>();
    // Constants: views into one shared buffer holding the file bytes.
    auto buf = std::make_shared<std::string>(std::move(bytes));
    const std::size_t blob = (16 + hl + 63) / 64 * 64;
    const uint64_t blob_bytes = h.at("blob_bytes").get<uint64_t>();
    XRT_CHECK(buf->size() == blob + blob_bytes, InvalidModelError, "plan file is truncated or has ",
              "trailing bytes: ", buf->size(), " bytes, expected ", blob + blob_bytes);
    for (const json& c : h.at("constants")) {
      const uint64_t off = c.at("offset").get<uint64_t>(), nb = c.at("nbytes").get<uint64_t>();
      XRT_CHECK(blob + off + nb <= buf->size() && off + nb >= off, InvalidModelError,
                "plan file is truncated: a constant extends past the end of the file");
      const int dt = c.at("dtype").get<int>();
      XRT_CHECK(dt >= 0 && dt < kNumDTypes, InvalidModelError, "plan file is corrupt: dtype code ", dt);
      Shape shape = c.at("shape").get<Shape>();
      XRT_CHECK(shape_numel(shape) * static_cast<int64_t>(dtype_size(static_cast<DType>(dt))) ==
                    static_cast<int64_t>(nb),
                InvalidModelError, "plan file is corrupt: a constant's size does not match its shape");
      // The blob offset is 64-byte aligned inside a std::string whose data is
      // only 16-byte aligned: copy into aligned storage.
      HostTensor t = HostTensor::alloc(static_cast<DType>(dt), shape);
      if (nb) std::memcpy(t.data, buf->data() + blob + off, nb);
      p.constants.push_back(std::move(t));
    }
    for (const PlanValue& v : p.values) {
      XRT_CHECK(v.constant < static_cast<int>(p.constants.size()), InvalidModelError,
                "plan file is corrupt: constant index out of range");
      XRT_CHECK(v.alias_of >= -1 && v.alias_of < nv, InvalidModelError,
                "plan file is corrupt: alias index out of range");
    }
  } catch (const json::exception& e) {
    XRT_THROW(InvalidModelError, "plan file is corrupt or from an incompatible build: ", e.what());
  }
  // Every step's kernel, bound again (the same kernels the plan recorded).
  prepare_loaded_steps(p);
  return p;
}

std::string ExecutionPlan::summary() const {
  std::ostringstream os;
  os << "ExecutionPlan (format " << header.format_version << ", device " << header.device
     << ", " << steps.size() << " steps, " << values.size() << " values)\n";
  os << "  model sha256 " << header.model_hash << "\n  policy " << header.policy_fingerprint << "\n";
  os << "  memory: arena " << memory.arena_bytes << " B (peak) vs " << memory.intermediate_bytes
     << " B sum of intermediates; constants " << memory.constant_bytes << " B; "
     << memory.dynamic_values << " values shaped at run time\n";
  for (const std::string& l : pass_log) os << "  pass " << l << "\n";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const PlanStep& s = steps[i];
    os << "  [" << std::setw(3) << i << "] " << s.node.op_type;
    if (s.node.has("_ops")) os << "(" << s.node.attr_str("_ops", "") << ")";
    os << " -> " << s.kernel << (s.alias ? " (view)" : "") << "  " << s.node.name << " :";
    for (int o : s.node.outputs) {
      if (o < 0) continue;
      const PlanValue& v = values[o];
      os << " " << dtype_name(v.dtype) << (v.shape ? shape_str(*v.shape) : std::string("[?]"));
    }
    os << "\n";
  }
  return os.str();
}

int ExecutionPlan::value_id(const std::string& name) const {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i].name == name) return static_cast<int>(i);
  return -1;
}

}  // namespace xpuruntime::graph
