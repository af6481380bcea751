// 1x1 convolutions of a single pixel as GEMMs (passes.h): squeeze-excitation layers.
//
// Why: an SE block pools an image to [N, C, 1, 1] (channels-last [N, 1, 1, C]) and runs
// two 1x1 convolutions on it: a [N, C] x [C, C'] matrix product. cuDNN's heuristic ran
// some of these on its generic implicit_convolve_sgemm kernel (EfficientNet-B0, batch 32,
// H200: 12 launches of it per inference, 27 us on average, before this pass; 6 after,
// which layers those are was not profiled; a GEMM of an SE's size takes 3-5 us), and 16
// to 32 of them run per inference of EfficientNet, MobileNetV3, RegNetY or GhostNet. So
// the convolution becomes Reshape [N, C] -> MatMul (W transposed to [C, C'] once, here;
// the bias as its bias epilogue) -> Reshape back, the same bytes in and out. The
// activation stays with the MatMul where its kernel applies it (cuBLASLt: Relu);
// otherwise it, and the layout pass's SiLU, run as one fused elementwise step after it.
// The compiler runs this pass where the provider says it pays
// (FusionSupport::single_pixel_conv_gemms: CUDA; on the CPU oneDNN's 1x1 convolution of
// a pixel was as fast as the GEMM, measured 2026-11-29).
#include <algorithm>

#include "graph/fusion_patterns.h"
#include "graph/passes.h"
#include "xpuruntime/ops/elementwise_program.h"
#include "xpuruntime/ops/epilogue.h"

namespace xpuruntime::graph::passes {
namespace {

bool all_ones(const Shape& s, std::size_t from, std::size_t to) {
  for (std::size_t d = from; d < to; ++d)
    if (s[d] != 1) return false;
  return true;
}

// The conversion of one convolution, or false when it is not a single-pixel 1x1 one a
// GEMM kernel (and, for its activation, the fused elementwise kernel) of the provider
// runs. New nodes go to `out` in order.
bool as_gemm(Graph& g, const Node& n, const ExecutionProvider& provider, std::vector<Node>& out) {
  const bool nhwc = n.op_type == "NhwcConv" && n.domain == "xrt";
  if (!nhwc && !(n.op_type == "Conv" && n.domain.empty())) return false;
  if (n.inputs.size() < 2 || n.inputs.size() > 3 || n.outputs.size() != 1 || n.inputs[0] < 0)
    return false;
  const Value& xv = g.values[n.inputs[0]];
  const Value& wv = g.values[n.inputs[1]];
  const Value& yv = g.values[n.outputs[0]];
  if (!xv.shape || !yv.shape || !wv.constant.defined() || xv.shape->size() != 4 ||
      yv.shape->size() != 4 || wv.constant.shape.size() != 4)
    return false;
  const Shape& xs = *xv.shape;
  const Shape& ws = wv.constant.shape;
  const int64_t batch = xs[0], cin = nhwc ? xs[3] : xs[1], cout = ws[0];
  if (batch <= 0 || ws[1] != cin || ws[2] != 1 || ws[3] != 1 || n.attr_int("group", 1) != 1 ||
      !all_ones(xs, nhwc ? 1 : 2, nhwc ? 3 : 4))
    return false;
  for (int64_t p : n.attr_ints("pads", {}))
    if (p != 0) return false;
  if (n.attr_str("auto_pad", "NOTSET") != "NOTSET" && n.attr_str("auto_pad", "") != "VALID")
    return false;
  const Shape ys = nhwc ? Shape{batch, 1, 1, cout} : Shape{batch, cout, 1, 1};
  if (*yv.shape != ys) return false;
  const ops::Epilogue e = ops::Epilogue::from_node(n);
  if (e.residual) return false;
  const DType t = xv.dtype;
  if (wv.constant.dtype != t) return false;
  const int bias = n.inputs.size() > 2 ? n.inputs[2] : -1;
  if (bias >= 0 && (!g.values[bias].constant.defined() || g.values[bias].constant.numel() != cout))
    return false;

  // The MatMul applies the bias, and the activation where its kernel does.
  ops::Epilogue gemm_e = e;
  gemm_e.bias = bias >= 0;
  const bool act_in_gemm = e.has_activation() && provider.takes_epilogue("MatMul", gemm_e, t);
  if (!act_in_gemm) {
    gemm_e = ops::Epilogue{};
    gemm_e.bias = bias >= 0;
  }
  // The plan's MatMul kernels run any float MatMul; what they fuse the provider says
  // (as for the epilogue fusion).
  if (!gemm_e.empty() && !provider.takes_epilogue("MatMul", gemm_e, t)) return false;
  const bool swish = n.attr_int("_swish", 0) != 0;
  ops::ElementwiseProgram tail;  // what the Gemm does not apply
  if (e.has_activation() && !act_in_gemm) {
    ops::ElementwiseInstr a;
    a.kind = ops::ElementwiseInstr::Kind::kUnary;
    a.unary = e.activation;
    a.params = e.params;
    tail.instrs.push_back(a);
    tail.ops = e.activation_op;
  }
  if (swish) {  // v * sigmoid(v), v the chain's input
    ops::ElementwiseInstr s;
    s.kind = ops::ElementwiseInstr::Kind::kUnary;
    s.unary = ops::Unary::kSigmoid;
    ops::ElementwiseInstr m;
    m.kind = ops::ElementwiseInstr::Kind::kBinary;
    m.binary = ops::FusedBin::kMul;
    m.operand = 0;
    tail.instrs.push_back(s);
    tail.instrs.push_back(m);
    tail.ops += std::string(tail.ops.empty() ? "" : ",") + "Sigmoid,Mul";
  }

  const std::string base = n.name.empty() ? "conv" : n.name;
  Node gemm;
  gemm.name = patterns::unique_node_name(g, base + "_gemm");
  gemm.op_type = "MatMul";
  gemm_e.to_attrs(gemm.attrs);
  Node fused;
  if (!tail.instrs.empty()) {
    fused.name = patterns::unique_node_name(g, base + "_act");
    fused.op_type = "FusedElementwise";
    fused.domain = "xrt";
    tail.to_attrs(fused.attrs);
  }
  // Ask the fused kernel before touching the graph.
  const TensorSpec y_spec{t, {batch, cout}, {}};
  if (!tail.instrs.empty()) {
    patterns::Candidate fc;
    fc.node = fused;
    fc.inputs = {y_spec};
    fc.outputs = {y_spec};
    if (!patterns::any_kernel_supports(fc, provider)) return false;
  }

  // W [cout, cin, 1, 1] -> [cin, cout].
  HostTensor w2 = HostTensor::alloc(wv.constant.dtype, {cin, cout});
  const std::size_t es = dtype_size(w2.dtype);
  const auto* src = static_cast<const unsigned char*>(wv.constant.data);
  auto* dst = static_cast<unsigned char*>(w2.data);
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t i = 0; i < cin; ++i)
      std::copy_n(src + (o * cin + i) * es, es, dst + (i * cout + o) * es);
  const int wid = g.value_id(fresh_name(g, wv.name + "_matrix"));
  g.values[wid].constant = w2;
  g.values[wid].dtype = t;
  g.values[wid].dtype_known = true;
  g.values[wid].shape = w2.shape;
  const int rows = patterns::new_value(g, base + "_rows", t, {batch, cin});
  const int prod = patterns::new_value(g, base + "_gemm_out", t, {batch, cout});
  Node flat;
  flat.name = patterns::unique_node_name(g, base + "_rows");
  flat.op_type = "Reshape";
  flat.inputs = {n.inputs[0], patterns::int64_constant(g, base + "_rows_shape", {batch, cin})};
  flat.outputs = {rows};
  gemm.inputs = {rows, wid};
  if (bias >= 0) gemm.inputs.push_back(bias);
  gemm.outputs = {prod};
  out.push_back(std::move(flat));
  out.push_back(std::move(gemm));
  int last = prod;
  if (!tail.instrs.empty()) {
    const int acted = patterns::new_value(g, base + "_act_out", t, {batch, cout});
    fused.inputs = {prod};
    fused.outputs = {acted};
    out.push_back(std::move(fused));
    last = acted;
  }
  Node back;
  back.name = patterns::unique_node_name(g, base + "_pixel");
  back.op_type = "Reshape";
  back.inputs = {last, patterns::int64_constant(g, base + "_pixel_shape", ys)};
  back.outputs = {n.outputs[0]};
  out.push_back(std::move(back));
  return true;
}

// A policy that names a convolution kernel keeps every convolution on the kernels it
// named. Tuning pins do not stop the conversion: the pins a session records (a lock
// file's) are on the cases it made, the converted MatMuls' among them, so a replay
// under them converts the same convolutions.
bool policy_names_conv_kernels(const KernelPolicy& kp) {
  for (const char* op : {"conv", "conv_nhwc"}) {
    const std::vector<std::string> names = kp.get(op);
    if (!names.empty() && names[0] != std::string(kAutoKernel)) return true;
  }
  return false;
}

}  // namespace

int single_pixel_convs_as_gemms(Graph& g, const ExecutionProvider& provider,
                                const KernelPolicy& kp) {
  if (policy_names_conv_kernels(kp)) return 0;
  int converted = 0;
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    std::vector<Node> repl;
    const Node n = g.nodes[i];  // a copy: as_gemm adds values to g
    if (as_gemm(g, n, provider, repl)) {
      for (Node& r : repl) nodes.push_back(std::move(r));
      ++converted;
    } else {
      nodes.push_back(n);
    }
  }
  if (converted > 0) {
    g.nodes = std::move(nodes);
    compact(g);  // producers follow the new node order
  }
  return converted;
}

}  // namespace xpuruntime::graph::passes
