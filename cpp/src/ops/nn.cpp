// Schemas of normalization, softmax and pooling: Softmax, LogSoftmax,
// LayerNormalization, RMSNormalization, BatchNormalization (inference form), MaxPool, AveragePool,
// GlobalAveragePool, GlobalMaxPool.
#include "ops/families.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/nn.h"
#include "xpuruntime/ops/spatial.h"

namespace xpuruntime::ops {
namespace {

bool layernorm_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  const LayerNormAttrs attrs = LayerNormAttrs::from_node(n);
  const int64_t stash = attrs.stash_type;
  const DType sd = stash == 1 ? DType::kFloat32 : in[0].dtype;
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].present = true;
    out[i].dtype = i == 0 ? in[0].dtype : sd;
  }
  if (!in[0].shape) return false;
  const Shape& s = *in[0].shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  const int64_t axis = norm_axis(n, attrs.axis, rank);
  out[0].shape = s;
  Shape st(s.begin(), s.begin() + axis);
  for (int64_t i = axis; i < rank; ++i) st.push_back(1);
  for (std::size_t i = 1; i < out.size(); ++i) out[i].shape = st;
  if (in[1].shape) {
    int64_t len = 1;
    for (int64_t i = axis; i < rank; ++i) len *= s[i];
    int64_t sn = graph::shape_numel(*in[1].shape);
    XRT_CHECK(sn == len || (sn > 0 && len % sn == 0), InvalidModelError, n.where(), ": Scale has ",
              sn, " elements but the normalized shape has ", len);
  }
  return true;
}

// RMSNormalization (ONNX opset 23): Y = X / sqrt(mean(X^2 over the axes from `axis`)
// + epsilon) * scale. The attributes are LayerNormalization's (axis, epsilon,
// stash_type); one output.
bool rmsnorm_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  XRT_CHECK(out.size() == 1, InvalidModelError, n.where(), ": RMSNormalization has one output, got ",
            out.size());
  const LayerNormAttrs attrs = LayerNormAttrs::from_node(n);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape) return false;
  const Shape& s = *in[0].shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  const int64_t axis = norm_axis(n, attrs.axis, rank);
  out[0].shape = s;
  if (in[1].shape) {
    int64_t len = 1;
    for (int64_t i = axis; i < rank; ++i) len *= s[i];
    const int64_t sn = graph::shape_numel(*in[1].shape);
    XRT_CHECK(sn == len || (sn > 0 && len % sn == 0), InvalidModelError, n.where(), ": scale has ",
              sn, " elements but the normalized shape has ", len);
  }
  return true;
}

bool softmax_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  const bool known = infer_same(n, in, out);
  if (known) norm_axis(n, SoftmaxAttrs::from_node(n).axis, in[0].rank());  // axis in range
  return known;
}

bool batchnorm_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 5);
  XRT_CHECK(!BatchNormAttrs::from_node(n).training_mode && out.size() == 1, UnsupportedOperationError,
            n.where(),
            ": training_mode BatchNormalization is not supported for inference; "
            "export the model in eval mode");
  if (in[0].shape) {
    XRT_CHECK(in[0].rank() >= 2, InvalidModelError, n.where(), ": input must have rank >= 2");
  }
  // scale, B, mean and var hold one value per channel (X's dimension 1): the kernels
  // and the folding pass index them by channel.
  static const char* kParams[] = {"scale", "B", "input_mean", "input_var"};
  for (std::size_t i = 1; i < 5; ++i) {
    if (!in[i].shape) continue;
    XRT_CHECK(in[i].rank() == 1, InvalidModelError, n.where(), ": ", kParams[i - 1], " is ",
              graph::shape_str(*in[i].shape), " but must be 1-D (one value per channel)");
    if (in[0].shape)
      XRT_CHECK((*in[i].shape)[0] == (*in[0].shape)[1], InvalidModelError, n.where(), ": ",
                kParams[i - 1], " has ", (*in[i].shape)[0], " values but X ",
                graph::shape_str(*in[0].shape), " has ", (*in[0].shape)[1],
                " channels; give one value per channel");
  }
  return infer_same(n, in, out);
}

InferFn pool_infer(bool is_max) {
  return [is_max](const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
    require_inputs(n, in, 1);
    out[0].present = true;
    out[0].dtype = in[0].dtype;
    if (out.size() > 1) {
      XRT_CHECK(is_max, InvalidModelError, n.where(), ": only MaxPool has a second output");
      out[1].present = true;
      out[1].dtype = DType::kInt64;
    }
    if (!in[0].shape) return false;
    const Spatial g = pool_geometry(PoolAttrs::from_node(n), *in[0].shape);
    Shape s = {(*in[0].shape)[0], (*in[0].shape)[1]};
    s.insert(s.end(), g.out.begin(), g.out.end());
    for (auto& o : out) o.shape = s;
    return true;
  };
}

bool global_pool_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape) return false;
  XRT_CHECK(in[0].rank() >= 2, InvalidModelError, n.where(), ": input must have rank >= 2");
  Shape s = *in[0].shape;
  for (std::size_t i = 2; i < s.size(); ++i) s[i] = 1;
  out[0].shape = s;
  return true;
}

}  // namespace

SoftmaxAttrs SoftmaxAttrs::from_node(const Node& n) {
  SoftmaxAttrs a;
  a.axis = n.attr_int("axis", -1);
  return a;
}

LayerNormAttrs LayerNormAttrs::from_node(const Node& n) {
  LayerNormAttrs a;
  a.axis = n.attr_int("axis", -1);
  a.epsilon = n.attr_float("epsilon", 1e-5);
  a.stash_type = n.attr_int("stash_type", 1);
  return a;
}

BatchNormAttrs BatchNormAttrs::from_node(const Node& n) {
  BatchNormAttrs a;
  a.epsilon = n.attr_float("epsilon", 1e-5);
  a.training_mode = n.attr_int("training_mode", 0) != 0;
  return a;
}

void register_nn_schemas(std::vector<OpSchema>& s) {
  std::vector<DType> max_types = kFloatTypes;
  max_types.push_back(DType::kUInt8);
  max_types.push_back(DType::kInt8);
  s.push_back(
      make_schema("MaxPool", max_types, "MaxPool over 1-3 spatial dimensions", pool_infer(true)));
  s.push_back(make_schema("AveragePool", kFloatTypes, "AveragePool over 1-3 spatial dimensions",
                          pool_infer(false)));
  for (const std::string t : {"GlobalAveragePool", "GlobalMaxPool"})
    s.push_back(make_schema(t, kFloatTypes, t + " over all spatial dimensions", global_pool_infer));
  for (const std::string t : {"Softmax", "LogSoftmax"})
    s.push_back(
        make_schema(t, kFloatTypes, t + " along one axis (opset >= 13 semantics)", softmax_infer));
  s.push_back(make_schema("LayerNormalization", kFloatTypes,
                          "LayerNormalization over the trailing axes from `axis`",
                          layernorm_infer));
  s.push_back(make_schema("RMSNormalization", kFloatTypes,
                          "RMSNormalization (opset 23) over the trailing axes from `axis`; the "
                          "compiler also fuses the decomposed form (Llama, T5, Qwen)",
                          rmsnorm_infer));
  s.push_back(make_schema("BatchNormalization", kFloatTypes,
                          "BatchNormalization, inference form (running statistics)",
                          batchnorm_infer));
}

}  // namespace xpuruntime::ops
