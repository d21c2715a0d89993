// llama-server in the registry ("llama-server", and "llama-server@R" for
// release R's build in the cache, b11434+fixes among them): a server kvweld
// drives request by request over HTTP (sim/server/), not a plugin.
#pragma once

#include "targets/engine_entry.hpp"

namespace kvweld::targets {

extern const EngineEntry kLlamaServerEntry;

}  // namespace kvweld::targets
