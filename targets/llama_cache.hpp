// scripts/setup-llama's cache of llama.cpp builds ($KVWELD_CACHE, else
// ~/.cache/kvweld): "llama.cpp" the pinned release's, "llama.cpp-R" release
// R's (R: b11434, b11434+fixes, 0.3.36, ...), each with its install/.
#pragma once

#include <filesystem>
#include <string>

namespace kvweld::targets {

std::filesystem::path llama_cache_root();
// The install folder of release R's build ("": the pinned release's).
std::filesystem::path llama_install(const std::string& release);

}  // namespace kvweld::targets
