// Owning device memory (cudaMalloc / cudaFree), movable, never copied.
// Every operation holds the process-wide device lock (cuda_check.hpp), and
// uploads wait until the data has landed.
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
        const auto lock = device_lock();
        if (count) KVWELD_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
    }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            release();
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
        copy_and_wait(ptr_ + offset, host, count * sizeof(T), cudaMemcpyHostToDevice);
    }
    void download(T* host, std::size_t count, std::size_t offset = 0) const {
        copy_and_wait(host, ptr_ + offset, count * sizeof(T), cudaMemcpyDeviceToHost);
    }
    // Device-to-device, from another buffer of at least `count` elements.
    void copy_from(const DeviceBuffer& src, std::size_t count) {
        copy_and_wait(ptr_, src.ptr_, count * sizeof(T), cudaMemcpyDeviceToDevice);
    }

private:
    void release() noexcept {
        if (!ptr_) return;
        const auto lock = device_lock();
        cudaFree(ptr_);  // never throws from a destructor
        ptr_ = nullptr;
    }

    T* ptr_ = nullptr;
    std::size_t count_ = 0;
};

}  // namespace kvweld::cuda
