// Binary and variadic elementwise ops with numpy broadcasting: arithmetic (Add,
// Sub, Mul, Div, Pow, Mod), comparisons, logic, Min/Max/Sum/Mean and Where; plus
// the dtype conversion shared with Cast.
// Branch-free float code (clamps, selects) vectorizes only when comparisons may be
// speculated; results are identical, only FP exception flags could differ. Before
// every include so inline helpers share these options and stay inlinable.
#pragma GCC optimize("no-trapping-math")
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/broadcast.h"
#include "backends/cpu/kernels/elementwise.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/isa_clones.h"

namespace xpuruntime::cpu {
namespace {

using matmul::BFloat16;
using matmul::Half;

// Runs z[i] = f(x[i], y[i]) over a broadcast, on compute types.
template <typename T, typename O, typename F>
void binary_loop(const TensorView& a, const TensorView& b, TensorView& o, F f) {
  const T* pa = a.ptr<const T>();
  const T* pb = b.ptr<const T>();
  O* po = o.ptr<O>();
  for_each_broadcast<2>(
      o.shape, {broadcast_strides(a.shape, o.shape), broadcast_strides(b.shape, o.shape)},
      [&](int64_t oo, std::array<int64_t, 2> offs, int64_t n, std::array<int64_t, 2> st) {
        const T* x = pa + offs[0];
        const T* y = pb + offs[1];
        O* z = po + oo;
        using NT = Num<T>;
        using NO = Num<O>;
        if (st[0] == 1 && st[1] == 1) {
          for (int64_t i = 0; i < n; ++i) z[i] = NO::store(f(NT::load(x[i]), NT::load(y[i])));
        } else if (st[0] == 1 && st[1] == 0) {
          const auto yv = NT::load(y[0]);
          for (int64_t i = 0; i < n; ++i) z[i] = NO::store(f(NT::load(x[i]), yv));
        } else if (st[0] == 0 && st[1] == 1) {
          const auto xv = NT::load(x[0]);
          for (int64_t i = 0; i < n; ++i) z[i] = NO::store(f(xv, NT::load(y[i])));
        } else {
          for (int64_t i = 0; i < n; ++i)
            z[i] = NO::store(f(NT::load(x[i * st[0]]), NT::load(y[i * st[1]])));
        }
      });
}

// Integer +, -, * wrap around like numpy (two's complement) instead of being UB.
template <typename C>
C wrap_add(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return static_cast<C>(a + b);
  }
}
template <typename C>
C wrap_sub(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return static_cast<C>(a - b);
  }
}
template <typename C>
C wrap_mul(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    using U = std::make_unsigned_t<C>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;  // no int promotion
    return static_cast<C>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
  } else {
    return static_cast<C>(a * b);
  }
}

template <typename C>
C safe_div(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    if (b == 0) return 0;  // integer division by zero: defined as 0, never a trap
    if constexpr (std::is_signed_v<C>) {
      if (b == -1) return wrap_sub<C>(C(0), a);  // avoids the INT_MIN / -1 overflow trap
    }
    return static_cast<C>(a / b);
  } else {
    return a / b;
  }
}

template <typename C>
C nan_min(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
  }
  return b < a ? b : a;
}
template <typename C>
C nan_max(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
  }
  return b > a ? b : a;
}

template <typename C>
C pow_of(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return b ? a : true;
  } else if constexpr (std::is_integral_v<C>) {
    // Exact integer power, wrapping modulo 2^bits like numpy (through a double it
    // rounded above 2^53, and casting an out-of-range result back was undefined).
    if constexpr (std::is_signed_v<C>) {
      if (b < 0) {  // 1 / a^|b| truncated: nonzero only for a = +-1 (0 for a = 0, no trap)
        if (a == C(1)) return C(1);
        if (a == C(-1)) return (b % 2 == 0) ? C(1) : C(-1);
        return C(0);
      }
    }
    uint64_t base = static_cast<uint64_t>(static_cast<int64_t>(a));
    uint64_t result = 1;
    for (uint64_t e = static_cast<uint64_t>(b); e != 0; e >>= 1) {
      if (e & 1) result *= base;
      base *= base;
    }
    return static_cast<C>(static_cast<std::make_unsigned_t<C>>(result));  // modular (C++20)
  } else {
    // Common exponents exactly and fast (GPT-2's x^3, variance's x^2).
    if (b == C(2)) return a * a;
    if (b == C(3)) return a * a * a;
    if (b == C(0.5)) return std::sqrt(a);
    return std::pow(a, b);
  }
}

template <typename C>
C mod_of(C a, C b, bool fmod) {
  if constexpr (std::is_integral_v<C>) {
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<C>) {
      if (b == -1) return 0;
    }
    C r = static_cast<C>(a % b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
    return r;
  } else {
    C r = std::fmod(a, b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
}

enum class Bin { kAdd, kSub, kMul, kDiv, kPow, kMin, kMax, kMod, kEq, kLt, kGt, kLe, kGe, kAnd, kOr, kXor };

bool is_compare(Bin k) { return k >= Bin::kEq; }

void run_binary(Bin kind, const TensorView& a, const TensorView& b, TensorView& o, bool fmod) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = typename Num<T>::C;
    switch (kind) {
      case Bin::kAdd: return binary_loop<T, T>(a, b, o, [](C x, C y) { return wrap_add<C>(x, y); });
      case Bin::kSub: return binary_loop<T, T>(a, b, o, [](C x, C y) { return wrap_sub<C>(x, y); });
      case Bin::kMul: return binary_loop<T, T>(a, b, o, [](C x, C y) { return wrap_mul<C>(x, y); });
      case Bin::kDiv: return binary_loop<T, T>(a, b, o, [](C x, C y) { return safe_div<C>(x, y); });
      case Bin::kPow: return binary_loop<T, T>(a, b, o, [](C x, C y) { return pow_of<C>(x, y); });
      case Bin::kMin: return binary_loop<T, T>(a, b, o, [](C x, C y) { return nan_min<C>(x, y); });
      case Bin::kMax: return binary_loop<T, T>(a, b, o, [](C x, C y) { return nan_max<C>(x, y); });
      case Bin::kMod:
        return binary_loop<T, T>(a, b, o, [fmod](C x, C y) { return mod_of<C>(x, y, fmod); });
      case Bin::kEq: return binary_loop<T, bool>(a, b, o, [](C x, C y) { return x == y; });
      case Bin::kLt: return binary_loop<T, bool>(a, b, o, [](C x, C y) { return x < y; });
      case Bin::kGt: return binary_loop<T, bool>(a, b, o, [](C x, C y) { return x > y; });
      case Bin::kLe: return binary_loop<T, bool>(a, b, o, [](C x, C y) { return x <= y; });
      case Bin::kGe: return binary_loop<T, bool>(a, b, o, [](C x, C y) { return x >= y; });
      case Bin::kAnd: return binary_loop<T, bool>(a, b, o, [](C x, C y) { return bool(x) && bool(y); });
      case Bin::kOr: return binary_loop<T, bool>(a, b, o, [](C x, C y) { return bool(x) || bool(y); });
      case Bin::kXor: return binary_loop<T, bool>(a, b, o, [](C x, C y) { return bool(x) != bool(y); });
    }
  });
}

OpDef binary_def(const std::string& type, Bin kind) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu";
  bool fmod = false;
  d.run = [kind, fmod](const Node& n, const std::vector<TensorView>& in,
                       std::vector<TensorView>& out) {
    if (kind == Bin::kPow && in[1].dtype != in[0].dtype) {
      // Mixed-type Pow: bring the exponent to the base's dtype first.
      HostTensor e = HostTensor::alloc(in[0].dtype, in[1].shape);
      cast_elements(in[1].dtype, in[1].data, in[0].dtype, e.data, in[1].numel());
      run_binary(kind, in[0], TensorView{in[0].dtype, in[1].shape, e.data}, out[0], false);
      return;
    }
    bool f = kind == Bin::kMod && n.attr_int("fmod", 0) != 0;
    run_binary(kind, in[0], in[1], out[0], f || fmod);
  };
  return d;
}

// Min, Max, Sum, Mean over any number of inputs.
OpDef variadic_def(const std::string& type, Bin kind) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu";
  const bool mean = type == "Mean";
  d.run = [kind, mean](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    TensorView& o = out[0];
    // o = broadcast(in[0]) then o = f(o, in[k]) in place (same shape, unit strides).
    TensorView zero{in[0].dtype, {}, nullptr};
    HostTensor z = HostTensor::alloc(in[0].dtype, {});
    zero.data = z.data;
    if (in.size() == 1) {
      run_binary(Bin::kAdd, in[0], zero, o, false);
    } else {
      run_binary(kind, in[0], in[1], o, false);
      for (std::size_t k = 2; k < in.size(); ++k) run_binary(kind, o, in[k], o, false);
    }
    if (mean && in.size() > 1) {
      HostTensor c = HostTensor::alloc(DType::kFloat64, {});
      *c.ptr<double>() = static_cast<double>(in.size());
      HostTensor cc = HostTensor::alloc(o.dtype, {});
      cast_elements(DType::kFloat64, c.data, o.dtype, cc.data, 1);
      run_binary(Bin::kDiv, o, TensorView{o.dtype, {}, cc.data}, o, false);
    }
  };
  return d;
}

template <typename From, typename To>
void cast_loop(const From* s, To* d, int64_t n) {
parallel_for(n, n, [&](int64_t i_begin, int64_t i_end) XRT_ISA_LAMBDA {
  for (int64_t i = i_begin; i < i_end; ++i) {
      auto v = Num<From>::load(s[i]);
      if constexpr (std::is_same_v<To, bool>) {
        d[i] = v != decltype(v)(0);
      } else if constexpr (std::is_integral_v<typename Num<To>::C> &&
                           std::is_floating_point_v<decltype(v)>) {
        // Float to int: NaN and out-of-range values must not be UB.
        using TI = typename Num<To>::C;
        double x = static_cast<double>(v);
        if (std::isnan(x)) {
          d[i] = 0;
        } else if (x >= static_cast<double>(std::numeric_limits<TI>::max())) {
          d[i] = std::numeric_limits<TI>::max();
        } else if (x <= static_cast<double>(std::numeric_limits<TI>::min())) {
          d[i] = std::numeric_limits<TI>::min();
        } else {
          d[i] = static_cast<TI>(x);
        }
      } else {
        d[i] = Num<To>::store(static_cast<typename Num<To>::C>(v));
      }
  }
});
}

}  // namespace

void cast_elements(DType from, const void* src, DType to, void* dst, int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * dtype_size(from));
    return;
  }
  visit_dtype(from, [&](auto ft) {
    using F = decltype(ft);
    visit_dtype(to, [&](auto tt) {
      using T = decltype(tt);
      cast_loop<F, T>(static_cast<const F*>(src), static_cast<T*>(dst), n);
    });
  });
}

void register_elementwise_ops(std::vector<OpDef>& defs) {
  defs.push_back(binary_def("Add", Bin::kAdd));
  defs.push_back(binary_def("Sub", Bin::kSub));
  defs.push_back(binary_def("Mul", Bin::kMul));
  defs.push_back(binary_def("Div", Bin::kDiv));
  defs.push_back(binary_def("Pow", Bin::kPow));
  defs.push_back(binary_def("Mod", Bin::kMod));
  defs.push_back(binary_def("Equal", Bin::kEq));
  defs.push_back(binary_def("Less", Bin::kLt));
  defs.push_back(binary_def("Greater", Bin::kGt));
  defs.push_back(binary_def("LessOrEqual", Bin::kLe));
  defs.push_back(binary_def("GreaterOrEqual", Bin::kGe));
  defs.push_back(binary_def("And", Bin::kAnd));
  defs.push_back(binary_def("Or", Bin::kOr));
  defs.push_back(binary_def("Xor", Bin::kXor));
  defs.push_back(variadic_def("Min", Bin::kMin));
  defs.push_back(variadic_def("Max", Bin::kMax));
  defs.push_back(variadic_def("Sum", Bin::kAdd));
  defs.push_back(variadic_def("Mean", Bin::kAdd));

  OpDef w;
  w.op_type = "Where";
  w.kernel = "cpu";
  w.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    TensorView& o = out[0];
    const auto* c = in[0].ptr<const uint8_t>();
    const std::size_t es = dtype_size(o.dtype);
    const auto* x = static_cast<const char*>(in[1].data);
    const auto* y = static_cast<const char*>(in[2].data);
    auto* z = static_cast<char*>(o.data);
    for_each_broadcast<3>(o.shape,
                          {broadcast_strides(in[0].shape, o.shape),
                           broadcast_strides(in[1].shape, o.shape),
                           broadcast_strides(in[2].shape, o.shape)},
                          [&](int64_t oo, std::array<int64_t, 3> offs, int64_t n,
                              std::array<int64_t, 3> st) {
                            visit_dtype(o.dtype, [&](auto tag) {
                              using T = decltype(tag);
                              const T* xs = reinterpret_cast<const T*>(x) + offs[1];
                              const T* ys = reinterpret_cast<const T*>(y) + offs[2];
                              T* zs = reinterpret_cast<T*>(z) + oo;
                              const uint8_t* cs = c + offs[0];
                              for (int64_t i = 0; i < n; ++i)
                                zs[i] = cs[i * st[0]] ? xs[i * st[1]] : ys[i * st[2]];
                            });
                            (void)es;
                          });
  };
  defs.push_back(std::move(w));
}

}  // namespace xpuruntime::cpu
