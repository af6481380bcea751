// The null device (IREE's null driver, tinygrad's ops_null): a real device kind whose
// memory is host memory, whose streams run their work in order (inline), and which
// has no kernels of its own beyond copies: plans on it run the CPU's kernels
// (PluginEntry::runs_kernels_of) through the one execution provider, with every edge
// copy, stream, event and allocation going through this backend. It exists so that
// the provider, executor and conformance tests run on a device that is not the CPU
// in CI, on any machine.
//
// Off unless XRT_NULL_DEVICE=1: device_count() is 0 and unavailable_reason() says how
// to turn it on, so users listing devices see only real ones.
#pragma once

#include "xpuruntime/backend.h"

namespace xpuruntime::null_device {

// This plugin's device kind: the core's plugin table names it "null".
DeviceKind kind();

// The process-wide null backend (never destroyed).
DeviceBackend& backend();

}  // namespace xpuruntime::null_device
