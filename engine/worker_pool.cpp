#include "engine/worker_pool.hpp"

#include "util/error.hpp"

namespace kvweld {

namespace {

constexpr int kSpins = 1 << 14;      // a worker: about tens of microseconds before sleeping
constexpr int kYieldAfter = 1 << 8;  // the caller: about a microsecond before yielding

void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

}  // namespace

WorkerPool::WorkerPool(int threads) {
    require(threads >= 1 && threads <= 256, "threads = ", threads, ": must be in 1..256");
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

WorkerPool::~WorkerPool() {
    {
        const std::lock_guard lock(mutex_);
        stop_ = true;
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
}

void WorkerPool::run(const std::function<void(int)>& fn) {
    if (workers_.empty()) return fn(0);
    job_ = &fn;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    {
        // Under the lock so that a worker about to sleep cannot miss it.
        const std::lock_guard lock(mutex_);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    fn(0);
    // Spin briefly, then yield: with more runnable threads than cores (CI's
    // 2 cores running two swarms of two jobs, each with a 2-thread plan) a
    // worker may not be scheduled for a whole time slice, which the caller
    // would otherwise spend spinning (two such swarms side by side took 30 s
    // against 4.8 s for one).
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0;)
        if (spins++ < kYieldAfter) relax();
        else std::this_thread::yield();
}

void WorkerPool::work(int index) {
    std::uint64_t seen = 0;
    for (;;) {
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == seen && spins++ < kSpins) relax();
        if (generation_.load(std::memory_order_acquire) == seen) {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        }
        seen = generation_.load(std::memory_order_acquire);
        if (stop_.load()) return;
        (*job_)(index);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

}  // namespace kvweld
