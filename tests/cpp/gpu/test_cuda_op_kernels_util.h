// Shared harness of the CUDA op kernel tests (test_cuda_op_kernels*.cpp): host
// arrays held as float64 values exactly representable in their dtype, a runner
// that prepares the registered (op, "cuda") kernel on a node and runs it on the
// GPU, and comparisons that print every detail of the first mismatches (op,
// case, dtype, index, got, want, tolerance, seed).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/half_float.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ir.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/stream.h"
#include "xpuruntime/tensor.h"

namespace xpuruntime::cuda_op_tests {

using graph::Attr;
using graph::Shape;

inline uint64_t seed() {
  static const uint64_t s = [] {
    const char* e = std::getenv("XRT_TEST_SEED");
    return e != nullptr ? std::strtoull(e, nullptr, 10) : 20261125ull;
  }();
  return s;
}

inline bool is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 ||
         t == DType::kFloat64;
}

// Rounds v to what dtype t can hold (integers wrap like a C cast of an in-range value).
inline double round_to(DType t, double v) {
  using namespace matmul;
  switch (t) {
    case DType::kFloat32:
      return static_cast<float>(v);
    case DType::kFloat16:
      return half_to_float(float_to_half(static_cast<float>(v)));
    case DType::kBFloat16:
      return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    case DType::kFloat64:
      return v;
    case DType::kBool:
      return v != 0 ? 1 : 0;
    default:
      return std::nearbyint(v);
  }
}

// A host tensor as float64 values plus its dtype and shape.
struct HostArray {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<double> v;
  int64_t numel() const { return graph::shape_numel(shape); }
};

inline HostArray make_array(DType t, Shape shape, std::vector<double> v) {
  HostArray a{t, std::move(shape), std::move(v)};
  for (double& x : a.v) x = round_to(t, x);
  return a;
}

// Uniform values in [lo, hi) for floats, integers in [lo, hi] otherwise, bool 0/1.
inline HostArray random_array(std::mt19937_64& rng, DType t, Shape shape, double lo = -3,
                              double hi = 3) {
  HostArray a{t, std::move(shape), {}};
  a.v.resize(static_cast<std::size_t>(a.numel()));
  std::uniform_real_distribution<double> u(lo, hi);
  std::uniform_int_distribution<int64_t> ui(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  for (double& x : a.v) {
    if (t == DType::kBool)
      x = static_cast<double>(rng() & 1);
    else if (is_float(t))
      x = round_to(t, u(rng));
    else
      x = static_cast<double>(ui(rng));
  }
  return a;
}

inline Tensor to_host_tensor(const HostArray& a) {
  using namespace matmul;
  Tensor t = Tensor::empty(a.shape, a.dtype, Device::cpu());
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.v[static_cast<std::size_t>(i)];
    switch (a.dtype) {
      case DType::kFloat32:
        t.data<float>()[i] = static_cast<float>(x);
        break;
      case DType::kFloat16:
        t.data<uint16_t>()[i] = float_to_half(static_cast<float>(x));
        break;
      case DType::kBFloat16:
        t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(x));
        break;
      case DType::kFloat64:
        t.data<double>()[i] = x;
        break;
      case DType::kInt8:
        t.data<int8_t>()[i] = static_cast<int8_t>(x);
        break;
      case DType::kUInt8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(x);
        break;
      case DType::kInt16:
        t.data<int16_t>()[i] = static_cast<int16_t>(x);
        break;
      case DType::kInt32:
        t.data<int32_t>()[i] = static_cast<int32_t>(x);
        break;
      case DType::kInt64:
        t.data<int64_t>()[i] = static_cast<int64_t>(x);
        break;
      case DType::kBool:
        t.data<uint8_t>()[i] = x != 0 ? 1 : 0;
        break;
      default:
        ADD_FAILURE() << "test harness: dtype " << dtype_name(a.dtype) << " not handled";
    }
  }
  return t;
}

inline HostArray from_host_tensor(const Tensor& t) {
  using namespace matmul;
  HostArray a{t.dtype(), t.shape(), {}};
  a.v.resize(static_cast<std::size_t>(a.numel()));
  for (int64_t i = 0; i < a.numel(); ++i) {
    double& x = a.v[static_cast<std::size_t>(i)];
    switch (a.dtype) {
      case DType::kFloat32:
        x = t.data<float>()[i];
        break;
      case DType::kFloat16:
        x = half_to_float(t.data<uint16_t>()[i]);
        break;
      case DType::kBFloat16:
        x = bf16_to_float(t.data<uint16_t>()[i]);
        break;
      case DType::kFloat64:
        x = t.data<double>()[i];
        break;
      case DType::kInt8:
        x = t.data<int8_t>()[i];
        break;
      case DType::kUInt8:
        x = t.data<uint8_t>()[i];
        break;
      case DType::kInt16:
        x = t.data<int16_t>()[i];
        break;
      case DType::kInt32:
        x = t.data<int32_t>()[i];
        break;
      case DType::kInt64:
        x = static_cast<double>(t.data<int64_t>()[i]);
        break;
      case DType::kBool:
        x = t.data<uint8_t>()[i] != 0 ? 1 : 0;
        break;
      default:
        ADD_FAILURE() << "test harness: dtype " << dtype_name(a.dtype) << " not handled";
    }
  }
  return a;
}

// Relative tolerance per dtype (the brief's bar): fp32 1e-5, fp16 1e-3, bf16 1e-2;
// integers and bool exact. Used as |got - want| <= tol * max(1, |want|).
inline double tolerance(DType t) {
  switch (t) {
    case DType::kFloat32:
      return 1e-5;
    case DType::kFloat16:
      return 1e-3;
    case DType::kBFloat16:
      return 1e-2;
    case DType::kFloat64:
      return 1e-12;
    default:
      return 0;
  }
}

inline std::string shape_text(const Shape& s) { return graph::shape_str(s); }

// Compares got against want (same count), NaN matching NaN and infinities exactly.
// Reports the first 5 mismatches and the count; returns true when all match.
inline bool expect_close(const HostArray& got, const std::vector<double>& want,
                         const std::string& what, double tol = -1) {
  if (tol < 0) tol = tolerance(got.dtype);
  if (got.v.size() != want.size()) {
    ADD_FAILURE() << what << ": got " << got.v.size() << " elements, want " << want.size();
    return false;
  }
  int64_t bad = 0;
  std::ostringstream first;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.v[i], w = want[i];
    bool ok;
    if (std::isnan(w))
      ok = std::isnan(g);
    else if (std::isinf(w))
      ok = g == w;
    else
      ok = std::fabs(g - w) <= tol * std::max(1.0, std::fabs(w));
    if (!ok && bad++ < 5) first << "\n  [" << i << "] got " << g << " want " << w;
  }
  if (bad > 0) {
    ADD_FAILURE() << what << " (" << dtype_name(got.dtype) << ", tol " << tol << ", seed " << seed()
                  << "): " << bad << " of " << want.size() << " elements differ" << first.str();
  }
  return bad == 0;
}

// One op call: node attributes, inputs (absent = omitted optional input), which
// inputs the plan knows as constants, and the output specs.
struct OpCall {
  std::string op_type;
  std::map<std::string, Attr> attrs;
  std::vector<std::optional<HostArray>> inputs;
  std::vector<bool> constant;  // per input; missing entries = false
  std::vector<std::pair<DType, Shape>> outputs;
};

inline OpContext context_of(const OpCall& c, Device device, int capability) {
  OpContext ctx;
  std::string key = c.op_type;
  for (char& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  ctx.op = key;
  ctx.node = "test_" + key;
  ctx.device = device;
  ctx.capability = capability;
  for (const auto& in : c.inputs) {
    if (in)
      ctx.inputs.push_back({in->dtype, in->shape, {}});
    else
      ctx.inputs.push_back({DType::kFloat32, {0}, {}});
  }
  for (const auto& [t, s] : c.outputs) ctx.outputs.push_back({t, s, {}});
  for (const auto& [k, a] : c.attrs) ctx.attrs[k] = a.text();
  return ctx;
}

inline graph::Node node_of(const OpCall& c) {
  graph::Node n;
  n.op_type = c.op_type;
  n.name = "test_" + c.op_type;
  n.attrs = c.attrs;
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    n.inputs.push_back(c.inputs[i] ? static_cast<int>(i) : -1);
  for (std::size_t i = 0; i < c.outputs.size(); ++i) n.outputs.push_back(static_cast<int>(100 + i));
  return n;
}

class CudaOpTest : public ::testing::Test {
 public:
  void SetUp() override {
    if (DeviceManager::instance().get_device_count() == 0)
      GTEST_SKIP() << "no CUDA device: " << DeviceManager::instance().accelerator_unavailable_reason();
    const DeviceInfo info = DeviceManager::instance().get_device_info(0);
    capability_ = info.compute_capability_major * 10 + info.compute_capability_minor;
  }

  // The registered CUDA kernel of op (fails the test, naming the cause, when absent).
  static KernelPtr kernel_for(const std::string& op) {
    KernelPtr k = KernelRegistry::instance().find(op, "cuda");
    if (!k) {
      ADD_FAILURE() << "no kernel (" << op << ", \"cuda\") in the registry: "
                    << "register_cuda_op_kernels() is not called by the CUDA plugin's registration";
    }
    return k;
  }

  // A prepared call with its inputs uploaded and outputs allocated on cuda:0.
  struct Staged {
    PreparedKernelPtr kernel;
    KernelArgs args;
    std::vector<Tensor> keep;  // device inputs, workspace
    std::vector<Tensor> outputs;
  };

  // Prepares c (nullopt after a failure already reported).
  std::optional<Staged> stage(const OpCall& c) {
    OpContext ctx = context_of(c, Device::parse("cuda:0"), capability_);
    KernelPtr k = kernel_for(ctx.op);
    if (!k) return std::nullopt;
    const Support s = KernelRegistry::check(*k, ctx);
    if (!s.ok) {
      ADD_FAILURE() << c.op_type << " refused: " << s.reason_code << ": " << s.detail;
      return std::nullopt;
    }
    graph::Node node = node_of(c);
    PrepareContext pc;
    pc.ctx = &ctx;
    pc.node = &node;
    Staged st;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      const bool is_const = i < c.constant.size() && c.constant[i];
      if (!c.inputs[i]) {
        pc.constants.emplace_back();
        st.args.inputs.push_back(TensorArg{});
        continue;
      }
      Tensor h = to_host_tensor(*c.inputs[i]);
      if (is_const) {
        auto holder = std::make_shared<Tensor>(h);
        pc.constants.push_back(graph::HostTensor::wrap(
            h.dtype(), h.shape(), h.data_ptr(), std::shared_ptr<void>(holder, holder.get())));
      } else {
        pc.constants.emplace_back();
      }
      Tensor d = h.numel() > 0 ? h.to(Device::parse("cuda:0"))
                               : Tensor::empty(h.shape(), h.dtype(), Device::parse("cuda:0"));
      st.keep.push_back(d);
      st.args.inputs.push_back(TensorArg{d.dtype(), d.shape(), d.data_ptr()});
    }
    st.kernel = k->prepare(pc);
    for (const auto& [t, shape] : c.outputs) {
      Tensor d = Tensor::empty(shape, t, Device::parse("cuda:0"));
      st.outputs.push_back(d);
      st.args.outputs.push_back(TensorArg{t, shape, d.data_ptr()});
    }
    if (st.kernel->workspace_bytes() > 0) {
      Tensor ws = Tensor::empty({static_cast<int64_t>(st.kernel->workspace_bytes())}, DType::kUInt8,
                                Device::parse("cuda:0"));
      st.keep.push_back(ws);
      st.args.workspace = ws.data_ptr();
      st.args.workspace_bytes = st.kernel->workspace_bytes();
    }
    DeviceManager::instance().synchronize(0);
    return st;
  }

  static std::vector<HostArray> download(const Staged& st) {
    std::vector<HostArray> out;
    for (const Tensor& d : st.outputs) {
      Tensor h =
          d.numel() > 0 ? d.to(Device::cpu()) : Tensor::empty(d.shape(), d.dtype(), Device::cpu());
      DeviceManager::instance().synchronize(0);
      out.push_back(from_host_tensor(h));
    }
    return out;
  }

  // Prepares and runs c on cuda:0 (on a non-default stream), returns the outputs.
  std::vector<HostArray> run(const OpCall& c) {
    std::optional<Staged> st = stage(c);
    if (!st) return {};
    std::shared_ptr<Stream> stream = StreamManager::instance().create_stream(Device::parse("cuda:0"));
    st->args.stream = stream->native();
    st->kernel->run(st->args);
    stream->synchronize();
    return download(*st);
  }

  std::mt19937_64 rng{seed()};
  int capability_ = 0;
};

// Numpy broadcast helpers for the references.
inline Shape broadcast(const std::vector<Shape>& shapes) {
  std::size_t r = 0;
  for (const Shape& s : shapes) r = std::max(r, s.size());
  Shape out(r, 1);
  for (const Shape& s : shapes)
    for (std::size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[r - s.size() + i];
      if (s[i] != 1) o = s[i];
    }
  return out;
}
// Element of a (right-aligned, broadcast) at output linear index i.
inline double bcast_at(const HostArray& a, const Shape& out, int64_t i) {
  int64_t off = 0, stride = 1;
  for (std::size_t d = out.size(); d-- > 0;) {
    const int64_t idx = i % out[d];
    i /= out[d];
    const std::size_t ad = d + a.shape.size();
    if (ad < out.size()) continue;  // leading dims a does not have
    const std::size_t k = ad - out.size();
    if (a.shape[k] != 1) off += idx * stride;
    stride *= a.shape[k];
  }
  return a.v[static_cast<std::size_t>(off)];
}

}  // namespace xpuruntime::cuda_op_tests
