// The op keys and kernel names a policy may use (DESIGN.md §3). These are data the
// whole project shares: a policy written on a GPU machine must validate on a CPU-only
// machine where the CUDA plugin (and so its kernels) is not loaded, so the names the
// project ships are declared here rather than discovered from registrations alone.
#include "core/policy/known_names.h"

namespace xpuruntime::known_names {

const std::vector<std::string>& canonical_ops() {
  static const std::vector<std::string> ops = {"attention", "conv", "layernorm", "matmul",
                                               "softmax"};
  return ops;
}

// Lower-case ONNX op types of the default domain (onnx 1.23.2, every
// opset), minus the ones folded into a canonical key (gemm, layernormalization).
const std::vector<std::string>& onnx_ops() {
  static const std::vector<std::string> ops = {
    "abs", "acos", "acosh", "add", "affinegrid", "and", "argmax", "argmin", "asin", "asinh",
    "atan", "atanh", "attention", "averagepool", "batchnormalization", "bernoulli",
    "bitcast", "bitshift", "bitwiseand", "bitwisenot", "bitwiseor", "bitwisexor",
    "blackmanwindow", "cast", "castlike", "causalconvwithstate", "ceil", "celu",
    "centercroppad", "clip", "col2im", "compress", "concat", "concatfromsequence",
    "constant", "constantofshape", "conv", "convinteger", "convtranspose", "cos", "cosh",
    "cumprod", "cumsum", "deformconv", "depthtospace", "dequantizelinear", "det", "dft",
    "div", "dropout", "dynamicquantizelinear", "einsum", "elu", "equal", "erf", "exp",
    "expand", "eyelike", "flatten", "floor", "gather", "gatherelements", "gathernd", "gelu",
    "globalaveragepool", "globallppool", "globalmaxpool", "greater", "greaterorequal",
    "gridsample", "groupnormalization", "gru", "hammingwindow", "hannwindow", "hardmax",
    "hardsigmoid", "hardswish", "identity", "if", "imagedecoder", "instancenormalization",
    "isinf", "isnan", "leakyrelu", "less", "lessorequal", "linearattention", "log",
    "logsoftmax", "loop", "lpnormalization", "lppool", "lrn", "lstm", "matmul",
    "matmulinteger", "max", "maxpool", "maxroipool", "maxunpool", "mean",
    "meanvariancenormalization", "melweightmatrix", "min", "mish", "mod", "mul",
    "multinomial", "neg", "negativeloglikelihoodloss", "nonmaxsuppression", "nonzero",
    "not", "onehot", "optional", "optionalgetelement", "optionalhaselement", "or", "pad",
    "pow", "prelu", "qlinearconv", "qlinearmatmul", "quantizelinear", "randomnormal",
    "randomnormallike", "randomuniform", "randomuniformlike", "range", "reciprocal",
    "reducel1", "reducel2", "reducelogsum", "reducelogsumexp", "reducemax", "reducemean",
    "reducemin", "reduceprod", "reducesum", "reducesumsquare", "regexfullmatch", "relu",
    "reshape", "resize", "reversesequence", "rmsnormalization", "rnn", "roialign",
    "rotaryembedding", "round", "scan", "scatter", "scatterelements", "scatternd", "selu",
    "sequenceat", "sequenceconstruct", "sequenceempty", "sequenceerase", "sequenceinsert",
    "sequencelength", "sequencemap", "shape", "shrink", "sigmoid", "sign", "sin", "sinh",
    "size", "slice", "softmax", "softmaxcrossentropyloss", "softplus", "softsign",
    "spacetodepth", "split", "splittosequence", "sqrt", "squeeze", "stft", "stringconcat",
    "stringnormalizer", "stringsplit", "sub", "sum", "swiglu", "swish", "tan", "tanh",
    "tensorscatter", "tfidfvectorizer", "thresholdedrelu", "tile", "topk", "transpose",
    "trilu", "unique", "unsqueeze", "upsample", "where", "xor",
  };
  return ops;
}

const std::map<std::string, std::string>& op_aliases() {
  static const std::map<std::string, std::string> aliases = {
      {"gemm", "matmul"},          {"mm", "matmul"},
      {"bmm", "matmul"},           {"linear", "matmul"},
      {"addmm", "matmul"},         {"layernormalization", "layernorm"},
      {"layer_norm", "layernorm"}, {"sdpa", "attention"},
      {"scaled_dot_product_attention", "attention"}, {"convolution", "conv"},
  };
  return aliases;
}

const std::map<std::string, std::vector<std::string>>& declared_kernels() {
  // matmul: CPU oneDNN / BLAS / blocked, cuBLAS, cuBLASLt, our skinny split-K (M <= 16),
  // PyTorch routing ("torch").
  // attention: our FlashAttention-2, cuDNN, torch SDPA backends and torch's own choice.
  // layernorm: our fused kernel, PyTorch routing. conv: CPU im2col/direct, oneDNN, cuDNN.
  static const std::map<std::string, std::vector<std::string>> names = {
      {"matmul", {"onednn", "cpu_blas", "cpu_blocked", "cublas", "cublasLt", "skinny", "torch"}},
      {"attention", {"flash_v2", "cudnn", "torch_flash", "efficient", "math", "torch"}},
      {"layernorm", {"fused", "torch"}},
      {"conv", {"cpu_im2col", "cpu_direct", "onednn", "cudnn"}},
  };
  return names;
}

}  // namespace xpuruntime::known_names
