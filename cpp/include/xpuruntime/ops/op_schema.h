// Device-neutral op semantics (DESIGN.md §2, §5): one OpSchema per ONNX op type (and
// per fused op of domain "xrt") with what every device agrees on — the dispatcher op
// key, shape and dtype inference, whether output 0 aliases input 0, and whether the
// op may be folded at compile time. How an op runs is a Kernel's business
// (kernel_registry.h); a schema never includes a backend.
//
// How to add an op: write its infer function in the family file under cpp/src/ops/
// (elementwise.cpp, reduce.cpp, ...), add an OpSchema in that file's register
// function, then register a Kernel for it in each device folder that runs it.
// Thread-safe: schemas are immutable after the table is built.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "xpuruntime/dtype.h"
#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

using graph::Node;
using graph::Shape;

// What is known about one operand: at compile time the dtype and maybe the shape
// and the value (constants); at run time everything.
struct Meta {
  bool present = false;  // false: an omitted optional input
  DType dtype = DType::kFloat32;
  std::optional<Shape> shape;
  const void* data = nullptr;  // the value (host memory), when known

  bool known() const { return present && shape.has_value(); }
  bool has_value() const { return known() && data != nullptr; }
  int64_t numel() const { return shape ? graph::shape_numel(*shape) : -1; }
  int64_t rank() const { return shape ? static_cast<int64_t>(shape->size()) : -1; }
  // The value as integers / doubles (requires has_value()).
  std::vector<int64_t> ints() const;
  std::vector<double> floats() const;
};

// Fills the output metas from the input metas; returns false when an output shape
// depends on a value that is not known yet (it is then inferred at run time).
// Throws InvalidModelError naming the node for a malformed node.
using InferFn = std::function<bool(const Node&, const std::vector<Meta>&, std::vector<Meta>&)>;

struct OpSchema {
  std::string op_type;      // ONNX op type ("Add"), or a fused op ("FusedElementwise")
  std::string domain;       // "" (ai.onnx) or "xrt" (ops the compiler creates)
  std::string key;          // dispatcher op key ("add", "conv", "matmul", ...)
  std::vector<DType> dtypes;  // dtypes of input 0 the op is defined for; empty = any
  InferFn infer;
  // Output 0 is input 0's bytes under another shape (Reshape, Squeeze, ...): the
  // executor aliases instead of running a kernel when it can.
  bool alias = false;
  // May run at compile time on constant inputs (false for random ops).
  bool foldable = true;
  std::string description;  // one line for docs/ops.md
};

// The schema of an op type, or nullptr when the engine does not know the op.
const OpSchema* find_schema(const std::string& op_type);
// Every op type with a schema, sorted.
std::vector<std::string> schema_op_types();
// Dispatcher op key of an ONNX op type: canonical keys for Conv/MatMul/Gemm/
// Softmax/LayerNormalization, the lower-case op type otherwise.
std::string op_key(const std::string& op_type);

// ---- helpers the schemas (and kernels) share ---------------------------------

// Numpy-style broadcast of shapes; throws InvalidModelError naming the node.
Shape broadcast_shapes(const Node& n, const std::vector<Shape>& shapes);
// Normalizes a possibly negative axis into [0, rank) (or [0, rank] with inclusive).
int64_t norm_axis(const Node& n, int64_t axis, int64_t rank, bool inclusive = false);
// Requires `count` present inputs at least; throws InvalidModelError.
void require_inputs(const Node& n, const std::vector<Meta>& in, std::size_t count);
// Input i, when present, is one value (rank 0 or 1 with one element, where the
// shape is known) of one of `dtypes` (any when empty): kernels read its element 0.
// Throws InvalidModelError naming the node and `what`.
void require_scalar_input(const Node& n, const std::vector<Meta>& in, std::size_t i,
                          const char* what, const std::vector<DType>& dtypes = {});
// Output meta with dtype and shape.
Meta out_meta(DType dtype, Shape shape);
// Whether all present inputs have known shapes (infer functions return false otherwise).
bool all_known(const std::vector<Meta>& in);

}  // namespace xpuruntime::ops
