// Window geometry shared by pooling and convolution: the device-neutral rules of
// xpuruntime/ops/spatial.h, under the names the CPU kernels use.
#pragma once

#include "backends/cpu/kernels/cpu_op.h"
#include "xpuruntime/ops/spatial.h"

namespace xpuruntime::cpu {

using ops::conv_geometry;
using ops::ConvAttrs;
using ops::pool_geometry;
using ops::PoolAttrs;
using ops::Spatial;

}  // namespace xpuruntime::cpu
