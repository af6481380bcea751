// C++ exceptions → Python classes of the same names (DESIGN.md §9), in one place.
#include "bindings/bindings.h"
#include "xpuruntime/error.h"

namespace xpuruntime::bindings {

void bind_errors(py::module_& m) {
  static py::handle base = py::exception<XpuRuntimeError>(m, "XpuRuntimeError", PyExc_RuntimeError).release();
  static py::handle cuda = py::exception<CudaError>(m, "CudaError", base).release();
  // Deliberately not a MemoryError subclass: CPython gives MemoryError a free list
  // and special allocation paths that multiple inheritance does not mix with.
  static py::handle oom = py::exception<OutOfMemoryError>(m, "OutOfMemoryError", base).release();
  static py::handle unsupported = py::exception<UnsupportedOperationError>(m, "UnsupportedOperationError", base).release();
  static py::handle invalid_bases = py::make_tuple(base, py::handle(PyExc_ValueError)).release();
  static py::handle invalid = py::exception<InvalidArgumentError>(m, "InvalidArgumentError", invalid_bases).release();
  static py::handle policy = py::exception<PolicyError>(m, "PolicyError", invalid).release();
  static py::handle model = py::exception<InvalidModelError>(m, "InvalidModelError", invalid).release();
  static py::handle unavailable = py::exception<BackendUnavailableError>(m, "BackendUnavailableError", base).release();
  static py::handle lock = py::exception<LockViolationError>(m, "LockViolationError", base).release();

  // Handles are released on purpose: they must outlive interpreter finalization.
  // Most derived first: a catch of the base would swallow the others.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OutOfMemoryError& e) {
      py::set_error(oom, e.what());
    } catch (const CudaError& e) {
      py::set_error(cuda, e.what());
    } catch (const UnsupportedOperationError& e) {
      py::set_error(unsupported, e.what());
    } catch (const PolicyError& e) {
      py::set_error(policy, e.what());
    } catch (const InvalidModelError& e) {
      py::set_error(model, e.what());
    } catch (const InvalidArgumentError& e) {
      py::set_error(invalid, e.what());
    } catch (const BackendUnavailableError& e) {
      py::set_error(unavailable, e.what());
    } catch (const LockViolationError& e) {
      py::set_error(lock, e.what());
    } catch (const XpuRuntimeError& e) {
      py::set_error(base, e.what());
    }
  });

  // Test hook: raise each C++ error type from C++ so tests can check the mapping.
  m.def("_raise_cpp_error", [](const std::string& kind, const std::string& msg) {
    if (kind == "XpuRuntimeError") throw XpuRuntimeError(msg);
    if (kind == "CudaError") throw CudaError(msg);
    if (kind == "OutOfMemoryError") throw OutOfMemoryError(msg);
    if (kind == "UnsupportedOperationError") throw UnsupportedOperationError(msg);
    if (kind == "InvalidArgumentError") throw InvalidArgumentError(msg);
    if (kind == "PolicyError") throw PolicyError(msg);
    if (kind == "InvalidModelError") throw InvalidModelError(msg);
    if (kind == "BackendUnavailableError") throw BackendUnavailableError(msg);
    if (kind == "LockViolationError") throw LockViolationError(msg);
    XRT_THROW(InvalidArgumentError, "unknown error kind '", kind, "'");
  });
}

}  // namespace xpuruntime::bindings
