// ElementwiseProgram <-> node attributes (see xpuruntime/ops/elementwise_program.h).
#include "xpuruntime/ops/elementwise_program.h"

#include "xpuruntime/error.h"

namespace xpuruntime::ops {

ElementwiseProgram ElementwiseProgram::from_node(const graph::Node& n) {
  const std::vector<int64_t> prog = n.attr_ints("_prog", {});
  const std::vector<double> params = n.attr_floats("_params", {});
  XRT_CHECK(prog.size() % 3 == 0 && params.size() == prog.size() / 3 * 4, InvalidModelError,
            n.where(), ": malformed fused program (_prog holds ", prog.size(), " ints and _params ",
            params.size(), " floats; expected 3 ints and 4 floats per instruction)");
  const int64_t inputs = static_cast<int64_t>(n.inputs.size());
  ElementwiseProgram p;
  p.ops = n.attr_str("_ops", "");
  for (std::size_t i = 0; i < prog.size(); i += 3) {
    const int64_t kind = prog[i], code = prog[i + 1], operand = prog[i + 2];
    const std::size_t at = i / 3;
    ElementwiseInstr ins;
    XRT_CHECK(kind >= 0 && kind <= 2, InvalidModelError, n.where(), ": fused instruction ", at,
              " has kind ", kind, " (0 unary, 1 binary, 2 binary with the operand on the left)");
    ins.kind = static_cast<ElementwiseInstr::Kind>(kind);
    if (ins.kind == ElementwiseInstr::Kind::kUnary) {
      XRT_CHECK(code >= 0 && code <= static_cast<int64_t>(Unary::kNot), InvalidModelError,
                n.where(), ": fused instruction ", at, " has unknown unary code ", code);
      ins.unary = static_cast<Unary>(code);
    } else {
      XRT_CHECK(code >= 0 && code <= static_cast<int64_t>(FusedBin::kMax), InvalidModelError,
                n.where(), ": fused instruction ", at, " has unknown binary code ", code);
      XRT_CHECK(operand >= 0 && operand < inputs, InvalidModelError, n.where(),
                ": fused instruction ", at, " reads input ", operand, " but the node has ", inputs,
                " inputs");
      ins.binary = static_cast<FusedBin>(code);
      ins.operand = static_cast<int>(operand);
    }
    const std::size_t q = at * 4;
    ins.params.alpha = params[q];
    ins.params.beta = params[q + 1];
    ins.params.lo = params[q + 2];
    ins.params.hi = params[q + 3];
    p.instrs.push_back(ins);
  }
  return p;
}

void ElementwiseProgram::to_attrs(std::map<std::string, graph::Attr>& attrs) const {
  std::vector<int64_t> code;
  std::vector<double> params;
  for (const ElementwiseInstr& ins : instrs) {
    const bool unary = ins.kind == ElementwiseInstr::Kind::kUnary;
    code.insert(code.end(),
                {static_cast<int64_t>(ins.kind),
                 unary ? static_cast<int64_t>(ins.unary) : static_cast<int64_t>(ins.binary),
                 unary ? -1 : static_cast<int64_t>(ins.operand)});
    params.insert(params.end(), {ins.params.alpha, ins.params.beta, ins.params.lo, ins.params.hi});
  }
  attrs["_prog"] = graph::Attr::of_ints(code);
  attrs["_params"] = graph::Attr::of_floats(params);
  attrs["_ops"] = graph::Attr::of_string(ops);
}

}  // namespace xpuruntime::ops
