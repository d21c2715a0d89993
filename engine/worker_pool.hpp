// A plan's own worker threads: created when the plan is built, joined when
// it is destroyed; no thread is created per token. run(fn) calls fn(i) for
// every i in [0, size()), i = 0 on the caller's thread, and returns when all
// are done. Workers spin briefly for the next job (a decode step issues a
// few dozen of them back to back), then sleep; the caller, waiting for them
// to finish, spins more briefly still, then yields its core.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvweld {

class WorkerPool {
public:
    explicit WorkerPool(int threads);  // threads >= 1, the caller included
    ~WorkerPool();
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }
    void run(const std::function<void(int)>& fn);

private:
    void work(int index);

    std::vector<std::thread> workers_;
    const std::function<void(int)>* job_ = nullptr;
    std::atomic<std::uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::condition_variable wake_;
};

}  // namespace kvweld
