// libFuzzer target: the native engine's graph compiler and executor on graphs built
// from fuzz bytes (issue 19). The contract under test: any graph the front end could
// hand over gives a plan or a typed XpuRuntimeError (never a crash, a sanitizer
// report or another exception type), and a plan runs without touching memory outside
// its buffers.
//
// What is fuzzed, and why not ONNX bytes: ONNX protobufs are parsed, checked and
// shape-inferred in Python by the onnx package (engines/native/frontend.py); the C++
// entry they reach is the Graph the binding builds from the front end's description
// (graph_from_py: initializers, typed inputs with declared dims, nodes with op type,
// value names and attributes, outputs). This target builds that same Graph from a
// compact byte form, decoded below, so every mutation is a structurally valid graph
// whose ops, wiring, attributes, shapes and constants are arbitrary: the schemas'
// inference checks (cpp/src/ops/), the passes, the planner and the CPU kernels see
// what a crafted model would give them. Seeds: fuzz/corpus/onnx_graph/ (inputs of a
// coverage-merged libFuzzer run; an op is an index into the sorted op list, so seeds
// keep decoding to valid, if different, graphs when ops are added). Crashes it found
// are regression tests in tests/python/test_hardening_semantics.py.
//
// Byte form (each field one byte unless stated; a field past the end reads as 0):
//   flags                 bit 0: fold constants, bit 1: fuse
//   inputs                1 + b % 3, each: dtype, rank (b % 5), dims (b % 7 each)
//   constants             b % 4, each: dtype, rank (b % 3), dims (b % 5 each), one byte
//                         per element (ints -4..12; floats b/8 - 16, or NaN/±inf)
//   nodes                 1 + b % 6, each: op (2 bytes, index into schema_op_types()),
//                         inputs (b % 5, each: a value index, 255 = omitted), outputs
//                         (1, or 1 + b % 2 for ops with optional outputs: the ONNX
//                         checker fixes the count), attributes (b % 5, each: name,
//                         kind, value)
//   the graph outputs are the last node's outputs.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "xpuruntime/error.h"
#include "xpuruntime/graph/compiler.h"
#include "xpuruntime/graph/executor.h"
#include "xpuruntime/ir.h"
#include "xpuruntime/graph/plan.h"
#include "xpuruntime/ops/op_schema.h"

using namespace xpuruntime;
using namespace xpuruntime::graph;

namespace {

// Reads the fuzz bytes front to back; past the end every read is 0.
class Reader {
 public:
  Reader(const uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}
  uint8_t byte() { return p_ < end_ ? *p_++ : 0; }
  uint16_t word() { return static_cast<uint16_t>(byte() | (byte() << 8)); }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// clang-format off
constexpr DType kDTypes[] = {DType::kFloat32, DType::kInt64, DType::kFloat64, DType::kBool,
                             DType::kInt32,   DType::kFloat16, DType::kUInt8, DType::kInt8};

// Attribute names the ops of ops/ read (a name no op reads is ignored, still legal).
const char* const kAttrNames[] = {
    "axis",      "axes",        "perm",           "kernel_shape", "strides",  "pads",
    "dilations", "group",       "keepdims",       "alpha",        "beta",     "epsilon",
    "to",        "mode",        "auto_pad",       "ceil_mode",    "transA",   "transB",
    "split",     "allowzero",   "starts",         "ends",         "value",    "approximate",
    "min",       "max",         "storage_order",  "count_include_pad",        "upper",
    "exclusive", "reverse",     "noop_with_empty_axes", "fmod",   "num_outputs", "stash_type",
    "training_mode", "start",   "end",            "_act",         "_bias",    "_sum",
    "_prog",     "_params",     "_lo",            "_hi",          "detect_negative",
    "detect_positive", "coordinate_transformation_mode", "reduction", "batch_dims"};
const char* const kStrings[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID",  "constant",
                                "reflect", "edge",      "wrap",       "tanh",   "none",
                                "Relu",    "Clip",      "Gelu",       "nearest", "linear",
                                "add",     "mul",       "",           "half_pixel", "Sigmoid"};
// clang-format on

int64_t small_int(uint8_t b) { return static_cast<int64_t>(b % 17) - 4; }

double small_float(uint8_t b) {
  if (b == 255) return std::numeric_limits<double>::quiet_NaN();
  if (b == 254) return std::numeric_limits<double>::infinity();
  if (b == 253) return -std::numeric_limits<double>::infinity();
  return b / 8.0 - 16.0;
}

// A constant of `dtype` and `shape` with one byte per element.
HostTensor make_constant(Reader& r, DType dtype, const Shape& shape) {
  HostTensor t = HostTensor::alloc(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint8_t b = r.byte();
    switch (dtype) {
      case DType::kFloat32:
        t.ptr<float>()[i] = static_cast<float>(small_float(b));
        break;
      case DType::kFloat64:
        t.ptr<double>()[i] = small_float(b);
        break;
      case DType::kInt64:
        t.ptr<int64_t>()[i] = small_int(b);
        break;
      case DType::kInt32:
        t.ptr<int32_t>()[i] = static_cast<int32_t>(small_int(b));
        break;
      case DType::kInt8:
        t.ptr<int8_t>()[i] = static_cast<int8_t>(small_int(b));
        break;
      case DType::kUInt8:
        t.ptr<uint8_t>()[i] = b;
        break;
      case DType::kBool:
        t.ptr<uint8_t>()[i] = b & 1;
        break;
      default:
        std::memset(static_cast<char*>(t.data) + i * dtype_size(dtype), b, dtype_size(dtype));
    }
  }
  return t;
}

Attr make_attr(Reader& r) {
  const uint8_t kind = r.byte() % 5;
  switch (kind) {
    case 0:
      return Attr::of_int(small_int(r.byte()));
    case 1:
      return Attr::of_float(small_float(r.byte()));
    case 2: {
      std::vector<int64_t> v(r.byte() % 7);
      for (int64_t& x : v) x = small_int(r.byte());
      return Attr::of_ints(std::move(v));
    }
    case 3: {
      std::vector<double> v(r.byte() % 5);
      for (double& x : v) x = small_float(r.byte());
      return Attr::of_floats(std::move(v));
    }
    default:
      return Attr::of_string(kStrings[r.byte() % std::size(kStrings)]);
  }
}

Graph decode(Reader& r, bool& fold, bool& fuse) {
  static const std::vector<std::string> kOps = ops::schema_op_types();
  static const std::set<std::string> kMultiOutput = {"Split", "Dropout", "MaxPool",
                                                     "LayerNormalization", "TopK"};
  const uint8_t flags = r.byte();
  fold = flags & 1;
  fuse = flags & 2;
  Graph g;
  g.name = "fuzz";
  std::vector<int> values;  // ids a node may read
  const int n_in = 1 + r.byte() % 3;
  for (int i = 0; i < n_in; ++i) {
    const int id = g.value_id("in" + std::to_string(i));
    Value& v = g.values[id];
    v.dtype = kDTypes[r.byte() % std::size(kDTypes)];
    v.dtype_known = true;
    std::vector<Dim> dims(r.byte() % 5);
    for (Dim& d : dims) d.value = r.byte() % 7;
    v.declared = dims;
    g.inputs.push_back(id);
    values.push_back(id);
  }
  const int n_const = r.byte() % 4;
  for (int i = 0; i < n_const; ++i) {
    const DType dt = kDTypes[r.byte() % std::size(kDTypes)];
    Shape s(r.byte() % 3);
    for (int64_t& d : s) d = r.byte() % 5;
    const int id = g.value_id("c" + std::to_string(i));
    g.values[id].constant = make_constant(r, dt, s);
    g.values[id].dtype = dt;
    g.values[id].dtype_known = true;
    values.push_back(id);
  }
  const int n_nodes = 1 + r.byte() % 6;
  std::vector<int> last;
  for (int k = 0; k < n_nodes; ++k) {
    Node n;
    n.name = "n" + std::to_string(k);
    n.op_type = kOps[r.word() % kOps.size()];
    if (const ops::OpSchema* s = ops::find_schema(n.op_type)) n.domain = s->domain;
    const int n_inputs = r.byte() % 5;
    for (int i = 0; i < n_inputs; ++i) {
      const uint8_t b = r.byte();
      n.inputs.push_back(b == 255 ? -1 : values[b % values.size()]);
    }
    // The ONNX checker (front end) guarantees each op's output count; only ops with
    // optional outputs get a second one here.
    const int n_outputs = 1 + (kMultiOutput.count(n.op_type) ? r.byte() % 2 : 0);
    last.clear();
    for (int o = 0; o < n_outputs; ++o) {
      const int id = g.value_id(n.name + "_out" + std::to_string(o));
      n.outputs.push_back(id);
      last.push_back(id);
    }
    const int n_attrs = r.byte() % 5;
    for (int a = 0; a < n_attrs; ++a) {
      const char* name = kAttrNames[r.byte() % std::size(kAttrNames)];
      n.attrs[name] = make_attr(r);
    }
    g.add_node(std::move(n));
    values.insert(values.end(), last.begin(), last.end());
  }
  g.outputs = last;
  return g;
}

// Whether every value the plan knows stays small enough for one fast run.
bool small_plan(const ExecutionPlan& plan) {
  int64_t total = 0;
  for (const PlanValue& v : plan.values) {
    if (!v.shape) continue;
    int64_t n = 1;
    for (int64_t d : *v.shape) {
      if (d < 0 || d > (int64_t{1} << 20)) return false;
      n *= d;
      if (n > (int64_t{1} << 20)) return false;
    }
    total += n;
    if (total > (int64_t{1} << 22)) return false;
  }
  return true;
}

void run_once(const std::shared_ptr<ExecutionPlan>& plan, Reader& r) {
  if (!small_plan(*plan)) return;
  std::vector<std::string> names;
  std::vector<HostTensor> inputs;
  for (int id : plan->inputs) {
    const PlanValue& v = plan->values[static_cast<std::size_t>(id)];
    Shape s;
    if (v.shape)
      s = *v.shape;
    else if (v.declared)
      for (const Dim& d : *v.declared) s.push_back(d.value >= 0 ? d.value : 2);
    HostTensor t = make_constant(r, v.dtype, s);
    names.push_back(v.name);
    inputs.push_back(std::move(t));
  }
  Executor ex(plan);
  ex.run(names, inputs);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Reader r(data, size);
  try {
    bool fold = false, fuse = false;
    Graph g = decode(r, fold, fuse);
    CompileOptions opt;
    // Folding runs kernels at compile time; long chains of growing constants would
    // only measure memory, so fold the short graphs.
    opt.fold_constants = fold && g.nodes.size() <= 3;
    opt.fuse = fuse;
    auto plan = std::make_shared<ExecutionPlan>(compile(std::move(g), opt));
    run_once(plan, r);
  } catch (const XpuRuntimeError&) {
    // A typed refusal: what a malformed graph must give.
  }
  return 0;
}
