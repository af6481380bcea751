// Precision lowering (passes.h): a float32 model compiled for fp16 or bf16. Every
// float32 value inside the graph becomes the target type (constants converted once,
// here), Cast nodes at the float32 graph inputs and outputs keep the model's
// interface, and dtype attributes that name float32 follow. Kernels keep their
// statistics and accumulators in fp32 (their contract), so only storage narrows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "core/half_float.h"
#include "graph/passes.h"
#include "xpuruntime/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace xpuruntime::graph::passes {
namespace {

// ONNX TensorProto data types of the Cast "to" attribute.
constexpr int64_t kOnnxFloat = 1;
constexpr int64_t kOnnxFloat16 = 10;
constexpr int64_t kOnnxBFloat16 = 16;

// Inputs whose ONNX type is float32 whatever the op's T (Resize's scales, Upsample's).
bool must_stay_float32(const Node& n, std::size_t input) {
  return (n.op_type == "Resize" && input == 2) || (n.op_type == "Upsample" && input == 1);
}

constexpr float kHalfMax = 65504.0f;

#if defined(__x86_64__)
// Eight at a time with F16C (round to nearest even, as float_to_half): a 250k-token
// embedding is 10^8 elements, seconds of the scalar path's branches per plan build.
// Finite values clamp to the fp16 range; infinities and NaN pass through.
__attribute__((target("avx2,f16c"))) int64_t to_half_f16c(const float* s, uint16_t* d,
                                                           int64_t n) {
  const __m256 hi = _mm256_set1_ps(kHalfMax), lo = _mm256_set1_ps(-kHalfMax);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(s + i);
    // min/max return their second operand when one is NaN: NaN stays NaN.
    __m256 c = _mm256_max_ps(lo, _mm256_min_ps(hi, v));
    const __m256 is_inf = _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), inf, _CMP_EQ_OQ);
    c = _mm256_blendv_ps(c, v, is_inf);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return i;
}

// CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no "f16c").
bool has_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) != 0 &&
           (c & bit_F16C) != 0;
  }();
  return yes;
}
#endif

// float32 -> target, finite values saturated to the target's range: a mask built
// from -FLT_MAX (what torch exports for "-infinity") must stay finite in fp16, or
// 0 * mask turns into NaN.
HostTensor convert(const HostTensor& src, DType to) {
  HostTensor out = HostTensor::alloc(to, src.shape);
  const float* s = src.ptr<float>();
  auto* d = out.ptr<uint16_t>();
  const int64_t n = src.numel();
  int64_t i = 0;
#if defined(__x86_64__)
  if (to == DType::kFloat16 && has_f16c()) i = to_half_f16c(s, d, n);
#endif
  for (; i < n; ++i) {
    float v = s[i];
    if (to == DType::kFloat16) {
      if (std::isfinite(v)) v = std::clamp(v, -kHalfMax, kHalfMax);
      d[i] = matmul::float_to_half(v);
    } else {
      d[i] = matmul::float_to_bf16(v);  // branch-light: the compiler vectorizes it
    }
  }
  return out;
}

Node cast_node(const Graph& g, const std::string& hint, int in, int out, DType to) {
  Node c;
  c.name = fresh_name(g, hint);
  c.op_type = "Cast";
  c.inputs = {in};
  c.outputs = {out};
  const int64_t onnx_to =
      to == DType::kFloat32 ? kOnnxFloat : (to == DType::kFloat16 ? kOnnxFloat16 : kOnnxBFloat16);
  c.attrs["to"] = Attr::of_int(onnx_to);
  return c;
}

int add_value(Graph& g, const Value& like, const std::string& suffix, DType dtype) {
  const std::optional<Shape> shape = like.shape;  // `like` may move when values grow
  const int id = g.value_id(fresh_name(g, like.name + suffix));
  Value& v = g.values[id];
  v.dtype = dtype;
  v.dtype_known = true;
  v.shape = shape;
  return id;
}

bool is_f32(const Value& v) { return v.dtype == DType::kFloat32; }

}  // namespace

int lower_precision(Graph& g, DType to, bool keep_io_types) {
  XRT_CHECK(to == DType::kFloat16 || to == DType::kBFloat16, InvalidArgumentError,
            "precision lowering targets float16 or bfloat16, got ", dtype_name(to));
  const std::string suffix = to == DType::kFloat16 ? "_fp16" : "_bf16";
  int changed = 0;
  std::set<int> keep;  // values read where ONNX insists on float32
  for (const Node& n : g.nodes)
    for (std::size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] >= 0 && must_stay_float32(n, k)) keep.insert(n.inputs[k]);

  // Graph inputs: a Cast to the target type feeds every former reader (none when the
  // interface narrows too: the input itself takes the target type below).
  std::vector<Node> added;
  for (int in : g.inputs) {
    if (!keep_io_types || !is_f32(g.values[in]) || keep.count(in)) continue;
    const int lowered = add_value(g, g.values[in], suffix, to);
    bool read = false;
    for (Node& n : g.nodes)
      for (int& i : n.inputs)
        if (i == in) {
          i = lowered;
          read = true;
        }
    if (read) added.push_back(cast_node(g, g.values[in].name + "_to" + suffix, in, lowered, to));
  }
  // Graph outputs produced by a node: the node writes a lowered value, a Cast
  // back to float32 writes the output.
  for (int out : g.outputs) {
    const Value& ov = g.values[out];
    if (!keep_io_types || !is_f32(ov) || ov.producer < 0 || ov.constant.defined()) continue;
    const int lowered = add_value(g, g.values[out], suffix, to);
    for (Node& n : g.nodes) {
      for (int& o : n.outputs)
        if (o == out) o = lowered;
      for (int& i : n.inputs)  // later readers of the output read the lowered value
        if (i == out) i = lowered;
    }
    g.values[out].producer = -1;  // the Cast below produces it now
    added.push_back(cast_node(g, g.values[out].name + "_to_fp32", lowered, out, DType::kFloat32));
  }
  std::set<int> io;
  if (keep_io_types) {
    io.insert(g.inputs.begin(), g.inputs.end());
    io.insert(g.outputs.begin(), g.outputs.end());
  }
  // Everything else that is float32 narrows; constants are converted here, once.
  for (int v = 0; v < static_cast<int>(g.values.size()); ++v) {
    Value& val = g.values[v];
    if (!is_f32(val) || io.count(v) || keep.count(v)) continue;
    if (val.constant.defined()) val.constant = convert(val.constant, to);
    val.dtype = to;
    ++changed;
  }
  // Attributes that name float32 for a value that is now narrower.
  for (Node& n : g.nodes) {
    const int out = n.outputs.empty() ? -1 : n.outputs[0];
    if (out < 0 || g.values[out].dtype != to) continue;
    if (n.op_type == "Cast" && n.attr_int("to", 0) == kOnnxFloat) {
      n.attrs["to"] = Attr::of_int(to == DType::kFloat16 ? kOnnxFloat16 : kOnnxBFloat16);
    } else if (n.op_type == "ConstantOfShape" && n.has("value") &&
               n.attrs["value"].t.dtype == DType::kFloat32) {
      n.attrs["value"].t = convert(n.attrs["value"].t, to);
    } else if (n.has("dtype") && n.attr_int("dtype", 0) == kOnnxFloat) {  // EyeLike, Random*
      n.attrs["dtype"] = Attr::of_int(to == DType::kFloat16 ? kOnnxFloat16 : kOnnxBFloat16);
    }
  }
  for (Node& c : added) {
    g.add_node(std::move(c));
    ++changed;
  }
  // Casts the lowering made no-ops: a model's own Cast to float32 (an RMSNorm computing
  // in fp32, a mask) now casts a value of the target type to the target type. Their
  // readers read the input; a graph output keeps its producer (the interface).
  std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  for (Node& n : g.nodes) {
    if (n.op_type != "Cast" || n.inputs.size() != 1 || n.outputs.size() != 1) continue;
    const int in = n.inputs[0], out = n.outputs[0];
    if (in < 0 || out < 0 || outputs.count(out) || g.values[in].dtype != to ||
        g.values[out].dtype != to)
      continue;
    for (Node& r : g.nodes)
      for (int& i : r.inputs)
        if (i == out) i = in;
    n.op_type.clear();
    ++changed;
  }
  compact(g);
  return changed;
}

}  // namespace xpuruntime::graph::passes
