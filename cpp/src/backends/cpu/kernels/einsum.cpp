// Einsum on the CPU: every output element is the sum, over the labels the
// output does not keep, of the product of the operands' elements. The operands
// are read in place through per-label strides (a label repeated in one operand
// adds its dimensions' strides: a diagonal; a size-1 dimension broadcasts with
// stride 0), accumulating in double. Output elements are split among the
// threads.
#include "xpuruntime/ops/einsum.h"

#include <vector>

#include "backends/cpu/kernels/cpu_op.h"
#include "backends/cpu/kernels/parallel.h"

namespace xpuruntime::cpu {
namespace {

// Strides (in elements) per label of one row-major operand.
std::vector<int64_t> label_strides(const std::vector<int> &labels,
                                   const Shape &shape, std::size_t nlabels) {
  std::vector<int64_t> st(nlabels, 0);
  int64_t s = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1)
      st[static_cast<std::size_t>(labels[d])] += s;
    s *= shape[d];
  }
  return st;
}

template <typename T>
void einsum(const ops::EinsumLayout &lay, const std::vector<TensorView> &in,
            TensorView &y) {
  using N = Num<T>;
  const std::size_t nl = lay.extent.size(), ops_n = in.size();
  std::vector<bool> kept(nl, false);
  for (int l : lay.output)
    kept[static_cast<std::size_t>(l)] = true;
  // The summed labels: those some operand has and the output does not.
  std::vector<int> summed;
  for (std::size_t l = 0; l < nl; ++l)
    if (lay.extent[l] >= 0 && !kept[l])
      summed.push_back(static_cast<int>(l));
  std::vector<std::vector<int64_t>> st; // [operand][label]
  for (std::size_t i = 0; i < ops_n; ++i)
    st.push_back(label_strides(lay.inputs[i], in[i].shape, nl));
  int64_t inner = 1;
  for (int l : summed)
    inner *= lay.extent[static_cast<std::size_t>(l)];
  std::vector<const T *> base;
  for (const TensorView &v : in)
    base.push_back(v.ptr<const T>());
  T *yp = y.ptr<T>();
  const int64_t count = y.numel();
  parallel_for(count, count * (inner + 1) * static_cast<int64_t>(ops_n),
               [&](int64_t b, int64_t e) {
                 std::vector<int64_t> off(ops_n), cur(ops_n),
                     idx(summed.size());
                 for (int64_t o = b; o < e; ++o) {
                   // The operands' offsets of output element o (row-major over
                   // the output labels).
                   std::fill(off.begin(), off.end(), 0);
                   int64_t rest = o;
                   for (std::size_t d = lay.output.size(); d-- > 0;) {
                     const auto l = static_cast<std::size_t>(lay.output[d]);
                     const int64_t i = rest % lay.extent[l];
                     rest /= lay.extent[l];
                     for (std::size_t k = 0; k < ops_n; ++k)
                       off[k] += i * st[k][l];
                   }
                   double acc = 0;
                   std::fill(idx.begin(), idx.end(), 0);
                   cur = off;
                   for (int64_t it = 0; it < inner; ++it) {
                     double p = 1;
                     for (std::size_t k = 0; k < ops_n; ++k)
                       p *= static_cast<double>(N::load(base[k][cur[k]]));
                     acc += p;
                     // Odometer over the summed labels, last fastest, moving
                     // the offsets along.
                     for (std::size_t d = summed.size(); d-- > 0;) {
                       const auto l = static_cast<std::size_t>(summed[d]);
                       if (++idx[d] < lay.extent[l]) {
                         for (std::size_t k = 0; k < ops_n; ++k)
                           cur[k] += st[k][l];
                         break;
                       }
                       for (std::size_t k = 0; k < ops_n; ++k)
                         cur[k] -= (lay.extent[l] - 1) * st[k][l];
                       idx[d] = 0;
                     }
                   }
                   yp[o] = N::store(static_cast<typename N::C>(acc));
                 }
               });
}

} // namespace

void register_einsum_ops(std::vector<OpDef> &defs) {
  OpDef d;
  d.op_type = "Einsum";
  d.kernel = "cpu";
  set_parsed_body<ops::EinsumAttrs>(
      d, [](const ops::EinsumAttrs &a, const Node &n,
            const std::vector<TensorView> &in, std::vector<TensorView> &out) {
        if (out[0].numel() == 0)
          return;
        std::vector<Shape> shapes;
        for (const TensorView &v : in)
          shapes.push_back(v.shape);
        const ops::EinsumLayout lay = ops::einsum_layout(n, a, shapes);
        visit_dtype(in[0].dtype, [&](auto tag) {
          using T = decltype(tag);
          if constexpr (kIsFloat<T>)
            einsum<T>(lay, in, out[0]);
        });
      });
  defs.push_back(std::move(d));
}

} // namespace xpuruntime::cpu
