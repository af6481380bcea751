// The NCCL helper's C ABI (DESIGN.md §2, §9): what
// python/xpuruntime/distributed calls through ctypes. libxpuruntime_nccl.so
// links neither NCCL nor CUDA: it opens libnccl.so.2 and the CUDA driver
// (libcuda.so.1) with dlopen on first use, so the package imports and reports
// *why* where either is absent.
//
// Every function returns an XrtNcclStatus; on failure xrt_nccl_last_error()
// holds the message (what failed, where, how to fix) for the calling thread.
// Handles are opaque: a communicator is owned by whoever created it until
// xrt_nccl_comm_destroy/abort; a work handle until xrt_nccl_work_destroy.
// Functions are thread-safe except that one communicator must not be used from
// two threads at once (NCCL's own rule).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// Mapped to Python exceptions in one place (distributed/_lib.py).
enum XrtNcclStatus : int {
  kXrtNcclOk = 0,
  kXrtNcclUnavailable = 1,      // library absent, no CUDA device, version too old
  kXrtNcclInvalidArgument = 2,  // a bad argument caught before any NCCL call
  kXrtNcclError = 3,            // NCCL returned an error
  kXrtNcclCudaError = 4,        // the CUDA driver returned an error
  kXrtNcclTimeout = 5,          // the timeout passed: the communicator was aborted
  kXrtNcclRemoteError = 6,      // NCCL's async error (a peer died): aborted
};

// Collective kinds of xrt_nccl_collective (peer = root for broadcast/reduce,
// the other rank for send/recv, unused otherwise).
enum XrtNcclCollective : int {
  kXrtAllReduce = 0,
  kXrtAllGather = 1,
  kXrtReduceScatter = 2,
  kXrtBroadcast = 3,
  kXrtReduce = 4,
  kXrtSend = 5,
  kXrtRecv = 6,
};

inline constexpr int kXrtNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
// The oldest NCCL this helper accepts: ncclCommSplit and nonblocking init
// (2.18).
inline constexpr int kXrtNcclMinVersion = 21800;

// The message of the calling thread's last failure ("" after a success).
const char* xrt_nccl_last_error();
// A libnccl.so.2 to prefer over the library path (the one torch's wheel ships,
// so torch and we share one NCCL); only before NCCL is first loaded. Never
// fails.
int xrt_nccl_prefer_library(const char* path);
// NCCL's version code (22809 for 2.28.9). Needs only libnccl.so.2, no GPU.
int xrt_nccl_version(int* version);
// Loads NCCL and the CUDA driver; *devices = the CUDA device count. Unavailable
// (with the reason) when a library is absent, NCCL is too old or there is no
// device.
int xrt_nccl_probe(int* devices);
// ncclGetUniqueId: needs libnccl only, no GPU.
int xrt_nccl_unique_id(uint8_t* out /* kXrtNcclUniqueIdBytes */);

// Creates this rank's communicator on `device` (nonblocking init, polled until
// every rank joined or timeout_s passed: then aborted, kXrtNcclTimeout).
int xrt_nccl_comm_init(int rank, int world, const uint8_t* unique_id, int device, double timeout_s,
                       void** comm);
// ncclCommSplit; *out is null for color < 0 (NCCL_SPLIT_NOCOLOR: not a member).
int xrt_nccl_comm_split(void* comm, int color, int key, void** out);
// The rank and size NCCL gave a communicator (a split one's are NCCL's choice).
int xrt_nccl_comm_info(void* comm, int* rank, int* world);
// Finalizes (waits for outstanding work, up to the communicator's timeout) and
// frees.
int xrt_nccl_comm_destroy(void* comm);
// Aborts outstanding work and frees, without waiting.
int xrt_nccl_comm_abort(void* comm);
// NCCL's async error state: kXrtNcclOk, or kXrtNcclRemoteError with the
// message.
int xrt_nccl_comm_check(void* comm);

// One collective, enqueued on `stream` (a CUstream / cudaStream_t; null =
// legacy default stream). dtype and redop are NCCL's enum values.
int xrt_nccl_collective(void* comm, int kind, const void* send, void* recv, size_t count, int dtype,
                        int redop, int peer, void* stream);
int xrt_nccl_group_start();
int xrt_nccl_group_end();

// *capturing = 1 while `stream` is being captured into a CUDA graph.
int xrt_nccl_stream_capturing(void* comm, void* stream, int* capturing);
// Records start (timing) events around work enqueued between begin and end on
// `stream`; returns a handle for query/wait.
int xrt_nccl_work_begin(void* comm, void* stream, void** work);
int xrt_nccl_work_end(void* work, void* stream);
// *done = 1 when the work finished (or the error when NCCL reports one).
int xrt_nccl_work_query(void* work, int* done);
// Blocks until done, polling NCCL's async error; aborts the communicator and
// returns kXrtNcclTimeout / kXrtNcclRemoteError instead of hanging. timeout_s
// <= 0: the communicator's own timeout.
int xrt_nccl_work_wait(void* work, double timeout_s);
// Makes `stream` wait for the work on the device (no host block).
int xrt_nccl_work_stream_wait(void* work, void* stream);
// Milliseconds between begin and end (after completion).
int xrt_nccl_work_elapsed_ms(void* work, float* ms);
int xrt_nccl_work_destroy(void* work);

}  // extern "C"
