// IsNaN, IsInf (float inputs, bool outputs) and InstanceNormalization on the
// CPU.
#include "xpuruntime/ops/classify.h"

#include <cmath>
#include <vector>

#include "backends/cpu/kernels/cpu_op.h"
#include "backends/cpu/kernels/parallel.h"

namespace xpuruntime::cpu {
namespace {

// y[i] = pred(x[i]) as bool bytes, x of any float dtype.
template <typename Pred>
void classify(const TensorView& x, TensorView& y, Pred pred) {
  auto* out = y.ptr<uint8_t>();
  const int64_t count = x.numel();
  visit_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      const T* p = x.ptr<const T>();
      parallel_for(count, count, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          out[i] = pred(static_cast<double>(Num<T>::load(p[i]))) ? 1 : 0;
      });
    }
  });
}

// Statistics in double: a channel can hold thousands of values of one sign,
// where a float running sum loses the digits the 1e-4 bar needs.
template <typename T>
void instance_norm(const TensorView& x, const TensorView& scale, const TensorView& bias,
                   TensorView& y, double eps) {
  using N = Num<T>;
  const int64_t nb = x.shape[0], c = x.shape[1];
  const int64_t inner = nb * c ? x.numel() / (nb * c) : 0;
  const T* xp = x.ptr<const T>();
  const T* sp = scale.ptr<const T>();
  const T* bp = bias.ptr<const T>();
  T* yp = y.ptr<T>();
  parallel_for(nb * c, x.numel() * 3, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const T* xr = xp + row * inner;
      T* yr = yp + row * inner;
      double mean = 0;
      for (int64_t i = 0; i < inner; ++i) mean += static_cast<double>(N::load(xr[i]));
      mean /= static_cast<double>(inner);
      double var = 0;
      for (int64_t i = 0; i < inner; ++i) {
        const double d = static_cast<double>(N::load(xr[i])) - mean;
        var += d * d;
      }
      var /= static_cast<double>(inner);
      const double ch = static_cast<double>(N::load(sp[row % c])) / std::sqrt(var + eps);
      const double sh = static_cast<double>(N::load(bp[row % c])) - mean * ch;
      for (int64_t i = 0; i < inner; ++i)
        yr[i] = N::store(static_cast<typename N::C>(static_cast<double>(N::load(xr[i])) * ch + sh));
    }
  });
}

}  // namespace

void register_classify_ops(std::vector<OpDef>& defs) {
  {
    OpDef d;
    d.op_type = "IsNaN";
    d.kernel = "cpu";
    d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      classify(in[0], out[0], [](double v) { return std::isnan(v); });
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.op_type = "IsInf";
    d.kernel = "cpu";
    set_parsed_body<ops::IsInfAttrs>(
        d, [](const ops::IsInfAttrs& a, const Node&, const std::vector<TensorView>& in,
              std::vector<TensorView>& out) {
          const bool neg = a.negative, pos = a.positive;
          classify(in[0], out[0],
                   [neg, pos](double v) { return std::isinf(v) && (v > 0 ? pos : neg); });
        });
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.op_type = "InstanceNormalization";
    d.kernel = "cpu";
    set_parsed_body<ops::InstanceNormAttrs>(
        d, [](const ops::InstanceNormAttrs& a, const Node&, const std::vector<TensorView>& in,
              std::vector<TensorView>& out) {
          if (in[0].numel() == 0) return;
          visit_dtype(in[0].dtype, [&](auto tag) {
            using T = decltype(tag);
            if constexpr (kIsFloat<T>) instance_norm<T>(in[0], in[1], in[2], out[0], a.epsilon);
          });
        });
    defs.push_back(std::move(d));
  }
}

}  // namespace xpuruntime::cpu
