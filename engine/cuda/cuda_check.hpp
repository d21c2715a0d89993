// Every CUDA call is checked; a failure throws kvweld::Error naming the call.
#pragma once

#include "engine/error.hpp"

#include <cuda_runtime_api.h>

namespace kvweld::cuda {

inline void check(cudaError_t err, const char* call) {
    if (err != cudaSuccess) [[unlikely]]
        throw Error(cat(call, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

// Names the call in the message: CUDA_CHECK(cudaMalloc(&p, n)).
#define KVWELD_CUDA_CHECK(call) ::kvweld::cuda::check((call), #call)

// Throws "CUDA backend unavailable: ..." when no usable device is present.
void require_device();
// True when a device is usable; `why` gets the reason when not.
bool device_available(std::string* why = nullptr);

}  // namespace kvweld::cuda
