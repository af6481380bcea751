// ExecutionPlan serialization (format described in plan.h) and summary().
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graph/plan_verify.h"
#include "graph/prepare.h"
#include "xpuruntime/error.h"
#include "xpuruntime/graph/plan.h"
#include "xpuruntime/provider.h"

namespace xpuruntime::graph {
namespace {

using json = nlohmann::json;

// Typed reads of header fields. nlohmann's get<int>() converts a float with a
// plain cast (undefined for 1e300) and wraps large integers: a file's numbers are
// accepted only as integers of the field's range.
int64_t as_i64(const json& j, const char* what) {
  XRT_CHECK(j.is_number_integer() &&
                (!j.is_number_unsigned() || j.get<uint64_t>() <= uint64_t{INT64_MAX}),
            InvalidModelError, "plan file is corrupt: ", what, " is not a 64-bit integer");
  return j.get<int64_t>();
}

int as_int(const json& j, const char* what) {
  const int64_t v = as_i64(j, what);
  XRT_CHECK(v >= INT32_MIN && v <= INT32_MAX, InvalidModelError, "plan file is corrupt: ", what,
            " = ", v, " is out of range");
  return static_cast<int>(v);
}

uint64_t as_u64(const json& j, const char* what) {
  XRT_CHECK(j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0),
            InvalidModelError, "plan file is corrupt: ", what, " is not a size");
  return j.get<uint64_t>();
}

std::vector<int> ids_from(const json& j, const char* what) {
  XRT_CHECK(j.is_array(), InvalidModelError, "plan file is corrupt: ", what, " is not a list");
  std::vector<int> v;
  v.reserve(j.size());
  for (const json& x : j) v.push_back(as_int(x, what));
  return v;
}

std::vector<int64_t> ints_from(const json& j, const char* what) {
  XRT_CHECK(j.is_array(), InvalidModelError, "plan file is corrupt: ", what, " is not a list");
  std::vector<int64_t> v;
  v.reserve(j.size());
  for (const json& x : j) v.push_back(as_i64(x, what));
  return v;
}

DType dtype_from(const json& j) {
  const int dt = as_int(j, "a dtype");
  XRT_CHECK(dt >= 0 && dt < kNumDTypes, InvalidModelError, "plan file is corrupt: dtype code ", dt);
  return static_cast<DType>(dt);
}

// A shape from the file, with its size bounded before anything is allocated.
Shape shape_from(const json& j, DType dtype, const char* what) {
  Shape s = ints_from(j, what);
  long double bytes = static_cast<long double>(dtype_size(dtype));
  for (int64_t d : s) {
    XRT_CHECK(d >= 0, InvalidModelError, "plan file is corrupt: ", what, " has dimension ", d);
    bytes *= static_cast<long double>(d);
  }
  XRT_CHECK(bytes <= static_cast<long double>(int64_t{1} << 48), InvalidModelError,
            "plan file is corrupt: ", what, " ", shape_str(s), " is impossibly large");
  return s;
}

// A library's message for ours: printable ASCII only (it may quote the file's
// bytes), at most a few hundred bytes.
std::string safe_text(const std::string& s) {
  std::string o = s.substr(0, 300);
  for (char& c : o)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return s.size() > 300 ? o + "..." : o;
}

// First bytes of a digest field as text for a message (hex digits only).
std::string digest_text(std::string_view d) {
  std::string o(d.substr(0, 16));
  for (char& c : o)
    if (!std::isxdigit(static_cast<unsigned char>(c))) c = '?';
  return o + "...";
}

json dims_json(const std::vector<Dim>& dims) {
  json a = json::array();
  for (const Dim& d : dims) a.push_back(d.value >= 0 ? json(d.value) : json(d.symbol));
  return a;
}

std::vector<Dim> dims_from(const json& a) {
  std::vector<Dim> v;
  for (const json& d : a) {
    Dim x;
    if (d.is_number())
      x.value = as_i64(d, "a declared dimension");
    else
      x.symbol = d.get<std::string>();
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
  const DType dt = dtype_from(j.at("dtype"));
  const Shape shape = shape_from(j.at("shape"), dt, "an attribute tensor's shape");
  const json& bytes = j.at("bytes");
  // The size is checked against the bytes the file holds before anything is allocated.
  XRT_CHECK(bytes.is_array() &&
                bytes.size() == static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dt),
            InvalidModelError, "plan file is corrupt: an attribute tensor has the wrong size");
  HostTensor t = HostTensor::alloc(dt, shape);
  auto* out = static_cast<uint8_t*>(t.data);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const int64_t b = as_i64(bytes[i], "an attribute tensor's byte");
    XRT_CHECK(b >= 0 && b <= 255, InvalidModelError,
              "plan file is corrupt: an attribute tensor's byte is ", b);
    out[i] = static_cast<uint8_t>(b);
  }
  return t;
}

json attr_json(const Attr& a) {
  switch (a.kind) {
    case Attr::Kind::kInt:
      return {{"i", a.i}};
    case Attr::Kind::kFloat:
      return {{"f", a.f}};
    case Attr::Kind::kString:
      return {{"s", a.s}};
    case Attr::Kind::kInts:
      return {{"ints", a.ints}};
    case Attr::Kind::kFloats:
      return {{"floats", a.floats}};
    case Attr::Kind::kStrings:
      return {{"strings", a.strings}};
    case Attr::Kind::kTensor:
      return {{"t", tensor_inline(a.t)}};
  }
  return {};
}

Attr attr_from(const json& j) {
  if (j.contains("i")) return Attr::of_int(as_i64(j["i"], "an integer attribute"));
  if (j.contains("f")) return Attr::of_float(j["f"].is_null() ? NAN : j["f"].get<double>());
  if (j.contains("s")) return Attr::of_string(j["s"].get<std::string>());
  if (j.contains("ints")) return Attr::of_ints(ints_from(j["ints"], "an integer list attribute"));
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
  XRT_CHECK(!header.preview, InvalidArgumentError,
            "a preview plan (compiled with dry_run) cannot be saved: it has no prepared "
            "kernels; compile without dry_run on a machine with the device and save that");
  json h;
  h["format_version"] = header.format_version;
  h["device"] = header.device;
  h["policy_fingerprint"] = header.policy_fingerprint;
  h["model_hash"] = header.model_hash;
  h["producer"] = header.producer;
  h["workspace_limit_bytes"] = header.workspace_limit_bytes;
  h["allow_tf32"] = header.allow_tf32;
  h["deterministic"] = header.deterministic;
  h["threads"] = header.threads;
  h["environment"] = header.environment;
  json vals = json::array();
  for (const PlanValue& v : values) {
    json j = {{"name", v.name},
              {"dtype", static_cast<int>(v.dtype)},
              {"kind", static_cast<int>(v.kind)},
              {"arena_offset", v.arena_offset},
              {"alias_of", v.alias_of},
              {"constant", v.constant},
              {"last_use", v.last_use}};
    if (v.shape) j["shape"] = *v.shape;
    if (v.declared) j["declared"] = dims_json(*v.declared);
    if (v.output_home >= 0) j["output_home"] = v.output_home;  // absent in older plans
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
    if (s.workspace_offset >= 0) {  // only when planned: older readers see no new fields
      steps_j.back()["workspace_offset"] = s.workspace_offset;
      steps_j.back()["workspace_bytes"] = s.workspace_bytes;
    }
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
    consts.push_back({{"dtype", static_cast<int>(c.dtype)},
                      {"shape", c.shape},
                      {"offset", off},
                      {"nbytes", c.nbytes()}});
    off += (c.nbytes() + 63) / 64 * 64;
  }
  h["constants"] = std::move(consts);
  h["blob_bytes"] = off;
  // Model names need not be valid UTF-8: replace bad bytes rather than fail.
  const std::string hs = h.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out(kPlanMagic, sizeof(kPlanMagic));
  uint64_t hl = hs.size();
  out.append(reinterpret_cast<const char*>(&hl), sizeof(hl));
  out.append(2 * kPlanDigestBytes, '0');  // the digests, written last
  out += hs;
  const std::size_t blob = plan_blob_offset(hl);
  out.resize(blob + off, '\0');
  off = 0;
  for (const HostTensor& c : constants) {
    if (c.nbytes()) std::memcpy(out.data() + blob + off, c.data, c.nbytes());
    off += (c.nbytes() + 63) / 64 * 64;
  }
  seal_plan_bytes(out);
  return out;
}

void ExecutionPlan::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  XRT_CHECK(f.good(), InvalidArgumentError, "cannot open '", path, "' for writing the plan");
  const std::string bytes = serialize();
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  XRT_CHECK(f.good(), InvalidArgumentError, "writing the plan to '", path, "' failed");
}

namespace {
ExecutionPlan parse_plan_checked(std::string_view bytes, const std::shared_ptr<void>& keep,
                                 const PlanExpectation& expect);
}  // namespace

ExecutionPlan ExecutionPlan::load(const std::string& path, const PlanExpectation& expect) {
  // One read into one buffer (a stringstream copied the whole file twice more: plans
  // carry their constants, hundreds of MB for a language model), in chunks on several
  // threads: one thread copying from the page cache and faulting in fresh pages ran at
  // about 2 GB/s.
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  XRT_CHECK(f.fd >= 0, InvalidArgumentError, "cannot open plan file '", path, "': ",
            std::strerror(errno));
  struct stat st {};
  XRT_CHECK(::fstat(f.fd, &st) == 0 && S_ISREG(st.st_mode), InvalidArgumentError,
            "cannot read plan file '", path, "': not a regular file");
  const auto size = static_cast<std::size_t>(st.st_size);
  // 64-byte aligned storage: the constants stay views into it (no second copy). Not
  // zero-filled first (HostTensor::alloc's memset touched every page of a language
  // model's plan once more before the read overwrote it).
  const std::size_t rounded = (size + 64) / 64 * 64;
  void* raw = std::aligned_alloc(64, rounded);
  XRT_CHECK(raw != nullptr, OutOfMemoryError, "host allocation of ", rounded,
            " bytes for plan file '", path, "' failed");
  HostTensor file = HostTensor::wrap(DType::kUInt8, {static_cast<int64_t>(size)}, raw,
                                     std::shared_ptr<void>(raw, [](void* q) { std::free(q); }));
  const auto t0 = std::chrono::steady_clock::now();
  constexpr std::size_t kPiece = std::size_t{8} << 20;
  parallel_chunks((size + kPiece - 1) / kPiece, 0, [&](std::size_t i) {
    char* dst = static_cast<char*>(raw) + i * kPiece;
    const std::size_t want = std::min(kPiece, size - i * kPiece);
    std::size_t got = 0;
    while (got < want) {
      const ssize_t r = ::pread(f.fd, dst + got, want - got, static_cast<off_t>(i * kPiece + got));
      if (r < 0 && errno == EINTR) continue;
      XRT_CHECK(r > 0, InvalidArgumentError, "reading plan file '", path, "' failed at byte ",
                i * kPiece + got, " of ", size, r < 0 ? ": " : " (the file shrank)",
                r < 0 ? std::strerror(errno) : "");
      got += static_cast<std::size_t>(r);
    }
  });
  const double read_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ExecutionPlan p = parse_plan_checked(
      std::string_view(static_cast<const char*>(file.data), size), file.holder, expect);
  p.timings_ms["read"] = read_ms;
  return p;
}

namespace {

// The container: magic, header length, both digests (before anything is parsed).
// Returns the header length.
uint64_t check_container(std::string_view bytes) {
  XRT_CHECK(bytes.size() >= 16 && std::memcmp(bytes.data(), kPlanMagic, 7) == 0, InvalidModelError,
            "not an xpuruntime plan file (bad magic); save one with InferenceSession.save_plan()");
  XRT_CHECK(bytes[7] != '1', InvalidModelError,
            "this plan file was written by an older xpuruntime (container XRTPLAN1, plan format "
            "2 or older, without a checksum), which this build does not load; compile the model "
            "again with this version and re-save the plan (InferenceSession.save_plan)");
  XRT_CHECK(bytes[7] == kPlanMagic[7] || bytes[7] == kPlanContainerV2, InvalidModelError,
            "plan file container version ", static_cast<int>(static_cast<unsigned char>(bytes[7])),
            " is not supported by this build (it reads XRTPLAN2 and XRTPLAN3); re-save the plan "
            "with this version");
  XRT_CHECK(bytes.size() >= kPlanPrefixBytes, InvalidModelError, "plan file is truncated (",
            bytes.size(), " bytes, shorter than its ", kPlanPrefixBytes, "-byte prefix)");
  uint64_t hl = 0;
  std::memcpy(&hl, bytes.data() + 8, sizeof(hl));
  XRT_CHECK(hl <= bytes.size() - kPlanPrefixBytes && plan_blob_offset(hl) <= bytes.size(),
            InvalidModelError, "plan file is truncated or corrupt (header length ", hl,
            " exceeds the file size ", bytes.size(), ")");
  const PlanDigests d = plan_digests(bytes, hl);
  const std::string_view file(bytes);
  const std::string_view head_rec = file.substr(16, kPlanDigestBytes);
  const std::string_view blob_rec = file.substr(16 + kPlanDigestBytes, kPlanDigestBytes);
  XRT_CHECK(head_rec == d.header, InvalidModelError,
            "plan file checksum mismatch in the header (its SHA-256 is ", digest_text(d.header),
            ", the file records ", digest_text(head_rec),
            "): the file is damaged or was edited; copy it again or re-save the plan");
  XRT_CHECK(blob_rec == d.blob, InvalidModelError,
            "plan file checksum mismatch in the constants blob (its SHA-256 is ",
            digest_text(d.blob), ", the file records ", digest_text(blob_rec),
            "): the file is damaged or was edited; copy it again or re-save the plan");
  return hl;
}

// `bytes`: the whole file. `keep`: the owner of those bytes when they start 64-byte
// aligned (load()): the constants are then views into them, not copies; null: copied.
ExecutionPlan parse_plan(std::string_view bytes, const std::shared_ptr<void>& keep,
                         const PlanExpectation& expect) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  Clock::time_point t0 = Clock::now();
  const uint64_t hl = check_container(bytes);
  const double verify_ms = since(t0);
  t0 = Clock::now();
  json h;
  try {
    h = json::parse(bytes.begin() + kPlanPrefixBytes,
                    bytes.begin() + static_cast<std::ptrdiff_t>(kPlanPrefixBytes + hl));
  } catch (const std::exception& e) {
    XRT_THROW(InvalidModelError, "plan file header is corrupt: ", safe_text(e.what()));
  }
  XRT_CHECK(h.is_object(), InvalidModelError, "plan file header is corrupt: not a JSON object");
  ExecutionPlan p;
  p.header.format_version = as_int(h.at("format_version"), "format_version");
  XRT_CHECK(p.header.format_version == kPlanFormatVersion, InvalidModelError,
            "plan format version ", p.header.format_version,
            " is not supported by this build (it reads version ", kPlanFormatVersion,
            "); compile the model again with this version and re-save the plan");
  p.header.device = h.at("device").get<std::string>();
  p.header.policy_fingerprint = h.at("policy_fingerprint").get<std::string>();
  p.header.model_hash = h.at("model_hash").get<std::string>();
  p.header.producer = h.value("producer", "");
  p.header.workspace_limit_bytes = as_u64(h.at("workspace_limit_bytes"), "workspace_limit_bytes");
  p.header.allow_tf32 = h.at("allow_tf32").get<bool>();
  p.header.deterministic = h.at("deterministic").get<bool>();
  // (absent in plans saved before the field existed: the default)
  if (h.contains("threads")) {
    const int64_t t = as_i64(h.at("threads"), "threads");
    XRT_CHECK(t >= 0 && t <= INT32_MAX, InvalidModelError, "plan file is corrupt: threads ", t,
              " is negative or too large");
    p.header.threads = static_cast<int>(t);
  }
  p.header.environment = h.at("environment").get<std::map<std::string, std::string>>();
  XRT_CHECK(expect.device.empty() || expect.device == p.header.device, InvalidModelError,
            "plan was compiled for device '", p.header.device, "' but this session runs on '",
            expect.device, "'; recompile the plan for this device");
  XRT_CHECK(
      expect.policy_fingerprint.empty() || expect.policy_fingerprint == p.header.policy_fingerprint,
      InvalidModelError, "plan was compiled under another policy (fingerprint ",
      p.header.policy_fingerprint.substr(0, 12), "…, this session's policy is ",
      expect.policy_fingerprint.substr(0, 12),
      "…); load it with the same KernelPolicy/ExecutionPolicy or recompile");
  for (const json& j : h.at("values")) {
    PlanValue v;
    v.name = j.at("name").get<std::string>();
    v.dtype = dtype_from(j.at("dtype"));
    const int kind = as_int(j.at("kind"), "a value's kind");
    XRT_CHECK(kind >= 0 && kind <= 3, InvalidModelError, "plan file is corrupt: value kind ", kind);
    v.kind = static_cast<PlanValue::Kind>(kind);
    v.arena_offset = as_i64(j.at("arena_offset"), "an arena offset");
    v.alias_of = as_int(j.at("alias_of"), "alias_of");
    v.constant = as_int(j.at("constant"), "a constant index");
    v.last_use = as_int(j.at("last_use"), "last_use");
    if (j.contains("output_home")) v.output_home = as_int(j["output_home"], "output_home");
    if (j.contains("shape")) v.shape = shape_from(j["shape"], v.dtype, "a value's shape");
    if (j.contains("declared")) v.declared = dims_from(j["declared"]);
    p.values.push_back(std::move(v));
  }
  for (const json& j : h.at("steps")) {
    PlanStep s;
    s.node.name = j.at("name").get<std::string>();
    s.node.op_type = j.at("op_type").get<std::string>();
    s.node.domain = j.at("domain").get<std::string>();
    s.node.inputs = ids_from(j.at("inputs"), "a step input id");
    s.node.outputs = ids_from(j.at("outputs"), "a step output id");
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
    if (j.contains("workspace_offset")) {
      s.workspace_offset = as_i64(j.at("workspace_offset"), "a step's workspace offset");
      s.workspace_bytes = as_i64(j.at("workspace_bytes"), "a step's workspace size");
    }
    p.steps.push_back(std::move(s));
  }
  p.inputs = ids_from(h.at("inputs"), "a plan input id");
  p.outputs = ids_from(h.at("outputs"), "a plan output id");
  const json& m = h.at("memory");
  p.memory.arena_bytes = as_i64(m.at("arena_bytes"), "arena_bytes");
  p.memory.intermediate_bytes = as_i64(m.at("intermediate_bytes"), "intermediate_bytes");
  p.memory.constant_bytes = as_i64(m.at("constant_bytes"), "constant_bytes");
  p.memory.dynamic_values = as_i64(m.at("dynamic_values"), "dynamic_values");
  p.memory.static_values = as_i64(m.at("static_values"), "static_values");
  p.decisions = h.at("decisions").get<std::vector<std::string>>();
  p.pass_log = h.at("pass_log").get<std::vector<std::string>>();
  const std::size_t blob = plan_blob_offset(hl);
  const uint64_t blob_bytes = as_u64(h.at("blob_bytes"), "blob_bytes");
  XRT_CHECK(bytes.size() - blob == blob_bytes, InvalidModelError,
            "plan file is truncated or has trailing bytes: ", bytes.size(), " bytes, expected ",
            blob, " + ", blob_bytes);
  for (const json& c : h.at("constants")) {
    const uint64_t off = as_u64(c.at("offset"), "a constant's offset");
    const uint64_t nb = as_u64(c.at("nbytes"), "a constant's size");
    XRT_CHECK(off % 64 == 0 && off <= blob_bytes && nb <= blob_bytes - off, InvalidModelError,
              "plan file is corrupt: a constant (offset ", off, ", ", nb,
              " bytes) is unaligned or extends past the end of the file");
    const DType dt = dtype_from(c.at("dtype"));
    const Shape shape = shape_from(c.at("shape"), dt, "a constant's shape");
    XRT_CHECK(static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dt) == nb, InvalidModelError,
              "plan file is corrupt: a constant's size does not match its shape");
    // The blob offset is 64-byte aligned in the file: a view when the file's bytes
    // are (load()'s buffer), else a copy into aligned storage (a std::string's data
    // is only 16-byte aligned).
    const char* src = bytes.data() + blob + off;
    if (keep != nullptr && reinterpret_cast<uintptr_t>(src) % 64 == 0) {
      p.constants.push_back(HostTensor::wrap(dt, shape, const_cast<char*>(src), keep));
      continue;
    }
    HostTensor t = HostTensor::alloc(dt, shape);
    if (nb) std::memcpy(t.data, src, nb);
    p.constants.push_back(std::move(t));
  }
  // Nothing from the file is used before it is checked against the plan itself,
  // the loading provider's environment, and (when the steps are bound again) the
  // kernel registry.
  verify_plan_structure(p);
  verify_plan_environment(p.header, *ProviderRegistry::instance().get(p.header.device));
  p.timings_ms["verify"] = verify_ms;
  p.timings_ms["parse"] = since(t0);
  prepare_loaded_steps(p);
  return p;
}

}  // namespace

namespace {

// One boundary for every failure a file can cause: typed errors pass through;
// anything else a damaged file provokes in a library (a JSON type error, a
// container length error, an allocation it asks for) becomes InvalidModelError.
ExecutionPlan parse_plan_checked(std::string_view bytes, const std::shared_ptr<void>& keep,
                                 const PlanExpectation& expect) {
  try {
    return parse_plan(bytes, keep, expect);
  } catch (const XpuRuntimeError&) {
    throw;
  } catch (const json::exception& e) {
    XRT_THROW(InvalidModelError,
              "plan file is corrupt or from an incompatible build: ", safe_text(e.what()));
  } catch (const std::bad_alloc&) {
    XRT_THROW(InvalidModelError, "plan file is corrupt: it asks for more memory than is available");
  } catch (const std::exception& e) {
    XRT_THROW(InvalidModelError, "plan file is corrupt: ", safe_text(e.what()));
  }
}

}  // namespace

ExecutionPlan ExecutionPlan::deserialize(std::string bytes, const PlanExpectation& expect) {
  return parse_plan_checked(bytes, nullptr, expect);
}

std::string ExecutionPlan::summary() const {
  std::ostringstream os;
  os << "ExecutionPlan (format " << header.format_version << ", device " << header.device << ", "
     << steps.size() << " steps, " << values.size() << " values)"
     << (header.preview ? " - offline preview (dry run): nothing prepared, not runnable" : "")
     << "\n";
  os << "  model sha256 " << header.model_hash << "\n  policy " << header.policy_fingerprint
     << "\n";
  os << "  threads: "
     << (header.threads > 0 ? std::to_string(header.threads) + " (ExecutionPolicy.threads)"
                            : std::string("default (ExecutionPolicy.threads=0)"))
     << "\n";
  if (!header.environment.empty()) {
    os << "  environment:";
    for (const auto& [k, v] : header.environment) os << " " << k << "=" << v;
    os << "\n";
  }
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
