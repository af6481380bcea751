// The registry side of the CUDA op kernels: one Kernel class built from two
// functions (supports, prepare), a PreparedKernel from one run function, and the
// checks every family shares. The launchers they call live in the families'
// *_impl.h (plain arguments, no CUDA headers).
//
// How to add an op: write its launcher in a family folder (kernel in a .cu,
// declaration in the family's *_impl.h), then in the family's *_kernels.cpp add a
// supports function (reason codes from kernel_registry.h) and a prepare function
// that reads the node's attributes and builds index plans once, and register both
// with make_cuda_kernel(). Thread safety: kernels and prepared kernels are
// immutable after construction; run() may be called from many threads at once.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {

// The name every kernel of this folder registers under (op key, "cuda").
inline constexpr const char* kKernelName = "cuda";
inline constexpr const char* kProvider = "cuda_raw";

using SupportsFn = std::function<Support(const OpContext&)>;
using PrepareFn = std::function<PreparedKernelPtr(const PrepareContext&)>;
using RunFn = std::function<void(const KernelArgs&)>;

class CudaOpKernel final : public Kernel {
 public:
  CudaOpKernel(KernelDef def, SupportsFn supports, PrepareFn prepare)
      : Kernel(std::move(def)), supports_(std::move(supports)), prepare_(std::move(prepare)) {}
  Support supports(const OpContext& ctx) const override;
  PreparedKernelPtr prepare(const PrepareContext& pc) const override;
  // The unprepared path (Python dispatch API, tests): builds a node from the
  // context's text attributes, prepares and runs once on launch.stream. Inputs and
  // outputs must be dense CUDA tensors.
  void run(KernelLaunch& launch) const override;

 private:
  SupportsFn supports_;
  PrepareFn prepare_;
};

// A prepared kernel from its run function (captures the parsed attributes and
// index plans by value).
PreparedKernelPtr make_prepared(RunFn run, std::size_t workspace_bytes = 0);

// Registers (op, "cuda") in registry. dtypes: those the KernelDef advertises for
// every input (empty when inputs differ in dtype; supports() then checks).
void add_kernel(KernelRegistry& registry, const std::string& op, std::vector<DType> dtypes,
                const std::string& description, SupportsFn supports, PrepareFn prepare);

// ---- shared checks (each returns Support::yes() or a refusal with a reason code) ----

// Every input and output is dense (layout "contiguous").
Support require_dense(const OpContext& ctx);
// Input i, when present, has one of dtypes.
Support require_dtype(const OpContext& ctx, std::size_t i, const std::vector<DType>& dtypes,
                      const char* role);
// At least n inputs and one output.
Support require_arity(const OpContext& ctx, std::size_t inputs, std::size_t outputs = 1);
// The first refusal among checks, or yes.
Support first_refusal(std::initializer_list<Support> checks);

// ---- prepare helpers ----

// Input i of the node as a constant (host) tensor, when the plan knows its value.
const graph::HostTensor* constant_input(const PrepareContext& pc, std::size_t i);
// The dispatcher op key of an ONNX op type handled here: its lower-case spelling
// (none of this folder's ops has a canonical alias other than "softmax").
std::string op_key_of(const std::string& op_type);
// The node's name and op for messages: "node 'x' (Softmax) on cuda".
std::string where(const PrepareContext& pc);
// The integer values of a small input a kernel needs on the host (axes, pads, k,
// Slice starts): read once from the plan constant when there is one, else copied
// from the device at run time by a synchronizing copy on the run's stream. That
// copy is refused with UnsupportedOperationError while the stream is being
// captured into a CUDA graph (the message says to make the input a constant).
// Immutable; get() is thread-safe.
class IntsInput {
 public:
  IntsInput() = default;
  IntsInput(const PrepareContext& pc, std::size_t index, const char* role);
  bool present() const { return present_; }
  bool constant() const { return constant_.has_value(); }
  // The values (empty when the input is absent). Integer or bool dtypes.
  std::vector<int64_t> get(const KernelArgs& args) const;

 private:
  std::size_t index_ = 0;
  bool present_ = false;
  std::optional<std::vector<int64_t>> constant_;
  std::string what_, role_;
};

// Whether input i is present in the context (an omitted optional input has no spec
// or an explicitly empty one).
bool has_input(const PrepareContext& pc, std::size_t i);

// The bytes of v stored as one element of dtype t (little-endian, in the low bytes):
// fill values of byte-generic kernels. Integers saturate, NaN -> 0, as Cast.
uint64_t encode_scalar(DType t, double v);

extern const std::vector<DType> kFloatTypes;    // fp32, fp16, bf16, fp64
extern const std::vector<DType> kSignedTypes;   // floats + int8..int64
extern const std::vector<DType> kNumericTypes;  // signed + uint8
extern const std::vector<DType> kAllTypes;      // numeric + bool
extern const std::vector<DType> kIndexTypes;    // int32, int64

}  // namespace xpuruntime::cuda_ops
