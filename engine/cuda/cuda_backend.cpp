// The CUDA backend's entry points: device detection and plan construction.
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_plan.hpp"

namespace kvweld {

namespace cuda {

bool device_available(std::string* why) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        cudaGetLastError();  // clear the sticky error
        if (why) *why = cat("cudaGetDeviceCount: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
        return false;
    }
    if (count == 0) {
        if (why) *why = "no CUDA device found";
        return false;
    }
    return true;
}

std::unique_lock<std::recursive_mutex> device_lock() {
    static std::recursive_mutex mutex;
    return std::unique_lock(mutex);
}

void copy_and_wait(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    const auto lock = device_lock();
    KVWELD_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
    KVWELD_CUDA_CHECK(cudaDeviceSynchronize());
}

void require_device() {
    std::string why;
    if (!device_available(&why)) throw Error(cat("CUDA backend unavailable: ", why));
}

}  // namespace cuda

std::unique_ptr<Plan> make_cuda_plan(const Model& model, const KvCache& cache, const Adapters& adapters) {
    return std::make_unique<cuda::CudaPlan>(model, cache, cuda::CudaPlan::Mode::graph, adapters);
}

std::unique_ptr<Plan> make_cuda_paged_plan(const Model& model, const KvPool& pool, int position,
                                           const Adapters& adapters) {
    return std::make_unique<cuda::CudaPlan>(model, pool, position, cuda::CudaPlan::Mode::graph, adapters);
}

bool cuda_backend_available(std::string* why) { return cuda::device_available(why); }

}  // namespace kvweld
