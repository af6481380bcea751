// This plugin's device kind: the core's plugin table names it "cuda" (core/plugin.cpp),
// so DeviceKind interns it there; the plugin asks for it by that name.
#pragma once

#include "xpuruntime/device.h"

namespace xpuruntime::cuda {

inline DeviceKind kind() {
  static const DeviceKind k = DeviceKind::named("cuda");
  return k;
}
inline Device device(int index) { return Device{kind(), index}; }

}  // namespace xpuruntime::cuda
