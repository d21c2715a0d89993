// Every CUDA call is checked; a failure throws kvweld::Error naming the call.
#pragma once

#include "util/error.hpp"

#include <cuda_runtime_api.h>

#include <mutex>

namespace kvweld::cuda {

inline void check(cudaError_t err, const char* call) {
    if (err != cudaSuccess) [[unlikely]]
        throw Error(cat(call, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

// Names the call in the message: CUDA_CHECK(cudaMalloc(&p, n)).
#define KVWELD_CUDA_CHECK(call) ::kvweld::cuda::check((call), #call)

// All device work of the process is serialized by one lock (held by every
// DeviceBuffer operation and by CudaPlan's build, rebind, run and
// destruction). Why: `swarm --jobs N` runs seeds on N threads, and one of
// them may be capturing a graph while another calls cudaFree or a blocking
// copy; even with thread-local capture mode some drivers invalidate the
// capture then. Serializing costs nothing that matters here (the simulated
// models are tiny; kernels, not the host, bound a step) and makes every
// capture safe. Recursive: a plan's build allocates buffers.
std::unique_lock<std::recursive_mutex> device_lock();

// Copies that do not run on a plan's stream (uploads, clones) use the
// legacy default stream, which a plan's non-blocking stream does not wait
// for, and a pageable host-to-device cudaMemcpy may return before the data
// lands. So every such copy is followed by a device-wide synchronization:
// when it returns, the data is in place for any stream.
void copy_and_wait(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);

// Throws "CUDA backend unavailable: ..." when no usable device is present.
void require_device();
// True when a device is usable; `why` gets the reason when not.
bool device_available(std::string* why = nullptr);

}  // namespace kvweld::cuda
