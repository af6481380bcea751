// Declared op keys and kernel names (see known_names.cpp for why they are data).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace xpuruntime::known_names {

// matmul, conv, attention, layernorm, softmax.
const std::vector<std::string>& canonical_ops();
// Lower-case ONNX op types (aliases of canonical keys excluded).
const std::vector<std::string>& onnx_ops();
// Spellings users reach for -> the canonical key ("gemm" -> "matmul").
const std::map<std::string, std::string>& op_aliases();
// op -> kernel names the project ships or routes to.
const std::map<std::string, std::vector<std::string>>& declared_kernels();

}  // namespace xpuruntime::known_names
