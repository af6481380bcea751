// The table of CPU OpDefs and their registration as Kernels in the KernelRegistry.
#include <algorithm>
#include <map>
#include <mutex>

#include "backends/cpu/kernels/onednn/onednn_conv.h"
#include "backends/cpu/kernels/cpu_op.h"

namespace xpuruntime::cpu {

void register_nhwc_pool_ops(std::vector<OpDef>& defs);  // pool_nhwc.cpp

namespace {

struct Table {
  std::vector<OpDef> defs;
  std::map<std::string, std::vector<const OpDef*>> by_type;
};

const Table& table() {
  static const Table* t = [] {
    auto* tb = new Table();  // never destroyed: kernels may run during static teardown
    register_elementwise_ops(tb->defs);
    register_unary_ops(tb->defs);
    register_reduce_ops(tb->defs);
    register_nn_ops(tb->defs);
    register_conv_ops(tb->defs);
    register_onednn_conv_ops(tb->defs);
    register_shape_ops(tb->defs);
    register_data_ops(tb->defs);
    register_fused_ops(tb->defs);
    register_attention_ops(tb->defs);
    register_index_ops(tb->defs);
    register_classify_ops(tb->defs);
    register_resize_ops(tb->defs);
    register_einsum_ops(tb->defs);
    register_nhwc_pool_ops(tb->defs);
    for (OpDef& d : tb->defs) {
      // The op's semantics come from its schema; a kernel may narrow the dtypes.
      const ops::OpSchema* schema = ops::find_schema(d.op_type);
      XRT_CHECK(schema != nullptr, InvalidArgumentError, "CPU kernel '", d.kernel, "' for op '",
                d.op_type, "' has no ops::OpSchema; add one in cpp/src/ops/");
      d.key = schema->key;
      if (d.dtypes.empty()) d.dtypes = schema->dtypes;
      if (d.description.empty()) d.description = schema->description;
    }
    for (const OpDef& d : tb->defs) tb->by_type[d.op_type].push_back(&d);
    for (auto& [k, v] : tb->by_type) {
      std::stable_sort(v.begin(), v.end(),
                       [](const OpDef* a, const OpDef* b) { return a->priority > b->priority; });
    }
    return tb;
  }();
  return *t;
}

// One OpDef bound to one plan step: runs the op on a copy of the step's node (typed
// attributes as the model gave them), with the arguments as views.
class CpuOpPrepared final : public PreparedKernel {
 public:
  CpuOpPrepared(const OpDef* op, Node node) : op_(op), node_(std::move(node)) {}
  void run(const KernelArgs& args) const override {
    const std::vector<TensorView> in = views_of(args.inputs);
    std::vector<TensorView> out = views_of(args.outputs);
    op_->run(node_, in, out);
  }

 private:
  const OpDef* op_;
  Node node_;
};

// A registry Kernel over one OpDef. Plans run what prepare() returns; run() serves
// other callers (the Python dispatch API, tests) through a KernelLaunch.
class CpuOpKernel final : public Kernel {
 public:
  CpuOpKernel(KernelDef def, const OpDef* op) : Kernel(std::move(def)), op_(op) {}

  Support supports(const OpContext& ctx) const override {
    if (!op_->dtypes.empty() && !ctx.inputs.empty() &&
        std::find(op_->dtypes.begin(), op_->dtypes.end(), ctx.inputs[0].dtype) ==
            op_->dtypes.end()) {
      return Support::no(reason::kDtypeUnsupported,
                         std::string(op_->op_type) + " on the CPU does not take " +
                             std::string(dtype_name(ctx.inputs[0].dtype)));
    }
    if (!op_->supports) return Support::yes();
    Node n = node_of(ctx);
    std::vector<Meta> metas;
    for (const TensorSpec& s : ctx.inputs) {
      Meta m;
      m.present = true;
      m.dtype = s.dtype;
      if (!s.shape.empty() || s.layout() == "contiguous") m.shape = s.shape;
      metas.push_back(std::move(m));
    }
    return op_->supports(n, metas);
  }

  void run(KernelLaunch& launch) const override {
    XRT_CHECK(launch.ctx != nullptr, InvalidArgumentError, "KernelLaunch without an OpContext");
    Node n = node_of(*launch.ctx);
    auto view = [&](const Tensor& t) {
      XRT_CHECK(t.device().is_cpu() && t.is_contiguous(), InvalidArgumentError, op_->op_type,
                " (cpu kernel) needs contiguous CPU tensors, got ", t.str());
      return TensorView{t.dtype(), t.shape(), t.data_ptr()};
    };
    std::vector<TensorView> in, out;
    for (const Tensor& t : launch.inputs) in.push_back(view(t));
    for (const Tensor& t : launch.outputs) out.push_back(view(t));
    op_->run(n, in, out);
  }

  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    if (op_->prepare) return op_->prepare(*op_, pc);
    return std::make_shared<CpuOpPrepared>(op_, prepared_node(op_->op_type, pc));
  }

 private:
  Node node_of(const OpContext& ctx) const {
    Node n;
    n.name = ctx.node;
    n.op_type = op_->op_type;
    for (const auto& [k, v] : ctx.attrs) n.attrs[k] = graph::Attr::of_string(v);
    return n;
  }
  const OpDef* op_;
};

}  // namespace

std::vector<int64_t> TensorView::ints() const {
  return HostTensor::wrap(dtype, shape, data, nullptr).to_ints();
}

const std::vector<const OpDef*>& op_defs(const std::string& op_type) {
  static const std::vector<const OpDef*> kEmpty;
  const auto& m = table().by_type;
  auto it = m.find(op_type);
  return it == m.end() ? kEmpty : it->second;
}


std::vector<std::string> supported_op_types() {
  std::vector<std::string> v;
  for (const auto& [k, d] : table().by_type) v.push_back(k);
  return v;
}

const OpDef* find_op_def(const std::string& op_type, const std::string& kernel) {
  for (const OpDef* d : op_defs(op_type))
    if (d->kernel == kernel) return d;
  return nullptr;
}

Node prepared_node(const std::string& op_type, const PrepareContext& pc) {
  if (pc.node != nullptr) return *pc.node;
  XRT_CHECK(pc.ctx != nullptr, InvalidArgumentError, "preparing the CPU kernel of ", op_type,
            " needs a node or an OpContext");
  Node n;
  n.name = pc.ctx->node;
  n.op_type = op_type;
  for (const auto& [k, v] : pc.ctx->attrs) n.attrs[k] = graph::Attr::of_string(v);
  return n;
}

void register_cpu_op_kernels(KernelRegistry& registry) {
  for (const OpDef& d : table().defs) {
    if (registry.find(d.key, d.kernel)) continue;
    KernelDef def;
    def.op = d.key;
    def.name = d.kernel;
    def.provider = "cpu";
    def.device = DeviceKind::cpu();
    def.priority = d.priority;
    def.description = d.description;
    registry.register_kernel(std::make_shared<CpuOpKernel>(std::move(def), &d));
  }
}

}  // namespace xpuruntime::cpu
