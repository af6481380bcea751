// Execution providers (DESIGN.md §2, §5): what the native engine needs from one
// device kind. The compiler asks a provider which device its kernels are
// dispatched for and which fusions pay there; the executor asks it for a run's
// stream, arena and dynamic buffers, for the plan constants in device memory
// (uploaded once per executor), and for the copies at the plan's edges. Nothing
// under graph/ knows any device beyond this interface.
//
// How to add a device to the native engine: implement ExecutionProvider (and
// RunResources) in the device's plugin folder, register its kernels in the
// KernelRegistry under its DeviceKind, and add the provider to ProviderRegistry
// when the plugin loads. Plans compiled with CompileOptions.device =
// provider->name() then run on it; nothing under graph/ changes.
//
// Thread safety: providers are shared by all compiles and runs, so every method
// must be thread-safe; a RunResources belongs to one run on one thread.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"
#include "xpuruntime/ir.h"
#include "xpuruntime/ops/epilogue.h"

namespace xpuruntime::graph {

// Which compiler fusions pay on a device (the compiler reads this instead of
// CompileOptions alone: a pass runs when both the options and the provider
// allow it).
struct FusionSupport {
  bool fold_batchnorm = true;      // BatchNormalization into Conv/Gemm weights
  bool epilogues = true;           // bias, residual and activation into Conv/MatMul/Gemm
  bool elementwise_chains = true;  // chains of elementwise ops into one FusedElementwise
  // 1x1 convolutions of a single pixel (squeeze-excitation) as MatMuls: where the
  // device's convolution library runs them slower than its GEMM (cuDNN's heuristic
  // picks a generic kernel; oneDNN's 1x1 convolution is as fast as the CPU's GEMM).
  bool single_pixel_conv_gemms = false;
  // Decomposed LayerNorm and attention subgraphs into one LayerNormalization /
  // FusedAttention node each; a match fuses only where a kernel of the device runs
  // the fused node (the compiler asks the registry), so no device needs to opt out.
  bool patterns = true;
  // The memory planner may give an elementwise step's output the buffer of an input
  // whose last use it is: the device's elementwise kernels read each element before
  // writing the same index (the CPU's, CUDA's; not known of other devices).
  bool elementwise_in_place = false;
};

// The plan constants in the provider's device memory, uploaded once per
// executor. Owns the device copies (a host provider shares the host bytes
// instead).
class DeviceConstants {
 public:
  virtual ~DeviceConstants() = default;
  // Device pointer of plan constant i (never null, even for an empty constant),
  // except for a constant upload_constants was told no step reads on the device:
  // null there.
  virtual void* data(int constant) const = 0;
};

// One run's device resources. The executor creates one per run (begin_run) and
// destroys it when the run ends, on every path: the destructor returns the
// arena and every dynamic buffer still held.
class RunResources {
 public:
  virtual ~RunResources() = default;
  // The stream every kernel of this run is launched on (nullptr on the CPU).
  virtual NativeStream stream() const = 0;
  // At least the arena bytes begin_run was asked for (64-byte aligned).
  virtual void* arena() const = 0;
  // At least the workspace bytes begin_run was asked for, or nullptr when 0.
  virtual void* workspace() const = 0;
  // Device memory for a value shaped only at run time (and, on a device that
  // does not share host memory, for the plan's inputs and outputs); freed by
  // release() or when the run ends.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  // The copies at the plan's edges (inputs in, outputs out). Only called when the
  // provider's host_memory() is false; the executor counts them (RunStats) and the
  // provider records each as a profiler copy event (Profiler::record_copy, "h2d" /
  // "d2h"; a DeviceBackend::copy does so already).
  virtual void copy_to_device(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  // Waits until everything issued on stream() has finished (before outputs are
  // handed to the caller).
  virtual void synchronize() = 0;
  // A copy within the device's memory, on stream(): a caller's device tensor into
  // a plan buffer or back (zero host bytes). Recorded as a profiler "d2d" copy.
  virtual void copy_on_device(void* dst, const void* src, std::size_t bytes) {
    (void)dst, (void)src, (void)bytes;
    throw_no_device_memory();
  }
  // Orders this run's stream after everything issued on `other` so far (the
  // caller's stream, when a replayed graph runs on a stream of its own).
  virtual void wait_for(NativeStream other) { (void)other; }
  // The reverse: orders `other` (the caller's stream) after everything issued on this
  // run's stream so far, so a replayed graph's caller reads its device outputs in
  // order without the host waiting. The default waits on the host.
  virtual void signal(NativeStream other) {
    (void)other;
    synchronize();
  }
  // The host threads this run's kernels may use (ExecutionPolicy.threads, from the
  // plan header; 0 = the device's default), applied on the calling thread until the
  // run ends. Devices whose kernels use no host threads ignore it.
  virtual void set_threads(int threads) { (void)threads; }

 protected:
  [[noreturn]] static void throw_no_device_memory();
};

class ExecutionProvider {
 public:
  virtual ~ExecutionProvider() = default;

  // The device kind plans name in PlanHeader.device and CompileOptions.device
  // ("cpu").
  virtual const std::string& name() const = 0;
  // The DeviceKind the provider's kernels are registered and dispatched for.
  virtual DeviceKind kernel_device() const = 0;
  // The device a plan runs on (OpContext.device of every dispatched node).
  virtual Device device() const = 0;
  // OpContext.capability (CUDA: sm major*10+minor); 0 where it does not apply.
  virtual int capability() const { return 0; }
  // Answered without touching a device (an offline preview asks it too).
  virtual FusionSupport fusions() const { return {}; }
  // Whether this device's kernels of `op_type` (Conv, MatMul, Gemm) apply epilogue
  // `e` to outputs of `dtype`, so the epilogue fusion (FusionSupport.epilogues) may
  // form it. The default: the CPU kernels' (float32; a residual on Conv only).
  virtual bool takes_epilogue(const std::string& op_type, const ops::Epilogue& e,
                              DType dtype) const {
    return dtype == DType::kFloat32 && (!e.residual || op_type == "Conv");
  }
  // For an offline preview (CompileOptions.dry_run): the OpContext.capability of a
  // named target ("sm_90" -> 90 on CUDA; "" -> this machine's device) and the
  // environment a plan for it would record. The default takes only "" and answers
  // with capability() and environment(). Throws InvalidArgumentError for a target
  // the device does not know, naming the accepted form.
  virtual int target_capability(const std::string& target) const;
  virtual std::map<std::string, std::string> target_environment(const std::string& target) const;
  // What a plan compiled here depends on beyond the device kind, as field ->
  // value ("gpu_arch" -> "sm_90", library versions): stored in the plan header by
  // the compiler and compared by the plan loader, which refuses a plan whose
  // environment differs, naming the field. Empty by default (the CPU: its kernels
  // run on any x86-64 CPU and choose their micro-kernel on the loading machine).
  virtual std::map<std::string, std::string> environment() const { return {}; }
  // True when kernels read and write host memory: inputs bind and outputs are
  // written zero-copy, and no edge copies happen.
  virtual bool host_memory() const = 0;

  // Copies (or shares) the plan constants into device memory, once per
  // executor. read_on_device[i] false: no step reads constant i's device bytes
  // (each reader keeps its own packed copy, PreparedKernel::packs_constant), so a
  // device provider leaves it off the device; a host provider shares it anyway.
  virtual std::shared_ptr<const DeviceConstants> upload_constants(
      const std::vector<HostTensor>& constants, const std::vector<bool>& read_on_device) const = 0;
  // A run's resources: stream, an arena of arena_bytes and a workspace of
  // workspace_bytes. Called on the thread that runs the plan (thread settings
  // such as the CPU's OpenMP team size are applied here).
  virtual std::unique_ptr<RunResources> begin_run(std::size_t arena_bytes,
                                                  std::size_t workspace_bytes) const = 0;
  // begin_run on the caller's stream (a torch or cupy stream, or ours): every
  // kernel and copy of the run is issued on it, so the run is ordered after the
  // caller's earlier work (the kernels that produced its input tensors) and its
  // buffers return to that stream's pool. nullptr: begin_run. Providers without
  // streams refuse a non-null stream.
  virtual std::unique_ptr<RunResources> begin_run_on(NativeStream stream, std::size_t arena_bytes,
                                                     std::size_t workspace_bytes) const;
  // The device backend's graph capture, for replaying a whole static plan as one
  // graph (Executor, RunRequest.use_graph); nullptr when the device cannot capture
  // (the CPU).
  virtual DeviceBackend::GraphOps* graph_ops() const { return nullptr; }
};

using ProviderPtr = std::shared_ptr<const ExecutionProvider>;

// Providers by device kind, process-wide. Plugins add theirs when they load;
// the CPU provider is added when the core starts. Thread-safe.
class ProviderRegistry {
 public:
  static ProviderRegistry& instance();
  ProviderRegistry() = default;

  // Adds a provider under provider->name(). Returns false (keeping the
  // registered one) when the name is taken and replace is false. Throws
  // InvalidArgumentError for a null provider or an empty name.
  bool add(ProviderPtr provider, bool replace = false);
  bool remove(const std::string& device_kind);
  // The provider of a device kind, or nullptr. The process registry first makes
  // sure the core has started (DeviceManager: the built-in plugins have added their
  // kernels and providers).
  ProviderPtr find(const std::string& device_kind) const;
  // The provider of a device kind; throws UnsupportedOperationError naming the
  // kind and the registered ones (and, for a kind of the plugin table, that this
  // build has no provider for it).
  ProviderPtr get(const std::string& device_kind) const;
  // Registered device kinds, sorted.
  std::vector<std::string> names() const;

 private:
  ProviderPtr lookup(const std::string& device_kind) const;
  void start_core() const;
  // Loads every device plugin once (the process-wide registry only).
  void load_plugins() const;

  mutable std::shared_mutex mu_;
  std::vector<ProviderPtr> providers_;
  bool process_wide_ = false;
};

}  // namespace xpuruntime::graph
