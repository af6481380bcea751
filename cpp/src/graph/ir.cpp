#include "xpuruntime/ir.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <queue>
#include <sstream>

#include "core/half_float.h"
#include "xpuruntime/error.h"

namespace xpuruntime::graph {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

HostTensor HostTensor::alloc(DType dtype, Shape shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  XRT_CHECK(std::all_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d >= 0; }),
            InvalidModelError, "negative dimension in tensor shape ", shape_str(t.shape));
  std::size_t bytes = std::max<std::size_t>(t.nbytes(), 1);
  std::size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  XRT_CHECK(p != nullptr, OutOfMemoryError, "host allocation of ", rounded, " bytes failed");
  std::memset(p, 0, rounded);
  t.holder = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data = p;
  return t;
}

HostTensor HostTensor::wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> holder) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = data;
  t.holder = std::move(holder);
  return t;
}

int64_t HostTensor::int_at(int64_t i) const {
  switch (dtype) {
    case DType::kInt64: return ptr<int64_t>()[i];
    case DType::kInt32: return ptr<int32_t>()[i];
    case DType::kInt16: return ptr<int16_t>()[i];
    case DType::kInt8: return ptr<int8_t>()[i];
    case DType::kUInt8: return ptr<uint8_t>()[i];
    case DType::kBool: return ptr<uint8_t>()[i] != 0;
    default: {
      // A float read as an integer (a shape, an axis): NaN, infinities and values past
      // int64 have no integer value (converting them is undefined behaviour).
      const double v = float_at(i);
      XRT_CHECK(std::isfinite(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0,
                InvalidModelError, "tensor element ", i, " is ", v,
                ", which has no 64-bit integer value (a shape or index read from a float tensor)");
      return static_cast<int64_t>(v);
    }
  }
}

double HostTensor::float_at(int64_t i) const {
  switch (dtype) {
    case DType::kFloat32: return ptr<float>()[i];
    case DType::kFloat64: return ptr<double>()[i];
    case DType::kFloat16: return matmul::half_to_float(ptr<uint16_t>()[i]);
    case DType::kBFloat16: return matmul::bf16_to_float(ptr<uint16_t>()[i]);
    default: return static_cast<double>(int_at(i));
  }
}

std::vector<int64_t> HostTensor::to_ints() const {
  const int64_t n = numel();
  if (dtype == DType::kInt64) {
    const auto* p = static_cast<const int64_t*>(data);
    return std::vector<int64_t>(p, p + n);
  }
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = int_at(i);
  return v;
}

Attr Attr::of_int(int64_t v) {
  Attr a;
  a.kind = Kind::kInt;
  a.i = v;
  return a;
}
Attr Attr::of_float(double v) {
  Attr a;
  a.kind = Kind::kFloat;
  a.f = v;
  return a;
}
Attr Attr::of_string(std::string v) {
  Attr a;
  a.kind = Kind::kString;
  a.s = std::move(v);
  return a;
}
Attr Attr::of_ints(std::vector<int64_t> v) {
  Attr a;
  a.kind = Kind::kInts;
  a.ints = std::move(v);
  return a;
}
Attr Attr::of_floats(std::vector<double> v) {
  Attr a;
  a.kind = Kind::kFloats;
  a.floats = std::move(v);
  return a;
}
Attr Attr::of_tensor(HostTensor v) {
  Attr a;
  a.kind = Kind::kTensor;
  a.t = std::move(v);
  return a;
}

std::string Attr::text() const {
  std::ostringstream os;
  os.precision(9);
  switch (kind) {
    case Kind::kInt: os << i; break;
    case Kind::kFloat: os << f; break;
    case Kind::kString: os << s; break;
    case Kind::kInts:
      for (std::size_t k = 0; k < ints.size(); ++k) os << (k ? "," : "") << ints[k];
      break;
    case Kind::kFloats:
      for (std::size_t k = 0; k < floats.size(); ++k) os << (k ? "," : "") << floats[k];
      break;
    case Kind::kStrings:
      for (std::size_t k = 0; k < strings.size(); ++k) os << (k ? "," : "") << strings[k];
      break;
    case Kind::kTensor: os << "<tensor " << dtype_name(t.dtype) << shape_str(t.shape) << ">"; break;
  }
  return os.str();
}

namespace {
std::vector<std::string> split_text(const std::string& s) {
  std::vector<std::string> parts;
  if (s.empty()) return parts;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, ',')) parts.push_back(cur);
  return parts;
}
}  // namespace

const Attr* Node::attr(const std::string& a) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? nullptr : &it->second;
}

std::string Node::where() const {
  return "node '" + name + "' (" + (domain.empty() ? "" : domain + ".") + op_type + ")";
}

int64_t Node::attr_int(const std::string& a, int64_t fallback) const {
  const Attr* at = attr(a);
  if (!at) return fallback;
  if (at->kind == Attr::Kind::kInt) return at->i;
  if (at->kind == Attr::Kind::kFloat) return static_cast<int64_t>(at->f);
  if (at->kind == Attr::Kind::kString) {
    char* end = nullptr;
    long long v = std::strtoll(at->s.c_str(), &end, 10);
    if (end && *end == '\0' && !at->s.empty()) return v;
  }
  XRT_THROW(InvalidModelError, where(), ": attribute '", a, "' must be an integer, got '", at->text(),
            "'");
}

double Node::attr_float(const std::string& a, double fallback) const {
  const Attr* at = attr(a);
  if (!at) return fallback;
  if (at->kind == Attr::Kind::kFloat) return at->f;
  if (at->kind == Attr::Kind::kInt) return static_cast<double>(at->i);
  if (at->kind == Attr::Kind::kString) {
    char* end = nullptr;
    double v = std::strtod(at->s.c_str(), &end);
    if (end && *end == '\0' && !at->s.empty()) return v;
  }
  XRT_THROW(InvalidModelError, where(), ": attribute '", a, "' must be a float, got '", at->text(),
            "'");
}

std::string Node::attr_str(const std::string& a, const std::string& fallback) const {
  const Attr* at = attr(a);
  if (!at) return fallback;
  if (at->kind == Attr::Kind::kString) return at->s;
  XRT_THROW(InvalidModelError, where(), ": attribute '", a, "' must be a string, got '", at->text(),
            "'");
}

std::vector<int64_t> Node::attr_ints(const std::string& a, std::vector<int64_t> fallback) const {
  const Attr* at = attr(a);
  if (!at) return fallback;
  if (at->kind == Attr::Kind::kInts) return at->ints;
  if (at->kind == Attr::Kind::kInt) return {at->i};
  if (at->kind == Attr::Kind::kString) {
    std::vector<int64_t> out;
    for (const auto& p : split_text(at->s)) {
      char* end = nullptr;
      long long v = std::strtoll(p.c_str(), &end, 10);
      XRT_CHECK(end && *end == '\0' && !p.empty(), InvalidModelError, where(), ": attribute '", a,
                "' must be a list of integers, got '", at->s, "'");
      out.push_back(v);
    }
    return out;
  }
  XRT_THROW(InvalidModelError, where(), ": attribute '", a, "' must be a list of integers, got '",
            at->text(), "'");
}

std::vector<double> Node::attr_floats(const std::string& a, std::vector<double> fallback) const {
  const Attr* at = attr(a);
  if (!at) return fallback;
  if (at->kind == Attr::Kind::kFloats) return at->floats;
  if (at->kind == Attr::Kind::kFloat) return {at->f};
  if (at->kind == Attr::Kind::kString) {
    std::vector<double> out;
    for (const auto& p : split_text(at->s)) out.push_back(std::strtod(p.c_str(), nullptr));
    return out;
  }
  XRT_THROW(InvalidModelError, where(), ": attribute '", a, "' must be a list of floats, got '",
            at->text(), "'");
}

int Graph::value_id(const std::string& n) {
  auto it = by_name_.find(n);
  if (it != by_name_.end()) return it->second;
  Value v;
  v.name = n;
  values.push_back(std::move(v));
  int id = static_cast<int>(values.size()) - 1;
  by_name_.emplace(n, id);
  return id;
}

int Graph::find(const std::string& n) const {
  auto it = by_name_.find(n);
  return it == by_name_.end() ? -1 : it->second;
}

int Graph::add_node(Node n) {
  int idx = static_cast<int>(nodes.size());
  for (int o : n.outputs) {
    if (o < 0) continue;
    XRT_CHECK(o < static_cast<int>(values.size()), InvalidModelError, n.where(),
              ": output id out of range");
    Value& v = values[o];
    XRT_CHECK(v.producer < 0 && !v.constant.defined(), InvalidModelError, n.where(),
              ": output '", v.name,
              "' is already produced by another node or is an initializer; each value must "
              "have exactly one producer (the model is not in SSA form)");
    XRT_CHECK(std::find(inputs.begin(), inputs.end(), o) == inputs.end(), InvalidModelError,
              n.where(), ": output '", v.name, "' has the same name as a graph input");
    v.producer = idx;
  }
  nodes.push_back(std::move(n));
  return idx;
}

void Graph::validate() const {
  for (const Node& n : nodes) {
    for (int i : n.inputs) {
      if (i < 0) continue;
      XRT_CHECK(i < static_cast<int>(values.size()), InvalidModelError, n.where(),
                ": input id out of range");
      const Value& v = values[i];
      bool is_input = std::find(inputs.begin(), inputs.end(), i) != inputs.end();
      XRT_CHECK(v.producer >= 0 || v.constant.defined() || is_input, InvalidModelError, n.where(),
                ": input '", v.name,
                "' is neither a graph input, an initializer nor the output of any node "
                "(missing initializer or a broken graph)");
    }
  }
  for (int o : outputs) {
    const Value& v = values.at(o);
    bool is_input = std::find(inputs.begin(), inputs.end(), o) != inputs.end();
    XRT_CHECK(v.producer >= 0 || v.constant.defined() || is_input, InvalidModelError,
              "graph output '", v.name, "' is not produced by any node");
  }
  (void)topo_order();
}

std::vector<int> Graph::topo_order() const {
  const int n = static_cast<int>(nodes.size());
  std::vector<int> indeg(n, 0);
  std::vector<std::vector<int>> users(n);
  for (int k = 0; k < n; ++k) {
    for (int i : nodes[k].inputs) {
      if (i < 0) continue;
      int p = values[i].producer;
      if (p >= 0) {
        ++indeg[k];
        users[p].push_back(k);
      }
    }
  }
  // Smallest model index first keeps the model's order when it already is one.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int k = 0; k < n; ++k)
    if (indeg[k] == 0) ready.push(k);
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    int k = ready.top();
    ready.pop();
    order.push_back(k);
    for (int u : users[k])
      if (--indeg[u] == 0) ready.push(u);
  }
  if (static_cast<int>(order.size()) != n) {
    for (int k = 0; k < n; ++k) {
      if (indeg[k] > 0) {
        XRT_THROW(InvalidModelError, "the graph has a cycle through ", nodes[k].where(),
                  "; ONNX graphs must be acyclic (a node's input cannot depend on its own output)");
      }
    }
  }
  return order;
}

}  // namespace xpuruntime::graph
