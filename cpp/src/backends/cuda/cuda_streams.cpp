// CUDA streams, events and graphs behind DeviceBackend::StreamOps / GraphOps.
// Synchronizations are recorded in the Profiler by the core wrappers (Stream,
// Event, DeviceManager), not here, so each is counted once.
#include <algorithm>
#include <cstdio>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda {

namespace {
cudaStream_t as_stream(NativeStream s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(NativeEvent e) { return static_cast<cudaEvent_t>(e); }
cudaGraphExec_t as_graph(NativeGraph g) { return static_cast<cudaGraphExec_t>(g); }

// cudaStreamQuery / cudaEventQuery: true when done, false while work is pending.
bool ready_or_throw(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error to keep
    return false;
  }
  throw_cuda_error(call, err, __FILE__, __LINE__);
}

void report_destroy_failure(const char* call, cudaError_t err) noexcept {
  (void)cudaGetLastError();
  if (err != cudaErrorCudartUnloading) {
    std::fprintf(stderr, "xpuruntime: %s failed: %s\n", call, cuda_error_text(err).c_str());
  }
}
}  // namespace

// ---- streams ---------------------------------------------------------------

NativeStream CudaStreamOps::create_stream(int index, int priority) {
  backend_.check_index(index, "create_stream");
  DeviceGuard guard(index);
  // CUDA: lower numbers run first, within [greatest, least] (e.g. [-5, 0]).
  int least = 0, greatest = 0;
  XRT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const int clamped = std::clamp(priority, greatest, least);
  cudaStream_t s = nullptr;
  XRT_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, clamped));
  return s;
}

void CudaStreamOps::destroy_stream(int index, NativeStream s) noexcept {
  if (s == nullptr) return;  // the legacy default stream is never destroyed
  DeviceGuard guard(index, std::nothrow);
  const cudaError_t err = cudaStreamDestroy(as_stream(s));
  if (err != cudaSuccess) report_destroy_failure("cudaStreamDestroy", err);
}

void CudaStreamOps::synchronize_stream(int index, NativeStream s) {
  backend_.check_index(index, "stream synchronize");
  DeviceGuard guard(index);
  XRT_CUDA_CHECK(cudaStreamSynchronize(as_stream(s)));
}

bool CudaStreamOps::query_stream(int index, NativeStream s) {
  backend_.check_index(index, "stream query");
  DeviceGuard guard(index);
  return ready_or_throw(cudaStreamQuery(as_stream(s)), "cudaStreamQuery");
}

// ---- events ----------------------------------------------------------------

NativeEvent CudaStreamOps::create_event(int index, bool enable_timing) {
  backend_.check_index(index, "create_event");
  DeviceGuard guard(index);
  cudaEvent_t e = nullptr;
  XRT_CUDA_CHECK(cudaEventCreateWithFlags(&e, enable_timing ? cudaEventDefault
                                                            : cudaEventDisableTiming));
  return e;
}

void CudaStreamOps::destroy_event(int index, NativeEvent e) noexcept {
  if (e == nullptr) return;
  DeviceGuard guard(index, std::nothrow);
  const cudaError_t err = cudaEventDestroy(as_event(e));
  if (err != cudaSuccess) report_destroy_failure("cudaEventDestroy", err);
}

void CudaStreamOps::record_event(int index, NativeEvent e, NativeStream s) {
  backend_.check_index(index, "record_event");
  DeviceGuard guard(index);
  XRT_CUDA_CHECK(cudaEventRecord(as_event(e), as_stream(s)));
}

void CudaStreamOps::synchronize_event(int index, NativeEvent e) {
  backend_.check_index(index, "event synchronize");
  DeviceGuard guard(index);
  XRT_CUDA_CHECK(cudaEventSynchronize(as_event(e)));
}

bool CudaStreamOps::query_event(int index, NativeEvent e) {
  backend_.check_index(index, "event query");
  DeviceGuard guard(index);
  return ready_or_throw(cudaEventQuery(as_event(e)), "cudaEventQuery");
}

void CudaStreamOps::stream_wait_event(int index, NativeStream s, NativeEvent e) {
  backend_.check_index(index, "stream_wait_event");
  DeviceGuard guard(index);
  XRT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(s), as_event(e), 0));
}

float CudaStreamOps::elapsed_ms(int index, NativeEvent start, NativeEvent end) {
  backend_.check_index(index, "elapsed_time");
  DeviceGuard guard(index);
  float ms = 0.0f;
  const cudaError_t err = cudaEventElapsedTime(&ms, as_event(start), as_event(end));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    XRT_THROW(InvalidArgumentError, "elapsed time on cuda:", index,
              ": an event has not completed yet; synchronize the end event first");
  }
  if (err == cudaErrorInvalidResourceHandle) {
    (void)cudaGetLastError();
    XRT_THROW(InvalidArgumentError, "elapsed time on cuda:", index,
              ": both events must be recorded, created with timing enabled, on the same device");
  }
  if (err != cudaSuccess) throw_cuda_error("cudaEventElapsedTime", err, __FILE__, __LINE__);
  return ms;
}

// ---- graphs ----------------------------------------------------------------

void CudaGraphOps::begin_capture(int index, NativeStream s) {
  backend_.check_index(index, "graph capture");
  XRT_CHECK(s != nullptr, InvalidArgumentError, "CUDA graph capture on cuda:", index,
            ": the legacy default stream cannot be captured; capture on a created stream");
  DeviceGuard guard(index);
  XRT_CUDA_CHECK(cudaStreamBeginCapture(as_stream(s), cudaStreamCaptureModeThreadLocal));
}

NativeGraph CudaGraphOps::end_capture(int index, NativeStream s) {
  backend_.check_index(index, "graph capture");
  DeviceGuard guard(index);
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(as_stream(s), &graph);
  if (err == cudaErrorStreamCaptureInvalidated) {
    (void)cudaGetLastError();
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    XRT_THROW(CudaError, "CUDA graph capture on cuda:", index,
              " was invalidated: an operation during capture was not capturable (a "
              "synchronization, a legacy-stream call, or work joined from an uncaptured stream)");
  }
  if (err != cudaSuccess) throw_cuda_error("cudaStreamEndCapture", err, __FILE__, __LINE__);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  if (inst != cudaSuccess) throw_cuda_error("cudaGraphInstantiate", inst, __FILE__, __LINE__);
  return exec;
}

void CudaGraphOps::launch(int index, NativeGraph g, NativeStream s) {
  backend_.check_index(index, "graph replay");
  XRT_CHECK(g != nullptr, InvalidArgumentError, "CUDA graph replay on cuda:", index,
            ": the graph is empty (was it destroyed?)");
  DeviceGuard guard(index);
  XRT_CUDA_CHECK(cudaGraphLaunch(as_graph(g), as_stream(s)));
}

void CudaGraphOps::destroy(int index, NativeGraph g) noexcept {
  if (g == nullptr) return;
  DeviceGuard guard(index, std::nothrow);
  const cudaError_t err = cudaGraphExecDestroy(as_graph(g));
  if (err != cudaSuccess) report_destroy_failure("cudaGraphExecDestroy", err);
}

bool CudaGraphOps::is_capturing(int index, NativeStream s) {
  backend_.check_index(index, "graph capture status");
  DeviceGuard guard(index);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  XRT_CUDA_CHECK(cudaStreamIsCapturing(as_stream(s), &status));
  return status == cudaStreamCaptureStatusActive;
}

}  // namespace xpuruntime::cuda
