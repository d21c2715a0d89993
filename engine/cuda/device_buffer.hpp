// Owning device memory (cudaMalloc / cudaFree), movable, never copied.
#pragma once

#include "engine/cuda/cuda_check.hpp"

#include <cstddef>
#include <utility>

namespace kvweld::cuda {

template <class T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(std::size_t count) : count_(count) {
        if (count) KVWELD_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
    }
    ~DeviceBuffer() {
        if (ptr_) cudaFree(ptr_);  // never throws from a destructor
    }
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            if (ptr_) cudaFree(ptr_);
            ptr_ = std::exchange(o.ptr_, nullptr);
            count_ = std::exchange(o.count_, 0);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* get() const { return ptr_; }
    std::size_t size() const { return count_; }

    void upload(const T* host, std::size_t count, std::size_t offset = 0) {
        KVWELD_CUDA_CHECK(cudaMemcpy(ptr_ + offset, host, count * sizeof(T), cudaMemcpyHostToDevice));
    }
    void download(T* host, std::size_t count, std::size_t offset = 0) const {
        KVWELD_CUDA_CHECK(cudaMemcpy(host, ptr_ + offset, count * sizeof(T), cudaMemcpyDeviceToHost));
    }

private:
    T* ptr_ = nullptr;
    std::size_t count_ = 0;
};

}  // namespace kvweld::cuda
