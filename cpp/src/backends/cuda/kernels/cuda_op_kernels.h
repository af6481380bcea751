// The CUDA op kernels of the native engine (issue 15): elementwise, softmax,
// reductions, data movement, index ops (GatherND, ScatterND, ScatterElements),
// InstanceNormalization, pooling, Resize and the NVRTC-compiled
// FusedElementwise chains, registered under (lower-case ONNX op type, "cuda")
// with provider "cuda_raw". The plugin entry point calls this once.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {

// Registers every CUDA op kernel of cpp/src/backends/cuda/kernels/ (replacing
// earlier registrations of the same name). Thread-safe as the registry is.
void register_cuda_op_kernels(KernelRegistry& registry);

}  // namespace xpuruntime
