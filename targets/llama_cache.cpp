#include "targets/llama_cache.hpp"

#include <cstdlib>

namespace kvweld::targets {

std::filesystem::path llama_cache_root() {
    const char* cache = std::getenv("KVWELD_CACHE");
    const char* home = std::getenv("HOME");
    return cache && *cache ? std::filesystem::path(cache) : std::filesystem::path(home ? home : ".") / ".cache" / "kvweld";
}

std::filesystem::path llama_install(const std::string& release) {
    return llama_cache_root() / (release.empty() ? "llama.cpp" : "llama.cpp-" + release) / "install";
}

}  // namespace kvweld::targets
