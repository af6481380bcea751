// Kernels and the KernelRegistry (DESIGN.md §2, §4). A kernel is one implementation
// of one op on one device kind. Its metadata is data (KernelDef) so the dispatcher
// and explain() can reason about it; supports() says *why not* with a stable reason
// code; run() does the work on the launch's stream.
//
// How to add a kernel: derive from Kernel (or wrap two lambdas in FunctionKernel),
// fill a KernelDef, and register it from your backend's explicit registration
// function, e.g. `void register_cpu_matmul_kernels(KernelRegistry&)`, which the
// core (CPU) or the plugin entry point (CUDA) calls once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"
#include "xpuruntime/dtype.h"
#include "xpuruntime/ir.h"
#include "xpuruntime/tensor.h"

namespace xpuruntime {

struct ExecutionPolicy;

// Stable reason codes for rejected candidates (they appear in logs, goldens and
// user scripts: never rename one).
namespace reason {
inline constexpr const char* kDtypeUnsupported = "dtype_unsupported";
inline constexpr const char* kShapeUnsupported = "shape_unsupported";
inline constexpr const char* kLayoutUnsupported = "layout_unsupported";
inline constexpr const char* kCapabilityTooLow = "capability_too_low";
inline constexpr const char* kCapabilityTooHigh = "capability_too_high";
inline constexpr const char* kWorkspaceExceeded = "workspace_exceeded";
inline constexpr const char* kBackendUnavailable = "backend_unavailable";
inline constexpr const char* kDeviceMismatch = "device_mismatch";
inline constexpr const char* kNotInPolicy = "not_in_policy";
inline constexpr const char* kNondeterministic = "nondeterministic";
inline constexpr const char* kAttributeUnsupported = "attribute_unsupported";
inline constexpr const char* kPythonSupportsFalse = "python_supports_false";
inline constexpr const char* kPythonSupportsError = "python_supports_error";
inline constexpr const char* kPinMismatch = "pin_mismatch";
inline constexpr const char* kSupportsError = "supports_error";  // supports() threw
inline constexpr const char* kRunFailed = "run_failed";          // failed while being tuned
// Engine capability (the orchestrator, graph::node_support): the op has no schema in
// the engine (or comes from a domain it does not implement), or no kernel on the device.
inline constexpr const char* kOpUnsupported = "op_unsupported";
inline constexpr const char* kNoKernel = "no_kernel";
}  // namespace reason

// dtype, shape and strides (in elements; empty = contiguous) of one operand.
struct TensorSpec {
  DType dtype = DType::kFloat32;
  Shape shape;
  Shape strides;

  static TensorSpec of(const Tensor& t) { return {t.dtype(), t.shape(), t.strides()}; }
  // "contiguous" | "transposed" (last two dims swapped, else dense) | "strided"
  std::string layout() const;
  int64_t numel() const;
};

// Everything a kernel and the dispatcher need to decide about one op call. Built by
// the caller (engine, executor, PyTorch routing); cheap to copy.
struct OpContext {
  std::string op;    // canonical op key: matmul, conv, attention, layernorm, softmax, ...
  std::string node;  // graph node / call site name, for the decision log
  Device device;
  int capability = 0;  // the backend's attribute "capability" (CUDA: sm major*10+minor); 0 on CPU
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::map<std::string, std::string> attrs;  // op attributes as text ("1", "0.5", "gelu")
  // From the ExecutionPolicy (apply()):
  std::size_t workspace_limit_bytes = 0;  // 0 = no limit
  bool allow_tf32 = false;
  bool deterministic = false;
  bool strict_no_fallback = false;
  bool strict_pinned_only = false;

  // Fills op/device/capability/specs from tensors (capability from DeviceManager).
  static OpContext from_tensors(std::string op, const std::vector<Tensor>& inputs,
                                const std::vector<Tensor>& outputs, std::string node = "");
  // Copies workspace limit, tf32, determinism and strict assertions from a policy.
  OpContext& apply(const ExecutionPolicy& policy);

  // The identity of a case for tuning caches and pins; portable across machines of
  // the same device kind and capability (no device index, no node name), e.g.
  // "matmul|cuda:sm90|float16[16,4096],float16[4096,4096]->float16[16,4096]|trans_b=1".
  std::string case_key() const;
  // "cuda:sm90" / "cpu".
  std::string device_class() const;

  bool has_attr(const std::string& name) const { return attrs.count(name) != 0; }
  // Typed attribute access; throws InvalidArgumentError naming op, node and attribute
  // when the text does not parse.
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  double attr_float(const std::string& name, double fallback) const;
  std::string attr_str(const std::string& name, const std::string& fallback) const;
};

// What a kernel runs with. The dispatcher fills ctx, algorithm and workspace.
struct KernelLaunch {
  const OpContext* ctx = nullptr;  // attributes and specs of this call (not owned)
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;  // preallocated by the caller (kernels write into them)
  NativeStream stream = nullptr;
  std::string algorithm;  // from a pin or tuning; "" = the kernel's default
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

struct Support {
  bool ok = true;
  std::string reason_code;  // one of reason::* when !ok
  std::string detail;       // human readable: what exactly is not supported

  static Support yes() { return {}; }
  static Support no(std::string code, std::string detail) {
    return {false, std::move(code), std::move(detail)};
  }
};

// Kernel metadata as data.
struct KernelDef {
  std::string op;
  std::string name;      // unique within op: "cublasLt", "flash_v2", "cpu_blas", ...
  std::string provider;  // "cpu", "cublas", "cublasLt", "cuda_raw", "python", ...
  DeviceKind device = DeviceKind::cpu();
  // Further device kinds it runs on: a Python kernel over torch tensors (torch's own
  // matmul, the math SDPA backend) runs wherever torch does. Usually empty.
  std::vector<DeviceKind> more_devices;
  std::vector<DType> dtypes;         // accepted input dtypes; empty = any
  std::vector<std::string> layouts;  // accepted input layouts (TensorSpec::layout); empty = any
  int min_capability = 0;            // devices with a capability only; 0 = no minimum
  int max_capability = 0;            // devices with a capability only; 0 = no maximum
  std::size_t workspace_bytes = 0;   // default need; Kernel::workspace_bytes(ctx) refines it
  int priority = 0;                  // higher first among auto candidates
  bool deterministic = true;         // bitwise reproducible run to run (no atomics races)
  bool allocates_outputs = false;    // run() fills empty launch.outputs itself (Python kernels)
  // A candidate only where the caller asks for it by name (SelectOptions::runnable):
  // torch-side kernels that run the tensors of a routed torch call, which the native
  // engine's selections must not list.
  bool requested_only = false;
  std::string description;

  bool runs_on(DeviceKind t) const {
    return t == device || std::find(more_devices.begin(), more_devices.end(), t) != more_devices.end();
  }
};

// One dense, contiguous operand of a prepared kernel, in the kernel's device memory.
// data == nullptr marks an omitted optional operand.
struct TensorArg {
  DType dtype = DType::kFloat32;
  Shape shape;
  void* data = nullptr;

  bool present() const { return data != nullptr; }
  int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// What a prepared kernel runs with: device pointers, a stream of its device (nullptr
// on the CPU) and a workspace of at least PreparedKernel::workspace_bytes().
struct KernelArgs {
  std::vector<TensorArg> inputs;
  std::vector<TensorArg> outputs;  // allocated by the caller with the inferred shapes
  NativeStream stream = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

class PreparedKernel;
using PreparedKernelPtr = std::shared_ptr<const PreparedKernel>;

// Everything Kernel::prepare may read, once per plan step (ONNX Runtime's
// OpKernelInfo): the case, the node's typed attributes, the values of inputs that are
// constants, the algorithm a pin or tuning chose, and a way to choose sub-kernels.
struct PrepareContext {
  const OpContext* ctx = nullptr;   // specs, device, attributes as text (not owned)
  const graph::Node* node = nullptr;  // op type and typed attributes (not owned)
  // Per input: its value when it is a plan constant (host memory), else undefined.
  std::vector<graph::HostTensor> constants;
  std::string algorithm;  // "" = the kernel's default
  // Chooses and prepares a sub-kernel (a conv's GEMM, say) through the Dispatcher under
  // the plan's policies; the Decision is recorded with the plan's. Never null inside a
  // plan compile; callers outside one may leave it empty (prepare then throws).
  std::function<PreparedKernelPtr(OpContext& sub_ctx, const graph::Node& sub_node)> prepare_sub;
  // The node's own inputs and outputs (dtype and shape, one per node slot) where the
  // plan knows them before running (an omitted input or a run-time shape: nullopt),
  // for kernels whose context is another view of the node (a MatMul's is its GEMM)
  // and that size their workspace from the node's shapes. Empty outside a plan.
  std::vector<std::optional<TensorSpec>> node_inputs, node_outputs;
};

// A kernel bound to one plan step: attributes parsed, constants packed, workspace
// sized. Immutable and thread-safe: many runs may call run() at once.
class PreparedKernel {
 public:
  virtual ~PreparedKernel() = default;
  virtual void run(const KernelArgs& args) const = 0;
  virtual std::size_t workspace_bytes() const { return 0; }
  // The algorithm prepare() chose by itself (a library heuristic's pick when none was
  // named), in the kernel's algorithm names; "" when it has none. The compiler records
  // it in the plan step, so a loaded plan names it and skips the heuristic.
  virtual std::string chosen_algorithm() const { return {}; }
  // True when run() never reads input `input`'s bytes because prepare() packed its
  // own device copy of that constant (a channels-last conv's KRSC weights, a padded
  // GEMM operand). A plan constant that only such steps read is not uploaded, so the
  // device holds one copy of those weights, not two; the run then passes that
  // input with a null data pointer.
  virtual bool packs_constant(std::size_t /*input*/) const { return false; }
};

class Kernel : public std::enable_shared_from_this<Kernel> {
 public:
  explicit Kernel(KernelDef def) : def_(std::move(def)) {}
  virtual ~Kernel() = default;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  const KernelDef& def() const { return def_; }
  // Case-specific checks beyond the metadata (which the registry checks first).
  // Must be cheap, pure and thread-safe.
  virtual Support supports(const OpContext& ctx) const = 0;
  // Runs on launch.stream. Thread-safe: may be called concurrently.
  virtual void run(KernelLaunch& launch) const = 0;
  // Optional: tunable algorithm ids for this case (cuBLASLt heuristics); empty = none.
  virtual std::vector<std::string> algorithms(const OpContext& /*ctx*/) const { return {}; }
  // Workspace this case needs (bytes).
  virtual std::size_t workspace_bytes(const OpContext& /*ctx*/) const { return def_.workspace_bytes; }
  // Binds the kernel to one plan step. The default adapts run(KernelLaunch): each run
  // wraps the arguments as Tensors on ctx.device and calls run() with the context's
  // attributes. Kernels that parse attributes or pack constants override it.
  virtual PreparedKernelPtr prepare(const PrepareContext& pc) const;

 private:
  KernelDef def_;
};

// A kernel from functions (tests, small kernels, Python kernels).
class FunctionKernel final : public Kernel {
 public:
  using SupportsFn = std::function<Support(const OpContext&)>;
  using RunFn = std::function<void(KernelLaunch&)>;
  using AlgorithmsFn = std::function<std::vector<std::string>(const OpContext&)>;
  FunctionKernel(KernelDef def, RunFn run, SupportsFn supports = {}, AlgorithmsFn algorithms = {})
      : Kernel(std::move(def)),
        run_(std::move(run)),
        supports_(std::move(supports)),
        algorithms_(std::move(algorithms)) {}
  Support supports(const OpContext& ctx) const override {
    return supports_ ? supports_(ctx) : Support::yes();
  }
  void run(KernelLaunch& launch) const override { run_(launch); }
  std::vector<std::string> algorithms(const OpContext& ctx) const override {
    return algorithms_ ? algorithms_(ctx) : std::vector<std::string>{};
  }

 private:
  RunFn run_;
  SupportsFn supports_;
  AlgorithmsFn algorithms_;
};

using KernelPtr = std::shared_ptr<const Kernel>;

// op -> kernels. All methods are thread-safe; kernels are shared_ptr so a caller can
// keep running one that is unregistered meanwhile.
class KernelRegistry {
 public:
  // The process-wide registry (the core's CPU kernels and loaded plugins register here).
  static KernelRegistry& instance();
  // An empty registry that knows the project's declared names (tests, golden files).
  KernelRegistry();

  // Throws InvalidArgumentError on an empty op/name, or when (op, name) exists and replace is
  // false (except a native and a requested_only kernel on disjoint devices: split by device).
  void register_kernel(KernelPtr kernel, bool replace = false);
  bool unregister_kernel(const std::string& op, const std::string& name);
  KernelPtr find(const std::string& op, const std::string& name) const;
  // Kernels of op ordered by priority (high first), then name.
  std::vector<KernelPtr> kernels(const std::string& op) const;
  // Definitions, optionally filtered, ordered by op, then priority, then name.
  std::vector<KernelDef> list(const std::optional<std::string>& op = std::nullopt,
                              const std::optional<DeviceKind>& device = std::nullopt) const;
  // Metadata checks (device kind, dtypes, layouts, capability, workspace), then the
  // kernel's own supports(). Never throws for an unsupported case.
  static Support check(const Kernel& kernel, const OpContext& ctx);

  // Names that other subsystems route to without a C++ kernel here (PyTorch routing
  // targets like "torch", "torch_flash"; CUDA kernels of a plugin not loaded) so that
  // a policy written on one machine validates on another.
  void register_known_kernel_name(const std::string& op, const std::string& name);
  // Declared plus registered names for op, sorted, "auto" first.
  std::vector<std::string> known_kernel_names(const std::string& op) const;
  bool is_known_kernel_name(const std::string& op, const std::string& name) const;
  // Canonical op keys, lower-case ONNX op types, and ops with registered kernels.
  std::vector<std::string> known_ops() const;
  bool is_known_op(const std::string& op) const;
  // The canonical key for an alias ("gemm" -> "matmul"), or "" when op is no alias.
  static std::string canonical_op_for_alias(const std::string& op);
  void register_known_op(const std::string& op);

  // Bumped on every change; the dispatcher drops tuning results made before it.
  uint64_t generation() const;

 private:
  mutable std::shared_mutex mu_;
  std::map<std::string, std::map<std::string, KernelPtr>> kernels_;
  std::map<std::string, std::vector<std::string>> declared_names_;
  std::vector<std::string> extra_ops_;
  uint64_t generation_ = 0;
};

// Free-function spelling used by subsystems that only declare names.
inline void register_known_kernel_name(const std::string& op, const std::string& name) {
  KernelRegistry::instance().register_known_kernel_name(op, name);
}

}  // namespace xpuruntime
