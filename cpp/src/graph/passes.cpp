// Graph passes: inference + constant folding, BatchNorm folding, dead-code
// elimination (fusion lives in fusion.cpp).
#include "graph/passes.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/ops/op_schema.h"

namespace xpuruntime::graph::passes {
namespace {

using ops::Meta;

// Folded outputs may not grow the plan by more than this (Expand of a scalar into
// a large tensor stays a run-time op).
constexpr std::size_t kFoldGrowthBytes = 1 << 16;

Meta meta_of(const Graph& g, int v) {
  Meta m;
  if (v < 0) return m;
  const Value& val = g.values[v];
  m.present = true;
  m.dtype = val.dtype;
  m.shape = val.shape;
  if (val.constant.defined()) {
    m.shape = val.constant.shape;
    m.data = val.constant.data;
  }
  return m;
}

// The largest tensor a model may ask for (XRT_MAX_TENSOR_BYTES, default 16 GiB): a
// corrupt or hostile model must fail with an error, not exhaust the machine.
std::size_t max_tensor_bytes() {
  const char* env = std::getenv("XRT_MAX_TENSOR_BYTES");
  if (env && *env) {
    const long long v = std::atoll(env);
    if (v > 0) return static_cast<std::size_t>(v);
  }
  return std::size_t{16} << 30;
}

bool is_graph_output(const Graph& g, int v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

// Attributes as text for a folding kernel's supports() (tensor attributes are
// read from the node by prepare()).
std::map<std::string, std::string> attr_text(const Node& n) {
  std::map<std::string, std::string> m;
  for (const auto& [k, a] : n.attrs)
    if (a.kind != Attr::Kind::kTensor) m[k] = a.text();
  return m;
}

// The kernel that folds node n on the host: among the registry's native CPU
// kernels for the op key (not the torch-side ones a caller must ask for by name,
// nor kernels that allocate their own outputs), the first by priority that supports
// the case, else the first (the matmul kernels read an ONNX MatMul/Gemm node in
// prepare() whatever the context says). Null when there is none (the node then
// stays a run-time op).
KernelPtr fold_kernel(const OpContext& ctx) {
  KernelPtr first;
  for (const KernelPtr& k : KernelRegistry::instance().kernels(ctx.op)) {
    const KernelDef& d = k->def();
    if (d.device != DeviceKind::cpu() || d.requested_only || d.allocates_outputs) continue;
    if (!first) first = k;
    if (KernelRegistry::check(*k, ctx).ok) return k;
  }
  return first;
}

}  // namespace

void check_tensor_size(const Node& n, const std::string& value, DType dtype, const Shape& shape) {
  const std::size_t limit = max_tensor_bytes();
  long double bytes = static_cast<long double>(dtype_size(dtype));
  for (int64_t d : shape) {
    XRT_CHECK(d >= 0, InvalidModelError, n.where(), ": inferred a negative dimension for '", value,
              "' (", shape_str(shape), ")");
    bytes *= static_cast<long double>(d);
  }
  XRT_CHECK(bytes <= static_cast<long double>(limit), InvalidModelError, n.where(), ": value '",
            value, "' would need ", static_cast<double>(bytes), " bytes (", dtype_name(dtype),
            shape_str(shape), "), above the limit of ", limit,
            " bytes; the model is corrupt or too large (raise XRT_MAX_TENSOR_BYTES to allow it)");
}

std::string fresh_name(const Graph& g, const std::string& prefix) {
  for (int i = 0;; ++i) {
    std::string n = prefix + "_" + std::to_string(i);
    if (g.find(n) < 0) return n;
  }
}

std::vector<std::vector<int>> consumers(const Graph& g) {
  std::vector<std::vector<int>> c(g.values.size());
  for (int k = 0; k < static_cast<int>(g.nodes.size()); ++k) {
    if (g.nodes[k].op_type.empty()) continue;
    for (int i : g.nodes[k].inputs) {
      if (i < 0) continue;
      if (c[i].empty() || c[i].back() != k) c[i].push_back(k);
    }
  }
  return c;
}

void compact(Graph& g) {
  std::vector<Node> kept;
  for (Node& n : g.nodes)
    if (!n.op_type.empty()) kept.push_back(std::move(n));
  g.nodes = std::move(kept);
  for (Value& v : g.values) v.producer = -1;
  for (int k = 0; k < static_cast<int>(g.nodes.size()); ++k)
    for (int o : g.nodes[k].outputs)
      if (o >= 0) g.values[o].producer = k;
}

int infer_and_fold(Graph& g, bool fold) {
  int folded = 0;
  for (int k : g.topo_order()) {
    Node& n = g.nodes[k];
    const ops::OpSchema* schema = ops::find_schema(n.op_type);
    XRT_CHECK(schema != nullptr, UnsupportedOperationError, n.where(),
              ": op '", n.op_type, "' is not supported by the native engine");
    std::vector<Meta> in;
    for (int i : n.inputs) in.push_back(meta_of(g, i));
    std::vector<Meta> out(n.outputs.size());
    bool known = schema->infer(n, in, out);
    for (std::size_t j = 0; j < n.outputs.size(); ++j) {
      if (n.outputs[j] < 0) continue;
      Value& v = g.values[n.outputs[j]];
      v.dtype = out[j].dtype;
      v.dtype_known = true;
      if (out[j].shape) {
        check_tensor_size(n, v.name, out[j].dtype, *out[j].shape);
        v.shape = out[j].shape;
      } else {
        v.shape.reset();
      }
    }
    if (!fold || !schema->foldable || !known) continue;
    const bool shape_only = n.op_type == "Shape" || n.op_type == "Size";
    bool all_const = true;
    std::size_t in_bytes = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (!in[i].present) continue;
      if (!in[i].data && !shape_only) all_const = false;
      if (in[i].data) in_bytes += static_cast<std::size_t>(in[i].numel()) * dtype_size(in[i].dtype);
    }
    if (!all_const) continue;
    std::size_t out_bytes = 0;
    for (const Meta& m : out)
      if (m.present && m.shape) out_bytes += static_cast<std::size_t>(m.numel()) * dtype_size(m.dtype);
    if (out_bytes > in_bytes + kFoldGrowthBytes && n.op_type != "Constant") continue;
    // Run the op now through its CPU kernel, on host memory: inputs are constants
    // (or, for Shape/Size, only shapes).
    static char dummy[64];
    OpContext ctx;
    ctx.op = schema->key;
    ctx.node = n.name.empty() ? n.op_type : n.name;
    ctx.device = Device::cpu();
    ctx.attrs = attr_text(n);
    KernelArgs args;
    PrepareContext pc;
    pc.ctx = &ctx;
    pc.node = &n;
    for (const Meta& m : in) {
      if (!m.present) {
        ctx.inputs.emplace_back();
        args.inputs.emplace_back();
        pc.constants.emplace_back();
        continue;
      }
      void* data = m.data ? const_cast<void*>(m.data) : dummy;
      ctx.inputs.push_back(TensorSpec{m.dtype, *m.shape, {}});
      args.inputs.push_back(TensorArg{m.dtype, *m.shape, data});
      pc.constants.push_back(m.data ? HostTensor::wrap(m.dtype, *m.shape, data, nullptr) : HostTensor{});
    }
    std::vector<HostTensor> results;
    for (std::size_t j = 0; j < out.size(); ++j) {
      if (n.outputs[j] < 0) {
        args.outputs.emplace_back();
        continue;
      }
      results.push_back(HostTensor::alloc(out[j].dtype, *out[j].shape));
      ctx.outputs.push_back(TensorSpec{out[j].dtype, *out[j].shape, {}});
      args.outputs.push_back(TensorArg{out[j].dtype, *out[j].shape, results.back().data});
    }
    KernelPtr kernel = fold_kernel(ctx);
    if (!kernel) continue;
    PreparedKernelPtr prepared = kernel->prepare(pc);
    std::vector<char> workspace(prepared->workspace_bytes());
    args.workspace = workspace.empty() ? nullptr : workspace.data();
    args.workspace_bytes = workspace.size();
    prepared->run(args);
    std::size_t r = 0;
    for (std::size_t j = 0; j < out.size(); ++j) {
      if (n.outputs[j] < 0) continue;
      g.values[n.outputs[j]].constant = results[r++];
    }
    n.op_type.clear();  // folded
    ++folded;
  }
  compact(g);
  return folded;
}

int eliminate_dead_code(Graph& g) {
  std::vector<bool> needed(g.values.size(), false);
  for (int o : g.outputs) needed[o] = true;
  int removed = 0;
  auto order = g.topo_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node& n = g.nodes[*it];
    bool used = false;
    for (int o : n.outputs)
      if (o >= 0 && needed[o]) used = true;
    if (!used) {
      n.op_type.clear();
      ++removed;
      continue;
    }
    for (int i : n.inputs)
      if (i >= 0) needed[i] = true;
  }
  // Outputs no one reads become omitted (-1) so they are never allocated.
  for (Node& n : g.nodes) {
    if (n.op_type.empty()) continue;
    for (int& o : n.outputs)
      if (o >= 0 && !needed[o] && &o != &n.outputs[0]) o = -1;
  }
  compact(g);
  return removed;
}

int fold_batchnorm(Graph& g) {
  auto cons = consumers(g);
  int folded = 0;
  for (Node& bn : g.nodes) {
    if (bn.op_type != "BatchNormalization" || bn.inputs.size() < 5) continue;
    const int x = bn.inputs[0];
    const int p = x >= 0 ? g.values[x].producer : -1;
    if (p < 0 || cons[x].size() != 1 || is_graph_output(g, x)) continue;
    Node& prod = g.nodes[p];
    const bool conv = prod.op_type == "Conv";
    const bool gemm = prod.op_type == "Gemm" && prod.attr_float("alpha", 1.0) == 1.0 &&
                      prod.attr_float("beta", 1.0) == 1.0;
    if (!conv && !gemm) continue;
    auto is_const_f32 = [&](int v) {
      return v >= 0 && g.values[v].constant.defined() &&
             g.values[v].constant.dtype == DType::kFloat32;
    };
    bool ok = is_const_f32(prod.inputs[1]);
    for (int i = 1; i < 5; ++i) ok = ok && is_const_f32(bn.inputs[i]);
    const bool has_b = prod.inputs.size() > 2 && prod.inputs[2] >= 0;
    if (has_b) ok = ok && is_const_f32(prod.inputs[2]);
    if (!ok) continue;
    const HostTensor& w = g.values[prod.inputs[1]].constant;
    const int64_t c = gemm ? (prod.attr_int("transB", 0) ? w.shape[0] : w.shape.back())
                           : w.shape[0];
    const HostTensor& sc = g.values[bn.inputs[1]].constant;
    const HostTensor& bb = g.values[bn.inputs[2]].constant;
    const HostTensor& mu = g.values[bn.inputs[3]].constant;
    const HostTensor& var = g.values[bn.inputs[4]].constant;
    if (sc.numel() != c || bb.numel() != c || mu.numel() != c || var.numel() != c) continue;
    if (has_b && g.values[prod.inputs[2]].constant.numel() != c) continue;
    const double eps = bn.attr_float("epsilon", 1e-5);
    HostTensor nw = HostTensor::alloc(DType::kFloat32, w.shape);
    HostTensor nb = HostTensor::alloc(DType::kFloat32, {c});
    std::vector<double> a(c);
    for (int64_t j = 0; j < c; ++j) {
      a[j] = sc.float_at(j) / std::sqrt(var.float_at(j) + eps);
      const double b0 = has_b ? g.values[prod.inputs[2]].constant.float_at(j) : 0.0;
      nb.ptr<float>()[j] = static_cast<float>((b0 - mu.float_at(j)) * a[j] + bb.float_at(j));
    }
    const float* src = w.ptr<const float>();
    float* dst = nw.ptr<float>();
    const int64_t total = w.numel();
    if (conv || prod.attr_int("transB", 0)) {  // output channel is the leading dim
      const int64_t per = total / c;
      for (int64_t i = 0; i < total; ++i) dst[i] = static_cast<float>(src[i] * a[i / per]);
    } else {  // Gemm B is [K, N]: channel is the column
      for (int64_t i = 0; i < total; ++i) dst[i] = static_cast<float>(src[i] * a[i % c]);
    }
    const int wv = g.value_id(fresh_name(g, prod.name + "_bnfold_w"));
    g.values[wv].constant = nw;
    g.values[wv].dtype = DType::kFloat32;
    g.values[wv].dtype_known = true;
    g.values[wv].shape = nw.shape;
    const int bv = g.value_id(fresh_name(g, prod.name + "_bnfold_b"));
    g.values[bv].constant = nb;
    g.values[bv].dtype = DType::kFloat32;
    g.values[bv].dtype_known = true;
    g.values[bv].shape = nb.shape;
    prod.inputs[1] = wv;
    if (prod.inputs.size() < 3) prod.inputs.resize(3, -1);
    prod.inputs[2] = bv;
    prod.outputs[0] = bn.outputs[0];
    g.values[bn.outputs[0]].producer = p;
    bn.op_type.clear();
    ++folded;
  }
  compact(g);
  return folded;
}

}  // namespace xpuruntime::graph::passes
