// The op families' schema registrations (one per file in cpp/src/ops/) and the
// dtype lists and infer functions several families share. Internal to ops/.
#pragma once

#include <vector>

#include "xpuruntime/ops/op_schema.h"

namespace xpuruntime::ops {

inline const std::vector<DType> kFloatTypes = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                               DType::kBFloat16};
inline const std::vector<DType> kSignedTypes = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                                DType::kBFloat16, DType::kInt64,   DType::kInt32,
                                                DType::kInt16,    DType::kInt8};
inline const std::vector<DType> kNumericTypes = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                                 DType::kBFloat16, DType::kInt64,   DType::kInt32,
                                                 DType::kInt16,    DType::kInt8,    DType::kUInt8};

// Output 0 has input 0's dtype and shape.
bool infer_same(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out);

// A schema with the dispatcher key op_key(op_type).
OpSchema make_schema(const std::string& op_type, std::vector<DType> dtypes, std::string description,
                     InferFn infer);

void register_elementwise_schemas(std::vector<OpSchema>& s);
void register_unary_schemas(std::vector<OpSchema>& s);
void register_reduce_schemas(std::vector<OpSchema>& s);
void register_nn_schemas(std::vector<OpSchema>& s);
void register_conv_schemas(std::vector<OpSchema>& s);
void register_gemm_schemas(std::vector<OpSchema>& s);
void register_shape_schemas(std::vector<OpSchema>& s);
void register_data_schemas(std::vector<OpSchema>& s);
void register_fused_schemas(std::vector<OpSchema>& s);
void register_index_schemas(std::vector<OpSchema>& s);
void register_classify_schemas(std::vector<OpSchema>& s);
void register_resize_schemas(std::vector<OpSchema>& s);
void register_attention_schemas(std::vector<OpSchema>& s);
void register_einsum_schemas(std::vector<OpSchema>& s);
void register_nhwc_pool_schemas(std::vector<OpSchema>& s);

}  // namespace xpuruntime::ops
