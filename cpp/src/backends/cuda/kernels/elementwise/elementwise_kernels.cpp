// Registry kernels of the elementwise family: unary ops, Clip, binary ops with
// numpy broadcasting, Min/Max/Sum/Mean, Cast, Where, IsNaN and IsInf. prepare()
// reads the attributes and builds the broadcast plan once; run() rebuilds the plan
// only when the run's shapes differ from the prepared ones (a dynamic-shape plan).
#include "backends/cuda/kernels/elementwise/elementwise_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>

#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/elementwise/elementwise_impl.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/classify.h"

namespace xpuruntime::cuda_ops {
namespace {

struct UnaryEntry {
  const char* op_type;
  UnaryOp op;
  const std::vector<DType>* dtypes;
};

const UnaryEntry kUnary[] = {
    {"Neg", UnaryOp::kNeg, &kSignedTypes},
    {"Abs", UnaryOp::kAbs, &kSignedTypes},
    {"Relu", UnaryOp::kRelu, &kSignedTypes},
    {"Sign", UnaryOp::kSign, &kSignedTypes},
    {"Sqrt", UnaryOp::kSqrt, &kFloatTypes},
    {"Exp", UnaryOp::kExp, &kFloatTypes},
    {"Log", UnaryOp::kLog, &kFloatTypes},
    {"Erf", UnaryOp::kErf, &kFloatTypes},
    {"Tanh", UnaryOp::kTanh, &kFloatTypes},
    {"Sigmoid", UnaryOp::kSigmoid, &kFloatTypes},
    {"LeakyRelu", UnaryOp::kLeakyRelu, &kFloatTypes},
    {"HardSigmoid", UnaryOp::kHardSigmoid, &kFloatTypes},
    {"HardSwish", UnaryOp::kHardSwish, &kFloatTypes},
    {"Gelu", UnaryOp::kGelu, &kFloatTypes},
    {"Reciprocal", UnaryOp::kReciprocal, &kFloatTypes},
    {"Floor", UnaryOp::kFloor, &kFloatTypes},
    {"Ceil", UnaryOp::kCeil, &kFloatTypes},
    {"Round", UnaryOp::kRound, &kFloatTypes},
    {"Sin", UnaryOp::kSin, &kFloatTypes},
    {"Cos", UnaryOp::kCos, &kFloatTypes},
    {"Softplus", UnaryOp::kSoftplus, &kFloatTypes},
    {"Elu", UnaryOp::kElu, &kFloatTypes},
};

const std::vector<DType> kBoolOnly = {DType::kBool};

struct BinaryEntry {
  const char* op_type;
  BinaryOp op;
  const std::vector<DType>* dtypes;
};

const BinaryEntry kBinary[] = {
    {"Add", BinaryOp::kAdd, &kNumericTypes},
    {"Sub", BinaryOp::kSub, &kNumericTypes},
    {"Mul", BinaryOp::kMul, &kNumericTypes},
    {"Div", BinaryOp::kDiv, &kNumericTypes},
    {"Mod", BinaryOp::kMod, &kNumericTypes},
    {"Equal", BinaryOp::kEqual, &kAllTypes},
    {"Less", BinaryOp::kLess, &kNumericTypes},
    {"Greater", BinaryOp::kGreater, &kNumericTypes},
    {"LessOrEqual", BinaryOp::kLessOrEqual, &kNumericTypes},
    {"GreaterOrEqual", BinaryOp::kGreaterOrEqual, &kNumericTypes},
    {"And", BinaryOp::kAnd, &kBoolOnly},
    {"Or", BinaryOp::kOr, &kBoolOnly},
    {"Xor", BinaryOp::kXor, &kBoolOnly},
};

// The broadcast plan of the prepared shapes; a run with other shapes builds its own.
class BroadcastPlan {
 public:
  BroadcastPlan() = default;
  BroadcastPlan(std::vector<Shape> ins, Shape out) : ins_(std::move(ins)), out_(std::move(out)) {
    ok_ = make_broadcast_index(out_, ins_, ix_);
  }
  // The plan for these operands (inputs idx..), or a fresh one for other shapes.
  StridedIndex for_run(const std::vector<const TensorArg*>& ins, const TensorArg& out,
                       const std::string& what) const {
    bool same = ok_ && out.shape == out_ && ins.size() == ins_.size();
    for (std::size_t k = 0; same && k < ins.size(); ++k) same = ins[k]->shape == ins_[k];
    if (same) return ix_;
    std::vector<Shape> shapes;
    for (const TensorArg* a : ins) shapes.push_back(a->shape);
    StridedIndex ix;
    XRT_CHECK(make_broadcast_index(out.shape, shapes, ix), UnsupportedOperationError, what,
              ": the broadcast needs more than ", kMaxRank, " dimensions after collapsing");
    return ix;
  }

 private:
  std::vector<Shape> ins_;
  Shape out_;
  StridedIndex ix_;
  bool ok_ = false;
};

Support broadcast_fits(const OpContext& ctx, std::size_t first, std::size_t count) {
  if (ctx.outputs.empty()) return Support::yes();
  std::vector<Shape> shapes;
  for (std::size_t k = first; k < first + count && k < ctx.inputs.size(); ++k)
    shapes.push_back(ctx.inputs[k].shape);
  StridedIndex ix;
  if (!make_broadcast_index(ctx.outputs[0].shape, shapes, ix))
    return Support::no(reason::kShapeUnsupported, "the broadcast needs more than " +
                                                      std::to_string(kMaxRank) +
                                                      " dimensions after collapsing");
  return Support::yes();
}

UnaryParams unary_params(const graph::Node& n, UnaryOp op) {
  UnaryParams p;
  if (op == UnaryOp::kLeakyRelu) p.alpha = n.attr_float("alpha", 0.01);
  if (op == UnaryOp::kElu) p.alpha = n.attr_float("alpha", 1.0);
  if (op == UnaryOp::kHardSigmoid) {
    p.alpha = n.attr_float("alpha", 0.2);
    p.beta = n.attr_float("beta", 0.5);
  }
  return p;
}

void add_unary(KernelRegistry& r, const UnaryEntry& e) {
  add_kernel(
      r, op_key_of(e.op_type), *e.dtypes,
      std::string(e.op_type) + " elementwise (fp32 math for 16-bit floats, vectorized)",
      [](const OpContext& ctx) {
        return first_refusal({require_arity(ctx, 1), require_dense(ctx)});
      },
      [e](const PrepareContext& pc) {
        UnaryOp op = e.op;
        if (op == UnaryOp::kGelu && pc.node->attr_str("approximate", "none") == "tanh")
          op = UnaryOp::kGeluTanh;
        const UnaryParams p = unary_params(*pc.node, op);
        return make_prepared([op, p](const KernelArgs& a) {
          launch_unary(op, a.inputs[0].dtype, p, a.inputs[0].data, a.outputs[0].data,
                       a.inputs[0].numel(), a.stream);
        });
      });
}

void add_binary(KernelRegistry& r, const BinaryEntry& e) {
  add_kernel(
      r, op_key_of(e.op_type), *e.dtypes,
      std::string(e.op_type) + " with numpy broadcasting (rank <= 8 after collapsing)",
      [](const OpContext& ctx) {
        return first_refusal(
            {require_arity(ctx, 2), require_dense(ctx), broadcast_fits(ctx, 0, 2)});
      },
      [e](const PrepareContext& pc) {
        BinaryOp op = e.op;
        if (op == BinaryOp::kMod && pc.node->attr_int("fmod", 0) != 0) op = BinaryOp::kFmod;
        const std::string what = where(pc);
        BroadcastPlan plan({pc.ctx->inputs[0].shape, pc.ctx->inputs[1].shape},
                           pc.ctx->outputs[0].shape);
        return make_prepared([op, plan, what](const KernelArgs& a) {
          const StridedIndex ix = plan.for_run({&a.inputs[0], &a.inputs[1]}, a.outputs[0], what);
          launch_binary(op, a.inputs[0].dtype, ix, a.inputs[0].data, a.inputs[1].data,
                        a.outputs[0].data, a.stream);
        });
      });
}

// Pow: same-dtype operands broadcast; a constant scalar exponent of any dtype runs
// as a unary kernel (exact for 2, 3 and 0.5, as the CPU kernel).
void add_pow(KernelRegistry& r) {
  add_kernel(
      r, "pow", {},
      "Pow with numpy broadcasting; a constant scalar exponent of any dtype runs as a unary "
      "kernel (float bases)",
      [](const OpContext& ctx) {
        Support s = first_refusal({require_arity(ctx, 2), require_dense(ctx),
                                   require_dtype(ctx, 0, kNumericTypes, "base"),
                                   require_dtype(ctx, 1, kNumericTypes, "exponent"),
                                   broadcast_fits(ctx, 0, 2)});
        if (!s.ok) return s;
        const bool float_base = std::find(kFloatTypes.begin(), kFloatTypes.end(),
                                          ctx.inputs[0].dtype) != kFloatTypes.end();
        if (ctx.inputs[0].dtype != ctx.inputs[1].dtype &&
            !(float_base && graph::shape_numel(ctx.inputs[1].shape) == 1))
          return Support::no(reason::kDtypeUnsupported,
                             "Pow with a " + std::string(dtype_name(ctx.inputs[1].dtype)) +
                                 " exponent on a " + std::string(dtype_name(ctx.inputs[0].dtype)) +
                                 " base runs only with a float base and a scalar exponent");
        return Support::yes();
      },
      [](const PrepareContext& pc) -> PreparedKernelPtr {
        const DType base = pc.ctx->inputs[0].dtype;
        const bool float_base =
            std::find(kFloatTypes.begin(), kFloatTypes.end(), base) != kFloatTypes.end();
        const graph::HostTensor* e = constant_input(pc, 1);
        if (float_base && e != nullptr && e->numel() == 1 &&
            graph::shape_numel(pc.ctx->outputs[0].shape) ==
                graph::shape_numel(pc.ctx->inputs[0].shape)) {
          UnaryParams p;
          p.alpha = e->float_at(0);
          return make_prepared([p](const KernelArgs& a) {
            launch_unary(UnaryOp::kPowScalar, a.inputs[0].dtype, p, a.inputs[0].data,
                         a.outputs[0].data, a.outputs[0].numel(), a.stream);
          });
        }
        XRT_CHECK(pc.ctx->inputs[1].dtype == base, UnsupportedOperationError, where(pc), ": a ",
                  dtype_name(pc.ctx->inputs[1].dtype), " exponent on a ", dtype_name(base),
                  " base must be a constant scalar for the CUDA kernel; cast the exponent to the "
                  "base's dtype in the model");
        const std::string what = where(pc);
        BroadcastPlan plan({pc.ctx->inputs[0].shape, pc.ctx->inputs[1].shape},
                           pc.ctx->outputs[0].shape);
        return make_prepared([plan, what](const KernelArgs& a) {
          const StridedIndex ix = plan.for_run({&a.inputs[0], &a.inputs[1]}, a.outputs[0], what);
          launch_binary(BinaryOp::kPow, a.inputs[0].dtype, ix, a.inputs[0].data, a.inputs[1].data,
                        a.outputs[0].data, a.stream);
        });
      });
}

// Min, Max, Sum, Mean over 1..N inputs: up to three inputs per pass, later passes
// fold into the output.
void add_variadic(KernelRegistry& r, const char* op_type, BinaryOp op, bool mean) {
  add_kernel(
      r, op_key_of(op_type), kNumericTypes,
      std::string(op_type) +
          " over 1..N broadcast inputs (three per pass, fp32 math for 16-bit floats)",
      [](const OpContext& ctx) {
        Support s = first_refusal({require_arity(ctx, 1), require_dense(ctx)});
        if (!s.ok) return s;
        for (std::size_t k = 0; k < ctx.inputs.size(); ++k) {
          Support f = broadcast_fits(ctx, k, 1);
          if (!f.ok) return f;
        }
        return Support::yes();
      },
      [op, mean](const PrepareContext& pc) {
        const std::string what = where(pc);
        return make_prepared([op, mean, what](const KernelArgs& a) {
          const std::size_t n = a.inputs.size();
          const TensorArg& out = a.outputs[0];
          const double scale = mean ? 1.0 / static_cast<double>(n) : 1.0;
          std::size_t next = 0;
          bool first = true;
          while (first || next < n) {
            std::vector<const TensorArg*> ops;
            if (!first) ops.push_back(&out);
            while (ops.size() < static_cast<std::size_t>(kMaxOperands) && next < n)
              ops.push_back(&a.inputs[next++]);
            std::vector<Shape> shapes;
            const void* ptrs[kMaxOperands] = {};
            for (std::size_t k = 0; k < ops.size(); ++k) {
              shapes.push_back(ops[k]->shape);
              ptrs[k] = ops[k]->data;
            }
            StridedIndex ix;
            XRT_CHECK(make_broadcast_index(out.shape, shapes, ix), UnsupportedOperationError, what,
                      ": the broadcast needs more than ", kMaxRank, " dimensions after collapsing");
            launch_variadic(op, out.dtype, ix, ptrs, static_cast<int>(ops.size()), out.data,
                            next == n ? scale : 1.0, a.stream);
            first = false;
          }
        });
      });
}

void add_clip(KernelRegistry& r) {
  add_kernel(
      r, "clip", {},
      "Clip(x, min, max): bounds from inputs (read on the device) or attributes; NaN passes",
      [](const OpContext& ctx) {
        Support s = first_refusal(
            {require_arity(ctx, 1), require_dense(ctx), require_dtype(ctx, 0, kNumericTypes, "x")});
        if (!s.ok) return s;
        for (std::size_t i = 1; i < ctx.inputs.size() && i < 3; ++i) {
          if (ctx.inputs[i].dtype != ctx.inputs[0].dtype &&
              graph::shape_numel(ctx.inputs[i].shape) > 0)
            return Support::no(reason::kDtypeUnsupported,
                               "Clip bound (input " + std::to_string(i) + ") must have x's dtype");
        }
        return Support::yes();
      },
      [](const PrepareContext& pc) {
        double lo = -std::numeric_limits<double>::infinity();
        double hi = std::numeric_limits<double>::infinity();
        switch (pc.ctx->inputs[0].dtype) {  // integers: the type's own range
          case DType::kInt8:
            lo = -128;
            hi = 127;
            break;
          case DType::kUInt8:
            lo = 0;
            hi = 255;
            break;
          case DType::kInt16:
            lo = -32768;
            hi = 32767;
            break;
          case DType::kInt32:
            lo = -2147483648.0;
            hi = 2147483647.0;
            break;
          case DType::kInt64:
            lo = -9.2233720368547758e18;
            hi = 9.2233720368547748e18;
            break;
          default:
            break;
        }
        lo = pc.node->attr_float("min", lo);
        hi = pc.node->attr_float("max", hi);
        return make_prepared([lo, hi](const KernelArgs& a) {
          auto bound = [&](std::size_t i) -> const void* {
            return a.inputs.size() > i && a.inputs[i].present() && a.inputs[i].numel() > 0
                       ? a.inputs[i].data
                       : nullptr;
          };
          launch_clip(a.inputs[0].dtype, a.inputs[0].data, a.outputs[0].data, a.inputs[0].numel(),
                      bound(1), bound(2), lo, hi, a.stream);
        });
      });
}

void add_cast_where_not(KernelRegistry& r) {
  add_kernel(
      r, "not", kBoolOnly, "logical Not",
      [](const OpContext& ctx) {
        return first_refusal({require_arity(ctx, 1), require_dense(ctx)});
      },
      [](const PrepareContext&) {
        return make_prepared([](const KernelArgs& a) {
          launch_unary(UnaryOp::kNot, DType::kBool, {}, a.inputs[0].data, a.outputs[0].data,
                       a.inputs[0].numel(), a.stream);
        });
      });
  add_kernel(
      r, "cast", kAllTypes,
      "Cast between float32/16, bfloat16, float64, int8-64, uint8, bool (float->int saturates, "
      "NaN->0)",
      [](const OpContext& ctx) {
        Support s = first_refusal({require_arity(ctx, 1), require_dense(ctx)});
        if (!s.ok) return s;
        if (std::find(kAllTypes.begin(), kAllTypes.end(), ctx.outputs[0].dtype) == kAllTypes.end())
          return Support::no(reason::kDtypeUnsupported,
                             "Cast to " + std::string(dtype_name(ctx.outputs[0].dtype)) +
                                 " has no CUDA kernel (float8 is storage only)");
        return Support::yes();
      },
      [](const PrepareContext&) {
        return make_prepared([](const KernelArgs& a) {
          launch_cast(a.inputs[0].dtype, a.outputs[0].dtype, a.inputs[0].data, a.outputs[0].data,
                      a.inputs[0].numel(), a.stream);
        });
      });
  add_kernel(
      r, "where", {},
      "Where(cond, X, Y) with numpy broadcasting, byte-generic (any dtype of 1, 2, 4 or 8 bytes)",
      [](const OpContext& ctx) {
        Support s = first_refusal(
            {require_arity(ctx, 3), require_dense(ctx),
             require_dtype(ctx, 0, kBoolOnly, "condition"), require_dtype(ctx, 1, kAllTypes, "X"),
             require_dtype(ctx, 2, {ctx.inputs.size() > 1 ? ctx.inputs[1].dtype : DType::kBool},
                           "Y"),
             broadcast_fits(ctx, 0, 3)});
        return s;
      },
      [](const PrepareContext& pc) {
        const std::string what = where(pc);
        BroadcastPlan plan(
            {pc.ctx->inputs[0].shape, pc.ctx->inputs[1].shape, pc.ctx->inputs[2].shape},
            pc.ctx->outputs[0].shape);
        return make_prepared([plan, what](const KernelArgs& a) {
          const StridedIndex ix =
              plan.for_run({&a.inputs[0], &a.inputs[1], &a.inputs[2]}, a.outputs[0], what);
          launch_where(dtype_size(a.outputs[0].dtype), ix, a.inputs[0].data, a.inputs[1].data,
                       a.inputs[2].data, a.outputs[0].data, a.stream);
        });
      });
}

// IsNaN, IsInf: float in, bool out (transformers' SDPA masks test scores with them).
void add_classify(KernelRegistry& r) {
  for (const ClassifyOp op : {ClassifyOp::kIsNaN, ClassifyOp::kIsInf}) {
    const bool nan = op == ClassifyOp::kIsNaN;
    add_kernel(
        r, nan ? "isnan" : "isinf", kFloatTypes,
        nan ? "IsNaN (float in, bool out)"
            : "IsInf (float in, bool out; detect_positive / detect_negative)",
        [](const OpContext& ctx) {
          return first_refusal(
              {require_arity(ctx, 1), require_dense(ctx), require_dtype(ctx, 0, kFloatTypes, "X")});
        },
        [op](const PrepareContext& pc) {
          const ops::IsInfAttrs attrs = ops::IsInfAttrs::from_node(*pc.node);
          return make_prepared([op, attrs](const KernelArgs& a) {
            launch_classify(op, a.inputs[0].dtype, a.inputs[0].data, a.outputs[0].data,
                            a.inputs[0].numel(), attrs.positive, attrs.negative, a.stream);
          });
        });
  }
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& registry) {
  for (const UnaryEntry& e : kUnary) add_unary(registry, e);
  for (const BinaryEntry& e : kBinary) add_binary(registry, e);
  add_pow(registry);
  add_variadic(registry, "Min", BinaryOp::kMin, false);
  add_variadic(registry, "Max", BinaryOp::kMax, false);
  add_variadic(registry, "Sum", BinaryOp::kAdd, false);
  add_variadic(registry, "Mean", BinaryOp::kAdd, true);
  add_clip(registry);
  add_cast_where_not(registry);
  add_classify(registry);
}

}  // namespace xpuruntime::cuda_ops
