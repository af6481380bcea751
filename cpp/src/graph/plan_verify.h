// Integrity of saved plans (DESIGN.md §5, issue 19): the container digests and
// the checks a loader runs on a deserialized plan before any kernel is bound or
// any byte of the arena is touched. A plan file is input from outside: nothing
// in it is trusted until it has been re-derived from the plan itself (ids,
// kinds, shapes, sizes, arena offsets and alignment, lifetimes, views, constant
// references, each step's output shapes through the op schemas) or checked
// against this process (the provider's environment; kernels, in prepare.cpp).
// Internal to graph/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "xpuruntime/graph/plan.h"
#include "xpuruntime/provider.h"

namespace xpuruntime::graph {

// Container "XRTPLAN3" (plan.h): magic, header length, header digest, blob digest.
// "XRTPLAN2" files (one SHA-256 over the whole blob) are still read.
inline constexpr char kPlanMagic[8] = {'X', 'R', 'T', 'P', 'L', 'A', 'N', '3'};
inline constexpr char kPlanContainerV2 = '2';
// XRTPLAN3 digests the blob in chunks of this size, hashed in parallel.
inline constexpr std::size_t kPlanBlobChunkBytes = std::size_t{4} << 20;
inline constexpr std::size_t kPlanDigestBytes = 64;  // SHA-256 as lower-case hex
inline constexpr std::size_t kPlanPrefixBytes = 16 + 2 * kPlanDigestBytes;

// Where the constants blob starts for a JSON header of `header_bytes` bytes (the
// prefix plus the header, rounded up to 64 bytes). The caller bounds header_bytes
// by the file size first.
std::size_t plan_blob_offset(uint64_t header_bytes);

struct PlanDigests {
  std::string header;  // SHA-256 of bytes [0, 16) followed by [kPlanPrefixBytes, blob)
  // XRTPLAN3: SHA-256 of the concatenated hex SHA-256 digests of the blob's
  // kPlanBlobChunkBytes chunks (the last one shorter); XRTPLAN2: SHA-256 of [blob, end).
  std::string blob;
};
// The digests of a plan file whose header length fits the file (the caller checks),
// by the container version in its magic (byte 7). The chunks are hashed on up to
// `threads` threads (0: one per hardware thread, at most 32).
PlanDigests plan_digests(std::string_view file, uint64_t header_bytes, unsigned threads = 0);

// Runs fn(i) for i in [0, n) on up to `threads` threads (0: one per hardware thread,
// at most 32); the first exception is rethrown after all have finished.
void parallel_chunks(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn);

// Writes the digests of `file`'s current contents into its digest fields. The
// saver seals every file; tests and the plan-loader fuzzer seal crafted damage so
// that it reaches the structural checks instead of stopping at the checksum. A
// buffer too short or with a header length past its end is left as it is.
void seal_plan_bytes(std::string& file);

// Checks a deserialized plan against itself; throws InvalidModelError naming the
// first inconsistency (which value or step, which field, what was expected) and
// saying to recompile and re-save the plan. After it passes, every value id in the
// plan indexes `values`, every static intermediate lies inside the arena at a
// 64-byte aligned offset without overlapping a buffer alive at the same time,
// every view shares a root buffer of at least its size, every value is written
// once before it is read, dynamic buffers are freed after their last reader, and
// each step's recorded output dtypes and static shapes are what its op's schema
// infers from its inputs.
void verify_plan_structure(const ExecutionPlan& plan);

// Refuses (InvalidModelError) a plan whose recorded environment differs from the
// loading provider's, naming the first differing field with both values.
void verify_plan_environment(const PlanHeader& header, const ExecutionProvider& provider);

}  // namespace xpuruntime::graph
