#include "backends/cuda/kernels/cuda_op_kernels.h"

#include "backends/cuda/kernels/data/data_kernels.h"
#include "backends/cuda/kernels/data/index_kernels.h"
#include "backends/cuda/kernels/depthwise/depthwise_kernels.h"
#include "backends/cuda/kernels/elementwise/elementwise_kernels.h"
#include "backends/cuda/kernels/fused/fused_kernels.h"
#include "backends/cuda/kernels/norm/norm_kernels.h"
#include "backends/cuda/kernels/pool/pool_kernels.h"
#include "backends/cuda/kernels/reduce/reduce_kernels.h"
#include "backends/cuda/kernels/resize/resize_kernels.h"
#include "backends/cuda/kernels/rotary/rotary_kernels.h"
#include "backends/cuda/kernels/softmax/softmax_kernels.h"

namespace xpuruntime {

void register_cuda_op_kernels(KernelRegistry& registry) {
  cuda_ops::register_elementwise_kernels(registry);
  cuda_ops::register_softmax_kernels(registry);
  cuda_ops::register_reduce_kernels(registry);
  cuda_ops::register_data_kernels(registry);
  cuda_ops::register_index_kernels(registry);
  cuda_ops::register_norm_kernels(registry);
  cuda_ops::register_pool_kernels(registry);
  cuda_ops::register_resize_kernels(registry);
  cuda_ops::register_fused_kernels(registry);
  cuda_ops::register_depthwise_kernels(registry);
  cuda_ops::register_rotary_kernels(registry);
}

}  // namespace xpuruntime
