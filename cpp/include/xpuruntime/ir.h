// The native engine's graph IR (DESIGN.md §5): values with dtypes and shapes
// (symbolic dimensions where the model declares them), nodes in ONNX terms, and
// host tensors for constants. The Python front end builds a Graph from an ONNX
// model; the compiler (graph/compiler.h) turns it into an ExecutionPlan. It lives on
// the ground floor beside the other public headers: the op library (ops/), the
// kernel registry and the execution providers use it, and none of them reaches up
// into graph/.
//
// Ownership: a Graph owns its nodes and values; constants share their bytes
// (HostTensor holds a shared_ptr, so an initializer handed over zero-copy from
// numpy stays alive as long as any graph or plan uses it). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "xpuruntime/dtype.h"

namespace xpuruntime::graph {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
using xpuruntime::shape_str;  // "[2, 3]" (xpuruntime/dtype.h)

// A dense, contiguous host tensor whose bytes are shared (immutable once built).
struct HostTensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::shared_ptr<void> holder;  // keeps `data` alive
  void* data = nullptr;

  bool defined() const { return holder != nullptr || data != nullptr; }
  int64_t numel() const { return shape_numel(shape); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  // Fresh 64-byte aligned, zero-filled storage.
  static HostTensor alloc(DType dtype, Shape shape);
  // A view over bytes someone else keeps alive through `holder`.
  static HostTensor wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> holder);
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Element i converted to int64 / double (any integral, bool or float dtype).
  int64_t int_at(int64_t i) const;
  double float_at(int64_t i) const;
  std::vector<int64_t> to_ints() const;
};

// One ONNX attribute. Attributes that arrive as text (through a dispatcher
// OpContext) are parsed on access, so getters work for both.
struct Attr {
  enum class Kind : uint8_t { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  HostTensor t;

  static Attr of_int(int64_t v);
  static Attr of_float(double v);
  static Attr of_string(std::string v);
  static Attr of_ints(std::vector<int64_t> v);
  static Attr of_floats(std::vector<double> v);
  static Attr of_tensor(HostTensor v);
  std::string text() const;  // "1", "0.5", "1,2,3", ... (tensors as "<tensor float32[2]>")
};

struct Node {
  std::string name;
  std::string op_type;  // ONNX op type, or a fused op of domain "xrt"
  std::string domain;   // "" (ai.onnx) or "xrt"
  std::vector<int> inputs;   // value ids; -1 marks an omitted optional input
  std::vector<int> outputs;  // value ids; -1 marks an omitted optional output
  std::map<std::string, Attr> attrs;

  bool has(const std::string& a) const { return attrs.count(a) != 0; }
  // Typed getters; a missing attribute gives the fallback, a malformed one throws
  // InvalidModelError naming node, op and attribute.
  int64_t attr_int(const std::string& a, int64_t fallback) const;
  double attr_float(const std::string& a, double fallback) const;
  std::string attr_str(const std::string& a, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& a, std::vector<int64_t> fallback = {}) const;
  std::vector<double> attr_floats(const std::string& a, std::vector<double> fallback = {}) const;
  const Attr* attr(const std::string& a) const;
  std::string where() const;  // "node 'conv1' (Conv)"
};

// A dimension as the model declares it: a number, a symbol ("batch") or unknown.
struct Dim {
  int64_t value = -1;  // >= 0 when known
  std::string symbol;
};

struct Value {
  std::string name;
  DType dtype = DType::kFloat32;
  bool dtype_known = false;
  std::optional<Shape> shape;  // concrete shape, when known at compile time
  std::optional<std::vector<Dim>> declared;  // as the model declares it (graph I/O)
  HostTensor constant;                       // initializers and folded values
  int producer = -1;                         // node index, -1 for inputs/constants
};

class Graph {
 public:
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;   // value ids of graph inputs (initializers excluded)
  std::vector<int> outputs;  // value ids of graph outputs
  std::string name;

  // The id of `name`, creating the value when absent.
  int value_id(const std::string& name);
  // The id of `name`, or -1.
  int find(const std::string& name) const;
  // Appends a node (setting producers); throws InvalidModelError when an output is
  // produced twice.
  int add_node(Node n);

  // Checks the graph: every consumed value has a producer, an initializer or is a
  // graph input; no value is produced twice; no cycle. Throws InvalidModelError
  // naming the offending node and value.
  void validate() const;
  // Node indices in a topological order (stable: model order where possible).
  // Throws InvalidModelError naming a node on a cycle.
  std::vector<int> topo_order() const;

 private:
  std::unordered_map<std::string, int> by_name_;
};

}  // namespace xpuruntime::graph
