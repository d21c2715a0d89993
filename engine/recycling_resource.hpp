// A memory resource that recycles addresses on purpose: a freed block goes
// straight back to the next request of the same size and alignment. The
// weight_pointer_key fault needs a reloaded model to land at its
// predecessor's address, and general-purpose allocators (or a sanitizer's
// quarantine) do not promise that. Not thread-safe: one per simulation.
#pragma once

#include <boost/container/pmr/global_resource.hpp>
#include <boost/container/pmr/memory_resource.hpp>

#include <map>
#include <utility>

namespace kvweld {

class RecyclingResource final : public boost::container::pmr::memory_resource {
public:
    RecyclingResource() = default;
    RecyclingResource(const RecyclingResource&) = delete;
    RecyclingResource& operator=(const RecyclingResource&) = delete;
    ~RecyclingResource() override {
        for (const auto& [shape, p] : free_) upstream_->deallocate(p, shape.first, shape.second);
    }

private:
    using Shape = std::pair<std::size_t, std::size_t>;  // bytes, alignment

    void* do_allocate(std::size_t bytes, std::size_t alignment) override {
        const auto it = free_.find({bytes, alignment});
        if (it == free_.end()) return upstream_->allocate(bytes, alignment);
        void* p = it->second;
        free_.erase(it);
        return p;
    }
    void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
        free_.emplace(Shape{bytes, alignment}, p);
    }
    bool do_is_equal(const memory_resource& other) const noexcept override { return this == &other; }

    boost::container::pmr::memory_resource* upstream_ = boost::container::pmr::new_delete_resource();
    std::multimap<Shape, void*> free_;
};

}  // namespace kvweld
