// Built instead of conv_cudnn.cpp when CMake found no cuDNN 9 (it says why when
// configuring): the name ("conv", "cudnn") stays known, so a policy written on
// a machine with cuDNN validates here, and the dispatcher records that no such
// kernel is registered instead of rejecting the policy.
#include "backends/cuda/kernels/conv/conv_cudnn_kernels.h"

namespace xpuruntime {

void register_cudnn_conv_kernels(KernelRegistry& registry) {
  registry.register_known_kernel_name("conv", "cudnn");
}

}  // namespace xpuruntime
