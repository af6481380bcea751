// The one execution provider (provider.h), written once against DeviceBackend
// (backend.h): every device's plans run through it. Arena, workspace and dynamic
// buffers come from the device's CachingAllocator on the run's stream; runs take a
// stream from a pool (or the caller's), the plan's edges are DeviceBackend::copy
// calls on it, wait_for is an event, and graph capture is the backend's GraphOps.
// A host-memory device (the CPU) shares the plan's constant bytes and binds inputs
// and outputs zero-copy.
//
// A device passes only what differs (DeviceTraits): which fusions and epilogues pay
// there, the environment a plan compiled for it depends on (and the named targets an
// offline preview may ask for), and, for the CPU, the host-thread settings of a run.
// Capability comes from the backend (attribute "capability").
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "xpuruntime/backend.h"
#include "xpuruntime/dtype.h"
#include "xpuruntime/ops/epilogue.h"
#include "xpuruntime/provider.h"

namespace xpuruntime::graph {

struct DeviceTraits {
  // Kernels read and write host memory (the CPU): constants are shared, inputs and
  // outputs bind zero-copy, runs have no stream (kernels run inline, in order).
  bool host_memory = false;
  // The kind whose kernels plans for this device dispatch (the device's plugin sets
  // PluginEntry::runs_kernels_of to the same): the null device runs the CPU's.
  // Default: the backend's own kind.
  std::optional<DeviceKind> kernel_device;
  // Which compiler fusions pay on the device. Answered without touching a device
  // (an offline preview asks it too). Default: every fusion.
  std::function<FusionSupport()> fusions;
  // Whether the device's kernels of `op_type` (Conv, MatMul, Gemm) apply epilogue `e`
  // to outputs of `dtype` (ExecutionProvider::takes_epilogue). Default: every
  // epilogue, float32 only (the CPU kernels).
  std::function<bool(const std::string& op_type, const ops::Epilogue& e, DType dtype)> takes_epilogue;
  // The capability (OpContext.capability) of a named offline-preview target, e.g.
  // "sm_90" -> 90; throws InvalidArgumentError for a target the device does not know,
  // naming the accepted form. Never called with "" (this machine's device). Default:
  // the device takes no named target.
  std::function<int(const std::string& target)> target_capability;
  // What a plan compiled for a device of `capability` depends on beyond the kind
  // (field -> value, e.g. "gpu_arch" -> "sm_90", library versions); the plan loader
  // refuses a plan whose environment differs. Answered without touching a device
  // (a preview for a named target asks it too). Default: nothing.
  std::function<std::map<std::string, std::string>(int capability)> environment;
  // Host-memory devices only: called at begin_run on the running thread (the CPU's
  // OpenMP team size), and per run with ExecutionPolicy.threads (> 0): the returned
  // object caps the run's host threads until the run ends.
  std::function<void()> on_begin_run;
  std::function<std::shared_ptr<void>(int threads)> cap_threads;
  // How to say that a device kind cannot run here, after the backend's reason
  // (e.g. "run on a machine with an NVIDIA GPU and driver, or use device='cpu'").
  std::string unavailable_hint = "run on a machine with the device and its driver, or use device='cpu'";
};

// The execution provider of `backend`'s device kind (named after it). The backend
// outlives the provider (backends live until process exit).
std::shared_ptr<ExecutionProvider> make_device_provider(DeviceBackend& backend, DeviceTraits traits);

}  // namespace xpuruntime::graph
