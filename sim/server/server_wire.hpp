// llama-server's wire format as kvweld speaks it: the /completion request
// body for a Completion, and its answer (whole, or as server-sent events,
// maybe cut) parsed into ServerAnswers.
#pragma once

#include "sim/server/server_exchange.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace kvweld::sim::server {

// The request body kvweld sends for `c` (cache_prompt on, n_probs 4).
nlohmann::json completion_body(const Completion& c);
// One /completion answer's body (streamed: its server-sent events) parsed;
// throws Error naming what is missing.
std::vector<ServerAnswer> parse_completion(const std::string& body, bool stream);

}  // namespace kvweld::sim::server
