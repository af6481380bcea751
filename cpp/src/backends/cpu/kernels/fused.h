// Binary operations a FusedElementwise program can hold (fused.cpp): the
// device-neutral kinds of xpuruntime/ops/elementwise.h.
#pragma once

#include "xpuruntime/ops/elementwise.h"

namespace xpuruntime::cpu {

using ops::FusedBin;

}  // namespace xpuruntime::cpu
