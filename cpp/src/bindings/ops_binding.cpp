// _core.ops: the matmul op (declarations and exports only; the work is in
// ops/matmul/matmul_call.cpp). Operands are converted on the GIL, then
// the GIL is released for selection and the kernel.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings/bindings.h"
#include "bindings/tensor_convert.h"
#include "ops/matmul/matmul_call.h"
#include "ops/matmul/matmul_op.h"
#include "xpuruntime/cpu_plugin_abi.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/plugin.h"

namespace xpuruntime::bindings {
namespace {

namespace mm = matmul;

// Policies arrive as _core objects or as wrappers exposing _get_internal(); the
// returned pointer borrows from `holder`, which the caller keeps alive.
template <typename P>
const P* borrow_policy(const py::object& p, py::object& holder, const char* what) {
  if (p.is_none()) return nullptr;
  holder = py::isinstance<P>(p) ? p : (py::hasattr(p, "_get_internal") ? p.attr("_get_internal")() : py::object());
  if (!holder || !py::isinstance<P>(holder)) {
    XRT_THROW(InvalidArgumentError, "matmul: expected a ", what, " (or None), got ",
              std::string(py::str(py::type::handle_of(p).attr("__name__"))));
  }
  return &holder.cast<const P&>();
}

mm::MatmulArgs make_args(const py::handle& a, const py::handle& b, const py::handle& bias,
                         const py::handle& activation, const py::handle& out) {
  mm::MatmulArgs args;
  args.a = tensor_from_python(a);
  args.b = tensor_from_python(b);
  if (!bias.is_none()) args.bias = tensor_from_python(bias);
  if (!out.is_none()) args.out = tensor_from_python(out);
  if (!activation.is_none()) {
    args.activation = mm::activation_from_string(activation.cast<std::string>());
  }
  return args;
}

}  // namespace

void bind_ops(py::module_& m) {
  py::module_ ops = m.def_submodule("ops", "Ops dispatched through the KernelPolicy (matmul).");

  ops.def(
      "matmul",
      [](const py::handle& a, const py::handle& b, const py::handle& bias,
         const py::handle& activation, const py::handle& out, const py::object& policy,
         const py::object& execution_policy, const std::string& node) {
        mm::MatmulArgs args = make_args(a, b, bias, activation, out);
        py::object kp_holder, ep_holder;
        args.policy = borrow_policy<KernelPolicy>(policy, kp_holder, "KernelPolicy");
        args.execution = borrow_policy<ExecutionPolicy>(execution_policy, ep_holder, "ExecutionPolicy");
        args.node = node;
        py::gil_scoped_release release;
        return mm::matmul(args);
      },
      // Positional-or-keyword: the Python wrapper passes all eight positionally (keyword
      // matching costs about a microsecond per call).
      py::arg("a"), py::arg("b"), py::arg("bias") = py::none(),
      py::arg("activation") = py::none(), py::arg("out") = py::none(),
      py::arg("policy") = py::none(), py::arg("execution_policy") = py::none(),
      py::arg("node") = "",
      "act(a @ b + bias) with NumPy matmul semantics; the kernel is chosen by the policy "
      "and the choice recorded (Dispatcher log). Returns a Tensor (out when given).");

  ops.def(
      "matmul_with_kernel",
      [](const std::string& kernel, const py::handle& a, const py::handle& b,
         const py::handle& bias, const py::handle& activation, const py::handle& out,
         const py::object& execution_policy, const std::string& algorithm, const py::handle& workspace,
         const py::handle& a_row_sums) {
        mm::MatmulArgs args = make_args(a, b, bias, activation, out);
        if (!workspace.is_none()) args.workspace = tensor_from_python(workspace);
        if (!a_row_sums.is_none()) args.a_row_sums = tensor_from_python(a_row_sums);
        py::object ep_holder;
        args.execution = borrow_policy<ExecutionPolicy>(execution_policy, ep_holder, "ExecutionPolicy");
        py::gil_scoped_release release;
        return mm::matmul_with_kernel(kernel, args, algorithm);
      },
      py::arg("kernel"), py::arg("a"), py::arg("b"), py::kw_only(), py::arg("bias") = py::none(),
      py::arg("activation") = py::none(), py::arg("out") = py::none(),
      py::arg("execution_policy") = py::none(), py::arg("algorithm") = "",
      py::arg("workspace") = py::none(), py::arg("a_row_sums") = py::none(),
      "Runs one named matmul kernel directly: no policy, no decision (tests, benchmarks, "
      "the PyTorch integration). `workspace`: a caller's contiguous byte buffer used as "
      "the kernel's scratch instead of one of ours (it must hold the kernel's need). "
      "`a_row_sums`: an (M) tensor that receives the row sums of a in the same kernel "
      "(2-D operands, no bias or activation; cublasLt only: a linear layer's bias "
      "gradient fused into its weight-gradient GEMM).");

  ops.def(
      "_time_kernel_runs",
      [](const std::string& kernel, const py::handle& a, const py::handle& b, int iterations) {
        mm::MatmulArgs args = make_args(a, b, py::none(), py::none(), py::none());
        py::gil_scoped_release release;
        return mm::time_kernel_runs(kernel, args, iterations);
      },
      py::arg("kernel"), py::arg("a"), py::arg("b"), py::arg("iterations"),
      "Seconds per kernel run in a C++ loop over one prepared launch (no Python, no "
      "normalization, no dispatch): the floor ops.matmul's overhead is measured against.");

  ops.def(
      "last_decision_json", [] { return mm::last_matmul_decision().to_json(); },
      "The calling thread's last successful ops.matmul Decision as JSON ('' op when none).");
  ops.def("clear_cache", &mm::clear_matmul_call_cache,
          "Forgets the per-case kernel choices ops.matmul cached (they are rebuilt on next use).");
  ops.def("cache_size", &mm::matmul_call_cache_size);
  ops.def(
      "cpu_gemm_info",
      [] {
        // The CPU plugin's entry: the GEMM build is the CPU folder's business.
        const auto fn = plugin_entry<cpu::GemmInfoEntry>("cpu", cpu::entry::kGemmInfo);
        XRT_CHECK(fn != nullptr, BackendUnavailableError, "cpu_gemm_info: the CPU plugin does not serve '",
                  cpu::entry::kGemmInfo, "' (plugin status: see _core.plugin_statuses())");
        std::string isa, blas;
        bool blas_available = false;
        fn(&isa, &blas_available, &blas);
        py::dict d;
        d["isa"] = isa;
        d["blas_available"] = blas_available;
        d["blas"] = blas;
        if (const auto info = plugin_entry<cpu::KernelInfoEntry>("cpu", cpu::entry::kKernelInfo)) {
          std::string vector_isa, onednn;
          info(&vector_isa, &onednn);
          d["vector_isa"] = vector_isa;
          d["onednn"] = onednn;
        }
        return d;
      },
      "The CPU kernels' build: GEMM micro-kernel ISA, BLAS library, the x86-64 level of the "
      "vectorized loops, and oneDNN.");
}

}  // namespace xpuruntime::bindings
