// Many independent runs on worker threads: run(i) for i in 0..n-1, each
// result stored by the caller at index i, so the results are the same
// whatever the number of jobs. progress(done, failures) is serialized.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvweld::sim {

// run(i) returns true when run i failed.
template <class Run>
void run_indexed(std::size_t n, int jobs, Run&& run,
                 const std::function<void(std::size_t, std::size_t)>& progress) {
    std::atomic<std::size_t> next{0};
    std::mutex mutex;
    std::size_t done = 0, failures = 0;
    auto worker = [&] {
        for (std::size_t i; (i = next.fetch_add(1)) < n;) {
            const bool failed = run(i);
            const std::lock_guard lock(mutex);
            ++done;
            failures += failed ? 1 : 0;
            if (progress) progress(done, failures);
        }
    };
    std::vector<std::thread> threads;
    const int workers = std::max(1, std::min<int>(jobs, static_cast<int>(n)));
    for (int j = 0; j < workers; ++j) threads.emplace_back(worker);
    for (std::thread& t : threads) t.join();
}

}  // namespace kvweld::sim
