// The CPU op kernels of the native engine: one OpDef per (ONNX op, kernel) with a
// run function over raw contiguous views (the op's semantics are its ops::OpSchema).
// Each OpDef is also registered in the KernelRegistry (KernelDef data + a Kernel
// whose prepare() binds it to a plan step's node and whose run() adapts a
// KernelLaunch), so the Dispatcher chooses among them under a KernelPolicy and
// records why; a plan step runs the PreparedKernel.
//
// How to add an op: its semantics (shape inference, key, dtypes; a typed attribute
// struct in xpuruntime/ops/<family>.h if it has attributes) go into an ops::OpSchema
// (cpp/src/ops/); its CPU body is a `run` (or set_parsed_body over the attribute
// struct) in the family file here (elementwise.cpp, reduce.cpp, ...) with an OpDef in
// that file's register_*() function; register_cpu_kernels picks it up. Then list the
// op in docs/ops.md by running scripts/gen_ops_doc.py. Everything here is
// thread-safe: OpDefs are immutable after registration and run() has no state.
// MatMul and Gemm have no OpDef: the matmul kernels (onednn, cpu_blas, cpu_blocked) prepare
// them (gemm_call.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/kernels/half.h"
#include "xpuruntime/dtype.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ir.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/ops/op_schema.h"

namespace xpuruntime::cpu {

using graph::HostTensor;
using graph::Node;
using graph::Shape;
using graph::shape_numel;
using graph::shape_str;

using ops::all_known;
using ops::broadcast_shapes;
using ops::Meta;
using ops::norm_axis;
using ops::op_key;
using ops::out_meta;
using ops::require_inputs;

// A contiguous tensor during execution.
struct TensorView {
  DType dtype = DType::kFloat32;
  Shape shape;
  void* data = nullptr;

  int64_t numel() const { return shape_numel(shape); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  std::vector<int64_t> ints() const;
};

using RunFn =
    std::function<void(const Node&, const std::vector<TensorView>&, std::vector<TensorView>&)>;
using SupportsFn = std::function<Support(const Node&, const std::vector<Meta>&)>;
struct OpDef;
// Binds an op to one plan step when copying the node is not all (a conv's GEMM
// sub-kernel, chosen through pc.prepare_sub).
using PrepareFn = std::function<PreparedKernelPtr(const OpDef&, const PrepareContext&)>;

// The views of a prepared kernel's arguments (omitted operands: data == nullptr).
inline std::vector<TensorView> views_of(const std::vector<TensorArg>& args) {
  std::vector<TensorView> v;
  v.reserve(args.size());
  for (const TensorArg& a : args) v.push_back(TensorView{a.dtype, a.shape, a.data});
  return v;
}

struct OpDef {
  std::string op_type;  // ONNX op type ("Add"), or a fused op ("FusedElementwise")
  std::string kernel;   // kernel name in the registry ("cpu", "cpu_im2col", ...)
  std::vector<DType> dtypes;  // dtypes of input 0 it runs; empty = the schema's
  int priority = 0;
  std::string description;  // empty = the schema's
  RunFn run;
  SupportsFn supports;  // optional: case checks beyond the dtype of input 0
  // Optional: Kernel::prepare of this op's kernel. Default: a prepared kernel that
  // runs `run` on a copy of the step's node (pc.node, or one built from pc.ctx).
  PrepareFn prepare;
  // The op's dispatcher key, from its ops::OpSchema when the table is built.
  std::string key;
};

// All OpDefs by ONNX op type (domain "" or "xrt"), built once.
const std::vector<const OpDef*>& op_defs(const std::string& op_type);
std::vector<std::string> supported_op_types();
// The OpDef of (op_type, kernel), or nullptr.
const OpDef* find_op_def(const std::string& op_type, const std::string& kernel);
// Registers every OpDef in the registry (idempotent per registry).
void register_cpu_op_kernels(KernelRegistry& registry);
// The node a prepared op kernel runs on: *pc.node, or (callers outside a plan) a
// node of `op_type` named pc.ctx->node with pc.ctx's attributes as strings.
Node prepared_node(const std::string& op_type, const PrepareContext& pc);

// Family registration (one per file).
void register_elementwise_ops(std::vector<OpDef>& defs);
void register_unary_ops(std::vector<OpDef>& defs);
void register_reduce_ops(std::vector<OpDef>& defs);
void register_nn_ops(std::vector<OpDef>& defs);
void register_conv_ops(std::vector<OpDef>& defs);
void register_shape_ops(std::vector<OpDef>& defs);
void register_data_ops(std::vector<OpDef>& defs);
void register_fused_ops(std::vector<OpDef>& defs);
void register_attention_ops(std::vector<OpDef>& defs);
void register_index_ops(std::vector<OpDef>& defs);
void register_classify_ops(std::vector<OpDef>& defs);
void register_resize_ops(std::vector<OpDef>& defs);
void register_einsum_ops(std::vector<OpDef>& defs);

// A kernel whose attributes are parsed once per plan step: Attrs::from_node(node)
// runs in prepare(), body(attrs, node, in, out) on every run.
template <typename Attrs, typename Body>
class ParsedPrepared final : public PreparedKernel {
 public:
  ParsedPrepared(Node node, Body body)
      : node_(std::move(node)), attrs_(Attrs::from_node(node_)), body_(std::move(body)) {}
  void run(const KernelArgs& args) const override {
    const std::vector<TensorView> in = views_of(args.inputs);
    std::vector<TensorView> out = views_of(args.outputs);
    body_(attrs_, node_, in, out);
  }

 private:
  Node node_;
  Attrs attrs_;
  Body body_;
};

// Sets d.prepare to a ParsedPrepared over body, and d.run (callers without a
// prepared kernel) to parse and run on every call.
template <typename Attrs, typename Body>
void set_parsed_body(OpDef& d, Body body) {
  d.run = [body](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    body(Attrs::from_node(n), n, in, out);
  };
  d.prepare = [body](const OpDef& def, const PrepareContext& pc) -> PreparedKernelPtr {
    return std::make_shared<ParsedPrepared<Attrs, Body>>(prepared_node(def.op_type, pc), body);
  };
}

// A double result in an element type: integers saturate to their range and NaN
// becomes 0 (as Cast does); a plain cast of a value outside the range is undefined
// (an integer LogSumExp over nothing is -inf, an L2 of a wrapped sum can be NaN).
template <typename C>
inline C saturate_to(double v) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    constexpr C kMin = std::numeric_limits<C>::min(), kMax = std::numeric_limits<C>::max();
    if (std::isnan(v)) return C(0);
    if (v <= static_cast<double>(kMin)) return kMin;
    if (v >= static_cast<double>(kMax)) return kMax;  // (double)kMax may round up: >= is exact
    return static_cast<C>(v);
  } else {
    return static_cast<C>(v);
  }
}

// Parallel-for threshold: below this many elements (or units of work) a loop runs
// on the calling thread. Waking a second thread costs tens of microseconds on a
// quiet machine and milliseconds on a loaded one, more than ~100k cheap element
// operations take on one core.
inline constexpr int64_t kParallelGrain = 1 << 17;

// Calls f(T{}) with T the C++ storage type of `t` (Half/BFloat16 for 16-bit floats).
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kFloat16: return f(matmul::Half{});
    case DType::kBFloat16: return f(matmul::BFloat16{});
    case DType::kInt64: return f(int64_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt16: return f(int16_t{});
    case DType::kInt8: return f(int8_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kBool: return f(bool{});
    default: break;
  }
  XRT_THROW(UnsupportedOperationError, "dtype ", dtype_name(t),
            " is not supported by the CPU op kernels");
}

}  // namespace xpuruntime::cpu
