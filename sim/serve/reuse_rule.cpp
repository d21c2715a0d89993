#include "sim/serve/reuse_rule.hpp"

#include "engine/cat.hpp"

namespace kvweld::sim {

std::unique_ptr<ReuseRule> reuse_rule_for(std::string_view engine_name, const ServeConfig& config,
                                          std::string& why_not) {
    if (engine_name == "kvweld") return kvweld_reuse_rule();
    if (engine_name == "kvweld-paged") return kvweld_paged_reuse_rule(config);
    if (engine_name == "llamacpp") return llamacpp_reuse_rule(config);
    why_not = cat("no reuse rule for engine '", engine_name, "' (sim/serve/reuse_rule.hpp)");
    return nullptr;
}

}  // namespace kvweld::sim
