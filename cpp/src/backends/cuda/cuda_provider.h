// The CUDA execution provider (xpuruntime/provider.h): plans compiled for "cuda" run
// their kernels on a stream of the current CUDA device; plan constants are
// uploaded once per executor into device memory; a run's arena, workspace and
// run-time shaped buffers come from the device's CachingAllocator on the run's
// stream; inputs and outputs cross the host boundary through the run's stream.
//
// Without a usable CUDA device (no driver, no GPU) the provider is still
// registered, so that compiling or running a plan for "cuda" fails with a
// BackendUnavailableError that says why instead of "no provider".
#pragma once

#include <memory>

#include "xpuruntime/provider.h"

namespace xpuruntime::cuda {

class CudaBackend;

// A new CUDA provider (name "cuda") over `backend`, which must outlive it (the
// plugin's backend lives until process exit).
std::shared_ptr<graph::ExecutionProvider> make_cuda_provider(CudaBackend &backend);

}  // namespace xpuruntime::cuda
