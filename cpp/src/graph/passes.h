// Compiler passes over a Graph (compiler.cpp runs them in order). Each returns how
// many nodes it changed, for the plan's pass log. Dead nodes are marked with an
// empty op_type and removed by compact().
#pragma once

#include <string>
#include <vector>

#include "xpuruntime/ir.h"
#include "xpuruntime/provider.h"
#include "xpuruntime/policy.h"

namespace xpuruntime::graph::passes {

// Infers dtypes/shapes in topological order and folds nodes whose inputs are all
// constant (and Shape/Size of known shapes) into constants.
int infer_and_fold(Graph& g, bool fold);
// Conv/Gemm followed by BatchNormalization with constant parameters -> new weights.
int fold_batchnorm(Graph& g);
// MatMul (constant 2-D W) [-> Add bias] [-> Reshape/Flatten to [rows, C]] followed by a
// BatchNormalization over those C columns -> scaled W and a bias Add
// (fold_batchnorm_matmul.cpp); returns the BatchNormalizations folded.
int fold_batchnorm_into_matmul(Graph& g);
// MatMul+bias, Conv+residual Add, and {Conv, MatMul, Gemm}+activation epilogues,
// each only where provider->takes_epilogue() says the device's kernels apply it to the
// output's dtype (nullptr: float32 epilogues, the CPU's).
int fuse_epilogues(Graph& g, const ExecutionProvider* provider = nullptr);
// Chains of elementwise ops of one float dtype -> one FusedElementwise node, each
// only where a kernel of the provider runs the fused node (nullptr: float32 chains,
// unchecked).
int fuse_elementwise(Graph& g, const ExecutionProvider* provider = nullptr);
// The decomposed LayerNorm (ReduceMean, Sub, Pow/Mul, ReduceMean, Add eps, Sqrt,
// Div or Reciprocal+Mul, then an optional Mul gamma / Add beta) over the last axis
// -> one LayerNormalization (fusion_layernorm.cpp). Attention subgraphs
// (MatMul(Q, K^T), scale, mask / causal Where, Softmax(-1), MatMul(V)) -> one
// FusedAttention (fusion_attention.cpp). Each fires only where a kernel of the
// provider runs the fused node; every match appends a Decision (op "fusion") to
// `decisions`. Run them before the epilogue and elementwise fusions, which would
// otherwise take the patterns' elementwise pieces.
int fuse_layernorm_patterns(Graph& g, const ExecutionProvider& provider,
                            std::vector<std::string>& decisions);
int fuse_attention_patterns(Graph& g, const ExecutionProvider& provider,
                            std::vector<std::string>& decisions);
// The decomposed RMSNorm (ReduceMean of Pow(x, 2), Add eps, Sqrt, Div or Mul by the
// reciprocal, optional Mul(gamma)) -> one RMSNormalization (fusion_rmsnorm.cpp). After
// the LayerNorm patterns, whose variance half has the same shape.
int fuse_rmsnorm_patterns(Graph& g, const ExecutionProvider& provider,
                          std::vector<std::string>& decisions);
// The head Transposes (perm [0, 2, 1, 3]) feeding a FusedAttention's Q, K, V and reading
// its output, folded into it as "_bshd" strides where a kernel reads those
// (fusion_attention_layout.cpp). After the attention patterns.
int fold_attention_transposes(Graph& g, const ExecutionProvider& provider,
                              std::vector<std::string>& decisions);
// The rotary embedding x * cos + concat(-x[d/2:], x[:d/2]) * sin -> one RotaryHalf
// (fusion_rotary.cpp).
int fuse_rotary_patterns(Graph& g, const ExecutionProvider& provider,
                         std::vector<std::string>& decisions);
// The decomposed erf or tanh GELU (Div/Mul, Erf, Add, Mul, Mul; or Pow, Mul, Add, Mul,
// Tanh, Add, Mul, Mul) -> one Gelu node (fusion_gelu.cpp), so the epilogue fusion can
// fold it into the MatMul before it.
int fuse_gelu_patterns(Graph& g, const ExecutionProvider& provider,
                       std::vector<std::string>& decisions);
// Convolutional regions to channels-last activations (layout_channels_last.cpp):
// Conv -> NhwcConv where a kernel of the provider runs it and the policy leaves Conv
// to oneDNN, layout-agnostic neighbours follow, Transposes at the region borders.
// Appends one Decision (op "layout"); returns the nodes converted.
int to_channels_last(Graph& g, const ExecutionProvider& provider, const KernelPolicy& kp,
                     std::vector<std::string>& decisions);
// A float32 graph compiled for fp16/bf16 (`to`): float32 values inside the graph
// take the target type (constants converted, saturated to its range), Casts at the
// float32 graph inputs/outputs keep the model's interface (precision.cpp). With
// keep_io_types false the interface narrows too: float32 inputs and outputs take the
// target type, with no Cast at the plan's edges (ExecutionPolicy.keep_io_types).
int lower_precision(Graph& g, DType to, bool keep_io_types = true);
// Two-operand Einsums whose labels are batch, contracted or free dimensions (and
// whose shapes are known) -> Transpose/Reshape around one MatMul (einsum_lowering.cpp);
// returns the Einsums lowered.
int lower_einsum(Graph& g);
// MatMul(x, Transpose(W)) with W a 2-D constant (>= 1 MiB) that something else reads
// too (a tied embedding) -> Reshape, Gemm(transB=1) on W itself, Reshape: folding the
// Transpose would store W twice (shared_weight_gemm.cpp). Runs before constant
// folding; returns the MatMuls rewritten.
int gemm_reads_shared_weights(Graph& g);
// Pad by zeros, identity Transposes, same-shape Expand/Slice, same-dtype Cast and
// one-input Concat become Identity (a view). Shapes must be inferred. Returns the count.
int eliminate_noops(Graph& g);
// Transpose -> Reshape -> Transpose chains that move no element (PVT's tokens to an
// image and back around a convolution, once the channels-last pass added its own
// Transposes) become one Reshape of the chain's input. Returns the count.
int fold_transpose_reshape_transpose(Graph& g);
// Transposes that move only dims of size 1 (the elements keep their order), rewritten
// as Reshapes: views, no copy. Returns how many.
int unit_dim_transposes_as_views(Graph& g);
// 1x1 convolutions (Conv, NhwcConv) of a single pixel, squeeze-excitation layers,
// become Reshape -> MatMul -> Reshape where the provider's kernels run the MatMul (its
// activation fused where the GEMM kernel applies it, else a FusedElementwise after it;
// pointwise_conv_gemm.cpp); none where `kp` names convolution kernels. The compiler
// runs it where FusionSupport::single_pixel_conv_gemms says it pays. Returns the count.
int single_pixel_convs_as_gemms(Graph& g, const ExecutionProvider& provider,
                                const KernelPolicy& kp);
// Removes nodes whose outputs no graph output needs.
int eliminate_dead_code(Graph& g);
// Nodes computing what an earlier node computes (same op, attributes, inputs) are
// dropped, their readers rewired (cse.cpp); returns the nodes merged.
int eliminate_common_subexpressions(Graph& g);
// Drops dead nodes and recomputes producers.
void compact(Graph& g);
// consumers[v] = node indices reading value v (each node once per value).
std::vector<std::vector<int>> consumers(const Graph& g);
// Throws InvalidModelError for negative dims or a tensor above XRT_MAX_TENSOR_BYTES.
void check_tensor_size(const Node& n, const std::string& value, DType dtype, const Shape& shape);
// A fresh, unused value name with the given prefix.
std::string fresh_name(const Graph& g, const std::string& prefix);

}  // namespace xpuruntime::graph::passes
