// Unary elementwise ops (activations and math functions), Clip, Identity, Dropout.
// Branch-free float code (clamps, selects) vectorizes only when comparisons may be
// speculated; results are identical, only FP exception flags could differ. Before
// every include so inline helpers share these options and stay inlinable.
#pragma GCC optimize("no-trapping-math")
#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/cpu/kernels/elementwise.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/isa_clones.h"

namespace xpuruntime::cpu {
namespace {

template <Unary K, typename T>
void unary_loop(const UnaryParams& p, const T* x, T* y, int64_t n) {
  using N = Num<T>;
  parallel_for(n, n, [&](int64_t b, int64_t e) XRT_ISA_LAMBDA {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = N::store(apply_unary_k<K, typename N::C>(N::load(x[i]), p));
  });
}

template <Unary K>
void unary_typed(const UnaryParams& p, DType t, const void* x, void* y, int64_t n) {
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    unary_loop<K, T>(p, static_cast<const T*>(x), static_cast<T*>(y), n);
  });
}

}  // namespace

void run_unary(Unary k, const UnaryParams& p, DType t, const void* x, void* y, int64_t n) {
  switch (k) {
#define XRT_UNARY_CASE(K) \
  case Unary::K: return unary_typed<Unary::K>(p, t, x, y, n);
    XRT_UNARY_CASE(kIdentity) XRT_UNARY_CASE(kNeg) XRT_UNARY_CASE(kAbs) XRT_UNARY_CASE(kSqrt)
    XRT_UNARY_CASE(kExp) XRT_UNARY_CASE(kLog) XRT_UNARY_CASE(kErf) XRT_UNARY_CASE(kTanh)
    XRT_UNARY_CASE(kSigmoid) XRT_UNARY_CASE(kRelu) XRT_UNARY_CASE(kLeakyRelu)
    XRT_UNARY_CASE(kHardSigmoid) XRT_UNARY_CASE(kHardSwish) XRT_UNARY_CASE(kGelu)
    XRT_UNARY_CASE(kGeluTanh) XRT_UNARY_CASE(kReciprocal) XRT_UNARY_CASE(kClip)
    XRT_UNARY_CASE(kFloor) XRT_UNARY_CASE(kCeil) XRT_UNARY_CASE(kRound) XRT_UNARY_CASE(kSin)
    XRT_UNARY_CASE(kCos) XRT_UNARY_CASE(kSoftplus) XRT_UNARY_CASE(kSign) XRT_UNARY_CASE(kElu)
    XRT_UNARY_CASE(kNot)
#undef XRT_UNARY_CASE
  }
}

namespace {

void copy_view(const TensorView& a, TensorView& b) {
  if (a.data != b.data) std::memcpy(b.data, a.data, a.nbytes());
}

}  // namespace

void register_unary_ops(std::vector<OpDef>& defs) {
  for (const std::string& t : ops::unary_op_types()) {
    OpDef d;
    d.op_type = t;
    d.kernel = "cpu";
    d.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      Unary k;
      unary_kind(n, k);
      run_unary(k, unary_params(n, k), in[0].dtype, in[0].data, out[0].data, in[0].numel());
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.op_type = "Not";
    d.kernel = "cpu";
    d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      const auto* x = in[0].ptr<const uint8_t>();
      auto* y = out[0].ptr<uint8_t>();
      const int64_t n = in[0].numel();  // once: numel() multiplies the dims
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] == 0;
    };
    defs.push_back(std::move(d));
  }
  {
    // Clip: bounds from inputs 1 and 2 (opset >= 11) or attributes (older).
    OpDef d;
    d.op_type = "Clip";
    d.kernel = "cpu";
    d.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      auto has_bound = [&](std::size_t i) { return in.size() > i && in[i].data && in[i].numel() > 0; };
      bool integral = false;
      visit_dtype(in[0].dtype, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          // Integers clamp in their own type: a bound read through a double would
          // round (int64 above 2^53) and the type's range is the missing bound.
          integral = true;
          T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
          if (has_bound(1)) std::memcpy(&lo, in[1].data, sizeof(T));
          if (has_bound(2)) std::memcpy(&hi, in[2].data, sizeof(T));
          const T* x = in[0].ptr<const T>();
          T* y = out[0].ptr<T>();
          const int64_t count = in[0].numel();
          for (int64_t i = 0; i < count; ++i) y[i] = std::min(std::max(x[i], lo), hi);
        }
      });
      if (integral) return;
      auto bound = [&](std::size_t i, double fallback) {
        if (has_bound(i)) return HostTensor::wrap(in[i].dtype, {}, in[i].data, nullptr).float_at(0);
        return fallback;
      };
      UnaryParams p;
      p.lo = bound(1, n.attr_float("min", -std::numeric_limits<double>::infinity()));
      p.hi = bound(2, n.attr_float("max", std::numeric_limits<double>::infinity()));
      run_unary(Unary::kClip, p, in[0].dtype, in[0].data, out[0].data, in[0].numel());
    };
    defs.push_back(std::move(d));
  }
  for (const char* op : {"Identity", "Dropout"}) {
    OpDef d;
    d.op_type = op;
    d.kernel = "cpu";
    d.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      if (n.op_type == "Dropout" && in.size() > 2 && in[2].data &&
          in[2].ptr<const uint8_t>()[0] != 0) {
        XRT_THROW(UnsupportedOperationError, n.where(),
                  ": training_mode=true Dropout is random and not supported for inference; "
                  "export the model in eval mode");
      }
      copy_view(in[0], out[0]);
      if (out.size() > 1 && out[1].data) std::memset(out[1].data, 1, out[1].nbytes());
    };
    defs.push_back(std::move(d));
  }
}

}  // namespace xpuruntime::cpu
