// Version 16 of the engine ABI: the fault switches and params a run names,
// as options.given entries for a plugin's create_v16, and as the text a
// plugin before 16 reads (create). Both sides use it: the host (PluginEngine,
// PluginRule) and the isolated engine's host process, which gets the
// entries over the wire.
#pragma once

#include "kvweld/engine_abi.h"

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvweld::targets {

class GivenSettings {
public:
    GivenSettings() = default;
    // From the text a user gives ("a,b" and "k=v,k2=v2"); a params item
    // without '=' throws Error naming it.
    static GivenSettings from_text(const char* faults, const char* params);
    // The strings live in a deque, so the entries' pointers survive a move
    // (never a copy: a copy's entries would point into the original).
    GivenSettings(GivenSettings&&) = default;
    GivenSettings& operator=(GivenSettings&&) = default;
    GivenSettings(const GivenSettings&) = delete;
    GivenSettings& operator=(const GivenSettings&) = delete;

    // kind KVWELD_SETTING_PARAM with a value, or KVWELD_SETTING_FAULT without.
    void add(std::int32_t kind, const std::string& name, const std::optional<std::string>& value);
    std::span<const kvweld_given> entries() const { return given_; }
    // `base` (its model, sizes and threads) with these settings in the form
    // the plugin takes: as given (create_v16) or as the text (create).
    kvweld_engine_options options_for(const kvweld_engine_options& base, bool v16) const;

private:
    std::deque<std::string> strings_;
    std::vector<kvweld_given> given_;
    std::string faults_text_, params_text_;
};

// The plugin's create_v16 where it has one, else its create.
int create_engine(const kvweld_engine_api& api, const kvweld_engine_options& base, const GivenSettings& settings,
                  kvweld_engine** out, char* err, std::size_t err_len);

}  // namespace kvweld::targets
