// Built when nvcc was not found: the CUDA backend exists only as an error.
#include "engine/decode_session.hpp"
#include "util/error.hpp"

namespace kvweld {

std::unique_ptr<Plan> make_cuda_plan(const Model&, const KvCache&, const Adapters&) {
    throw Error("CUDA backend unavailable: this build has no CUDA support (nvcc was not found at configure time)");
}

std::unique_ptr<Plan> make_cuda_paged_plan(const Model&, const KvPool&, int, const Adapters&) {
    throw Error("CUDA backend unavailable: this build has no CUDA support (nvcc was not found at configure time)");
}

bool cuda_backend_available(std::string* why) {
    if (why) *why = "this build has no CUDA support (nvcc was not found at configure time)";
    return false;
}

}  // namespace kvweld
