// A fused elementwise chain as a typed program (FusedElementwise nodes, domain
// "xrt"): the accumulator starts as input 0 and every instruction applies a unary
// kind to it, or a binary operation with another input (on the right, or on the
// left for Sub/Div/Pow where order matters). Devices interpret or compile it (the
// CPU runs it block by block; an NVRTC code generator can emit one kernel from it).
// This header is the one place that reads and writes its node attributes:
//   "_prog"    ints, 3 per instruction: kind (0 unary, 1 binary, 2 binary with the
//              operand on the left), code (Unary or FusedBin), operand input index
//              (binary; -1 for unary)
//   "_params"  floats, 4 per instruction: alpha, beta, lo, hi (UnaryParams)
//   "_ops"     string: the fused ONNX op types, comma separated (for people)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "xpuruntime/ir.h"
#include "xpuruntime/ops/elementwise.h"

namespace xpuruntime::ops {

struct ElementwiseInstr {
  enum class Kind : uint8_t { kUnary = 0, kBinary = 1, kBinaryOperandLeft = 2 };
  Kind kind = Kind::kUnary;
  Unary unary = Unary::kIdentity;    // kind == kUnary
  FusedBin binary = FusedBin::kAdd;  // otherwise
  int operand = -1;                  // input index of the other operand (binary)
  UnaryParams params;                // unary parameters (LeakyRelu alpha, Clip bounds, ...)
};

struct ElementwiseProgram {
  std::vector<ElementwiseInstr> instrs;
  std::string ops;  // the fused op types, "Div,Erf,Add,Mul,Mul"

  // Reads and validates a FusedElementwise node's program (codes in range, operand
  // indices naming inputs other than the accumulator); throws InvalidModelError
  // naming the node otherwise.
  static ElementwiseProgram from_node(const graph::Node& n);
  void to_attrs(std::map<std::string, graph::Attr>& attrs) const;
};

}  // namespace xpuruntime::ops
