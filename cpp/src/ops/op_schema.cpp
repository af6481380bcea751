// The op schema table (see xpuruntime/ops/op_schema.h): built once from the family
// registrations, then immutable; plus the helpers the schemas and kernels share.
#include "xpuruntime/ops/op_schema.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "ops/families.h"
#include "xpuruntime/error.h"

namespace xpuruntime::ops {
namespace {

struct Table {
  std::vector<OpSchema> schemas;
  std::map<std::string, const OpSchema*> by_type;
};

const Table& table() {
  static const Table* t = [] {
    auto* tb = new Table();  // never destroyed: kernels may look schemas up during static teardown
    register_elementwise_schemas(tb->schemas);
    register_unary_schemas(tb->schemas);
    register_reduce_schemas(tb->schemas);
    register_nn_schemas(tb->schemas);
    register_conv_schemas(tb->schemas);
    register_gemm_schemas(tb->schemas);
    register_shape_schemas(tb->schemas);
    register_data_schemas(tb->schemas);
    register_fused_schemas(tb->schemas);
    register_index_schemas(tb->schemas);
    register_classify_schemas(tb->schemas);
    register_resize_schemas(tb->schemas);
    register_attention_schemas(tb->schemas);
    register_einsum_schemas(tb->schemas);
    register_nhwc_pool_schemas(tb->schemas);
    for (const OpSchema& s : tb->schemas) tb->by_type.emplace(s.op_type, &s);
    return tb;
  }();
  return *t;
}

}  // namespace

const OpSchema* find_schema(const std::string& op_type) {
  const auto& m = table().by_type;
  auto it = m.find(op_type);
  return it == m.end() ? nullptr : it->second;
}

std::vector<std::string> schema_op_types() {
  std::vector<std::string> v;
  for (const auto& [k, s] : table().by_type) v.push_back(k);
  return v;
}

std::string op_key(const std::string& op_type) {
  if (op_type == "Conv") return "conv";
  if (op_type == "NhwcConv") return "conv_nhwc";  // the layout pass's channels-last Conv (xrt)
  if (op_type == "MatMul" || op_type == "Gemm") return "matmul";
  if (op_type == "Softmax") return "softmax";
  if (op_type == "LayerNormalization") return "layernorm";
  if (op_type == "FusedAttention") return "attention";  // the compiler's fused node (xrt domain)
  std::string k = op_type;
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return std::tolower(c); });
  return k;
}

std::vector<int64_t> Meta::ints() const {
  graph::HostTensor t = graph::HostTensor::wrap(dtype, *shape, const_cast<void*>(data), nullptr);
  return t.to_ints();
}

std::vector<double> Meta::floats() const {
  graph::HostTensor t = graph::HostTensor::wrap(dtype, *shape, const_cast<void*>(data), nullptr);
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.float_at(i);
  return v;
}

Shape broadcast_shapes(const Node& n, const std::vector<Shape>& shapes) {
  std::size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    std::size_t off = rank - s.size();
    for (std::size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[off + i];
      int64_t d = s[i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string all;
      for (const Shape& t : shapes) all += graph::shape_str(t) + " ";
      XRT_THROW(InvalidModelError, n.where(), ": input shapes ", all,
                "cannot be broadcast together (numpy rules: each dimension must match or be 1)");
    }
  }
  return out;
}

int64_t norm_axis(const Node& n, int64_t axis, int64_t rank, bool inclusive) {
  // Inclusive axes (Flatten, Unsqueeze-like) range over [-rank, rank]; negatives
  // count from the back in both cases.
  const int64_t lim = inclusive ? rank + 1 : rank;
  const int64_t a = axis < 0 ? axis + rank : axis;
  XRT_CHECK(a >= 0 && a < lim, InvalidModelError, n.where(), ": axis ", axis,
            " is out of range for rank ", rank);
  return a;
}

void require_inputs(const Node& n, const std::vector<Meta>& in, std::size_t count) {
  XRT_CHECK(in.size() >= count, InvalidModelError, n.where(), ": expects at least ", count,
            " inputs, got ", in.size());
  for (std::size_t i = 0; i < count; ++i)
    XRT_CHECK(in[i].present, InvalidModelError, n.where(), ": input ", i,
              " is required but missing");
}

void require_scalar_input(const Node& n, const std::vector<Meta>& in, std::size_t i,
                          const char* what, const std::vector<DType>& dtypes) {
  if (i >= in.size() || !in[i].present) return;
  const Meta& m = in[i];
  if (!dtypes.empty()) {
    std::string names;
    for (DType t : dtypes) (names += names.empty() ? "" : ", ") += dtype_name(t);
    XRT_CHECK(std::find(dtypes.begin(), dtypes.end(), m.dtype) != dtypes.end(), InvalidModelError,
              n.where(), ": ", what, " is ", dtype_name(m.dtype), "; expected ", names);
  }
  if (m.shape)
    XRT_CHECK(m.rank() <= 1 && m.numel() == 1, InvalidModelError, n.where(), ": ", what,
              " must hold one value, got shape ", graph::shape_str(*m.shape));
}

Meta out_meta(DType dtype, Shape shape) {
  Meta m;
  m.present = true;
  m.dtype = dtype;
  m.shape = std::move(shape);
  return m;
}

bool all_known(const std::vector<Meta>& in) {
  for (const Meta& m : in)
    if (m.present && !m.shape) return false;
  return true;
}

bool infer_same(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  out[0].shape = in[0].shape;
  return in[0].shape.has_value();
}

OpSchema make_schema(const std::string& op_type, std::vector<DType> dtypes, std::string description,
                     InferFn infer) {
  OpSchema s;
  s.op_type = op_type;
  s.key = op_key(op_type);
  s.dtypes = std::move(dtypes);
  s.description = std::move(description);
  s.infer = std::move(infer);
  return s;
}

}  // namespace xpuruntime::ops
