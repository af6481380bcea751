// The DLPack ABI: the structs exchanged through `__dlpack__` capsules (v1.1) and the
// C exchange API table (`__dlpack_c_exchange_api__`, v1.3 headers) that lets two libraries
// trade tensors through function pointers instead of Python calls.
// Declared here from the published specification so the core needs no external
// header; layouts must match the spec exactly (checked by static_asserts below).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

enum DLDeviceType : int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLCUDAManaged = 13,
};

struct DLDevice {
  DLDeviceType device_type;
  int32_t device_id;
};

enum DLDataTypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLBfloat = 4,
  kDLBool = 6,
  kDLFloat8_e4m3fn = 10,
  kDLFloat8_e5m2 = 12,
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; may be NULL (compact row-major) in legacy producers
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

// ---- The C exchange API (DLPack >= 1.2) ----
// (An early draft published the table as an integer attribute `__c_dlpack_exchange_api__`;
// we speak the capsule form of the current headers, the one torch 2.15 publishes.)
// A producer publishes one process-lifetime table on its tensor *type* as the
// attribute `__dlpack_c_exchange_api__`: a PyCapsule named "dlpack_exchange_api"
// holding a DLPackExchangeAPI*. Every entry is a C function: it never throws; on
// failure it returns -1 (nonzero) with a Python exception set. None of them orders
// streams: a consumer asks `current_work_stream` and orders the work itself.

// Allocates a new producer tensor like `prototype` (dtype, ndim, shape, device are
// read). On failure calls set_error(error_ctx, kind, message) and returns -1.
typedef int (*DLPackManagedTensorAllocator)(DLTensor* prototype, DLManagedTensorVersioned** out,
                                            void* error_ctx,
                                            void (*set_error)(void* error_ctx, const char* kind,
                                                              const char* message));
// Exports `py_object` (a PyObject* of the table's type) as an owning versioned tensor.
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void* py_object, DLManagedTensorVersioned** out);
// Imports an owning versioned tensor as a new Python object of the producer's type;
// takes ownership of `tensor` whether it succeeds or not.
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned* tensor, void** out_py_object);
// Fills a caller-provided DLTensor that borrows `py_object`'s shape/strides/data;
// valid only until control returns to Python. May be NULL in a table.
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void* py_object, DLTensor* out);
// The producer's current work stream of a device (e.g. torch.cuda.current_stream);
// NULL for the CPU or a legacy default stream.
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id,
                                       void** out_current_stream);

// The part every version keeps: the table's version, and an optional older table
// (NULL when the producer offers only this one) for consumers of an older major.
struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  DLPackExchangeAPIHeader* prev_api;
};

struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;                      // required
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;  // required
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;      // required
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;             // optional
  DLPackCurrentWorkStream current_work_stream;                                // required
};

}  // extern "C"

inline constexpr uint32_t kDLPackMajor = 1;
inline constexpr uint32_t kDLPackMinor = 1;
inline constexpr uint64_t kDLPackFlagReadOnly = 1ULL << 0;
inline constexpr uint64_t kDLPackFlagIsCopied = 1ULL << 1;
// The exchange API table version we publish (the header version of the capsule form).
inline constexpr uint32_t kDLPackExchangeMinor = 3;
inline constexpr const char* kDLPackExchangeAttr = "__dlpack_c_exchange_api__";
inline constexpr const char* kDLPackExchangeCapsuleName = "dlpack_exchange_api";

static_assert(sizeof(DLDevice) == 8, "DLDevice layout");
static_assert(sizeof(DLDataType) == 4, "DLDataType layout");
static_assert(sizeof(DLTensor) == 48, "DLTensor layout");
static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32, "DLManagedTensorVersioned layout");
static_assert(sizeof(DLPackExchangeAPIHeader) == 16, "DLPackExchangeAPIHeader layout");
static_assert(offsetof(DLPackExchangeAPI, managed_tensor_allocator) == 16, "DLPackExchangeAPI layout");
static_assert(offsetof(DLPackExchangeAPI, current_work_stream) == 48, "DLPackExchangeAPI layout");
