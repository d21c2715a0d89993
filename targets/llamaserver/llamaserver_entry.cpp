// llama-server's row (targets/llamaserver/llamaserver_entry.hpp): the
// binary scripts/setup-llama builds beside each release's library.
#include "targets/llamaserver/llamaserver_entry.hpp"

#include "targets/llama_cache.hpp"

#include <filesystem>

#ifndef LLAMA_ARCH_MODEL_PATH
#define LLAMA_ARCH_MODEL_PATH ""
#endif
#ifndef LLAMA_ARCH_MODEL_MISSING
#define LLAMA_ARCH_MODEL_MISSING "a server over HTTP, not a plugin"
#endif

namespace kvweld::targets {

namespace {

std::string cached_server(const std::string& release, std::string* why) {
    const std::filesystem::path binary = llama_install(release) / "bin" / "llama-server";
    if (std::filesystem::exists(binary)) return binary.string();
    if (why)
        *why = cat("no llama-server at ", binary.string(), " (scripts/setup-llama",
                   release.empty() ? "" : cat(release.ends_with("+fixes") ? " --fixes" : " --version ",
                                              release.ends_with("+fixes") ? "" : release),
                   " builds it there; --server PATH runs another)");
    return "";
}

}  // namespace

const EngineEntry kLlamaServerEntry{
    .name = "llama-server",
    .missing = LLAMA_ARCH_MODEL_MISSING,
    .server_binary = cached_server,
    .arch_model_writer = LLAMA_ARCH_MODEL_PATH,
};

}  // namespace kvweld::targets
