// For plugins written in C++: the ABI's comma-separated lists (the faults
// option, fault_names) and key=value settings (the params option), parsed
// with errors that name the offending text.
#pragma once

#include "kvweld/engine_abi.h"

#include <deque>
#include <map>
#include <stdexcept>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvweld::abi {

// "a,b,,c" -> {"a", "b", "c"}; NULL or "" -> {}.
inline std::vector<std::string> split_list(const char* text) {
    std::vector<std::string> out;
    std::string_view rest = text ? text : "";
    while (!rest.empty()) {
        const auto comma = rest.find(',');
        if (const std::string_view item = rest.substr(0, comma); !item.empty()) out.emplace_back(item);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    return out;
}

// One entry of api.fault_names: "name", or from ABI version 4
// "name:class|class" (the failure classes the fault may show as).
struct ListedFault {
    std::string name;
    std::string classes;  // "" when the entry declares none
};

inline std::vector<ListedFault> split_fault_list(const char* text) {
    std::vector<ListedFault> out;
    for (const std::string& item : split_list(text)) {
        const auto colon = item.find(':');
        out.push_back({item.substr(0, colon), colon == std::string::npos ? "" : item.substr(colon + 1)});
    }
    return out;
}

// One entry of api.live_settings (ABI 9): "key:v1|v2", a setting a server
// changes between decodes and the values a swarm may draw for it.
struct LiveSetting {
    std::string key;
    std::vector<std::string> values;
};

inline std::vector<LiveSetting> split_live_list(const char* text) {
    std::vector<LiveSetting> out;
    for (const ListedFault& item : split_fault_list(text)) {
        LiveSetting s{item.name, {}};
        for (std::size_t at = 0; at <= item.classes.size();) {
            const auto bar = item.classes.find('|', at);
            const std::string value = item.classes.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
            if (!value.empty()) s.values.push_back(value);
            at = bar == std::string::npos ? item.classes.size() + 1 : bar + 1;
        }
        out.push_back(std::move(s));
    }
    return out;
}

// Whether a live list ("k:v|v,...") has `key` at `value` (a plugin's
// takes_live, ABI 16, from the list its engine keeps).
inline bool lists_live(const char* text, const char* key, const char* value) {
    for (const LiveSetting& s : split_live_list(text))
        if (key && value && s.key == key)
            for (const std::string& v : s.values)
                if (v == value) return true;
    return false;
}

// Version 16, for C++ plugins: options.given read back. An entry of
// another kind, without a name, a fault with a value, a param without one
// or given twice throws naming it (the host checks them against the
// plugin's settings first, so these are a broken host's).
struct Given {
    std::vector<std::string> faults;
    std::map<std::string, std::string> params;
    // "k=v,..." for an engine that keeps its settings as that text.
    std::string params_text() const {
        std::string out;
        for (const auto& [k, v] : params) out += (out.empty() ? "" : ",") + k + "=" + v;
        return out;
    }
};
inline Given read_given(const kvweld_engine_options* o) {
    Given out;
    if (o->n_given < 0 || (o->n_given > 0 && !o->given))
        throw std::runtime_error("options.given: " + std::to_string(o->n_given) + " entries" +
                                 (o->given ? "" : " and no array"));
    for (int32_t i = 0; i < o->n_given; ++i) {
        const kvweld_given& g = o->given[i];
        const std::string at = "options.given[" + std::to_string(i) + "]";
        if (!g.name) throw std::runtime_error(at + ": no name");
        if (g.kind == KVWELD_SETTING_FAULT && !g.value) {
            out.faults.emplace_back(g.name);
        } else if (g.kind == KVWELD_SETTING_PARAM && g.value) {
            if (!out.params.emplace(g.name, g.value).second)
                throw std::runtime_error(at + ": param " + g.name + " given twice");
        } else {
            throw std::runtime_error(at + " (" + g.name + "): kind " + std::to_string(g.kind) +
                                     (g.value ? " with a value" : " without a value") +
                                     ": expected a param with one or a fault without");
        }
    }
    return out;
}

// The live setting every engine of this repository lists (ABI 9): a thread
// count between decodes, 1 or 2 (more spin on CI's 2 cores, see the
// llama.cpp plugin), and its value checked: a whole number in 1..256,
// anything else throws naming it.
#define KVWELD_THREADS_SETTING "n_threads:1|2"
inline constexpr const char* kThreadsSetting = KVWELD_THREADS_SETTING;
// ABI 10: the live setting an engine with KVWELD_CAP_EMBEDDINGS lists, and
// its value checked (0 or 1, else it throws naming it).
inline constexpr const char* kEmbeddingsKey = "embeddings";
inline constexpr const char* kThreadsAndEmbeddings = KVWELD_THREADS_SETTING ",embeddings:0|1";
// A 0|1 live setting's value (else it throws naming the key and value).
inline bool flag_value(const char* key, const char* value) {
    const std::string v = value ? value : "";
    if (v != "0" && v != "1") throw std::runtime_error(std::string("set_live: ") + key + " = '" + v + "': must be 0 or 1");
    return v == "1";
}
inline bool embeddings_value(const char* value) { return flag_value(kEmbeddingsKey, value); }
// Causal attention on (1, every engine's start) or off: llama.h's
// llama_set_causal_attn. Off, each sequence's tokens of a call attend to
// one another whole (engine/reference.hpp's reference_forward_span).
inline constexpr const char* kCausalKey = "causal_attn";
inline constexpr const char* kThreadsEmbeddingsCausal = KVWELD_THREADS_SETTING ",embeddings:0|1,causal_attn:0|1";
// How an engine's embeddings of an output row are made (a setting of the
// engine's, fixed for its life): the row's own hidden state after the
// final norm (none), or its sequence's tokens of the call pooled, their
// mean or the last one's (llama.h's LLAMA_POOLING_TYPE_MEAN, _LAST; an
// engine maps these names to its own). Index = the enum.
enum class Pooling { none, mean, last };
inline constexpr const char* kPoolingNames[] = {"none", "mean", "last"};
// The pooling a setting's value names; anything else throws naming it.
inline Pooling pooling_value(const std::string& value) {
    for (int i = 0; i < 3; ++i)
        if (value == kPoolingNames[i]) return Pooling(i);
    throw std::runtime_error("setting pooling=" + value + ": must be none, mean or last");
}
// The setting pooling=none|mean|last (none where not given).
inline Pooling pooling_param(const std::map<std::string, std::string>& params) {
    const auto it = params.find("pooling");
    return it == params.end() ? Pooling::none : pooling_value(it->second);
}
// `listed`: the engine's whole list, for the error naming a key not in it.
inline int threads_value(const char* key, const char* value, const char* listed = kThreadsSetting) {
    if (!key || std::string_view(key) != "n_threads")
        throw std::runtime_error(std::string("set_live: no live setting '") + (key ? key : "(null)") + "' (" +
                                 listed + ")");
    const std::string text = value ? value : "";
    std::size_t used = 0;
    long n = 0;
    try {
        n = std::stol(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || n < 1 || n > 256)
        throw std::runtime_error("set_live: n_threads = '" + text + "': must be a whole number in 1..256");
    return int(n);
}

// Whether `name` is one of the list's faults.
inline bool lists_fault(const char* text, const std::string& name) {
    for (const ListedFault& f : split_fault_list(text))
        if (f.name == name) return true;
    return false;
}

// "k=v,k2=v2" with every key in `known`; anything else throws naming it.
inline std::map<std::string, std::string> parse_params(const char* text, const std::vector<std::string>& known) {
    std::map<std::string, std::string> out;
    for (const std::string& item : split_list(text)) {
        const auto eq = item.find('=');
        const std::string key = item.substr(0, eq);
        bool is_known = false;
        for (const std::string& k : known) is_known = is_known || k == key;
        if (eq == std::string::npos || !is_known) {
            std::string names;
            for (const std::string& k : known) names.append(names.empty() ? "" : ", ").append(k);
            throw std::runtime_error("setting '" + item + "': expected key=value with a key among: " +
                                     (names.empty() ? "(none: this engine has no settings)" : names));
        }
        out[key] = item.substr(eq + 1);
    }
    return out;
}

// set_loras' arguments (ABI 5), checked: 0..64 adapters, every path given
// and named once; anything else throws naming it.
inline std::vector<std::string> lora_paths(const char* const* paths, const float* scales, int32_t n) {
    if (n < 0 || n > 64) throw std::runtime_error("set_loras: " + std::to_string(n) + " adapters (0..64)");
    if (n > 0 && (!paths || !scales))
        throw std::runtime_error("set_loras: " + std::to_string(n) + " adapters and no paths or scales");
    std::vector<std::string> out;
    for (int32_t i = 0; i < n; ++i) {
        if (!paths[i]) throw std::runtime_error("set_loras: adapter " + std::to_string(i) + " has no path");
        for (const std::string& p : out)
            if (p == paths[i]) throw std::runtime_error("set_loras: adapter " + std::to_string(i) + " is named twice");
        out.emplace_back(paths[i]);
    }
    return out;
}

// An integer setting in lo..hi; anything else throws naming the key and the value.
// `params` ("k=v,...") with `key` set to `value`: any earlier value of it
// taken out, the new one last.
inline std::string with_param(const std::string& params, const std::string& key, const std::string& value) {
    std::string out;
    for (const std::string& item : split_list(params.c_str()))
        if (item.rfind(key + "=", 0) != 0) out += (out.empty() ? "" : ",") + item;
    return out + (out.empty() ? "" : ",") + key + "=" + value;
}

inline int int_param(const std::map<std::string, std::string>& params, const std::string& key, int fallback, int lo,
                     int hi) {
    const auto it = params.find(key);
    if (it == params.end()) return fallback;
    std::size_t used = 0;
    long v = 0;
    try {
        v = std::stol(it->second, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != it->second.size() || v < lo || v > hi)
        throw std::runtime_error("setting " + key + "=" + it->second + ": must be an integer in " +
                                 std::to_string(lo) + ".." + std::to_string(hi));
    return int(v);
}

// A 0/1 setting; anything else throws naming the key and the value.
inline bool flag_param(const std::map<std::string, std::string>& params, const std::string& key, bool fallback) {
    const auto it = params.find(key);
    if (it == params.end()) return fallback;
    if (it->second != "0" && it->second != "1")
        throw std::runtime_error("setting " + key + "=" + it->second + ": must be 0 or 1");
    return it->second == "1";
}

// Version 15, for C++ plugins: the settings table (kvweld_setting rows) a
// plugin's table points at, built from the lists it keeps; its strings are
// owned here. Movable (a deque keeps its elements where they are), never
// copied.
class SettingsTable {
public:
    SettingsTable() = default;
    SettingsTable(SettingsTable&&) = default;
    SettingsTable(const SettingsTable&) = delete;
    SettingsTable& operator=(const SettingsTable&) = delete;

    SettingsTable& add(int32_t kind, const std::string& name, const std::vector<std::string>& values,
                       const char* doc = nullptr) {
        std::vector<const char*>& v = values_.emplace_back();
        for (const std::string& value : values) v.push_back(strings_.emplace_back(value).c_str());
        v.push_back(nullptr);
        rows_.push_back({kind, strings_.emplace_back(name).c_str(), values.empty() ? nullptr : v.data(),
                         doc ? strings_.emplace_back(doc).c_str() : nullptr});
        return *this;
    }
    // Each entry of a text list ("name:v1|v2,...", fault_names' and
    // live_settings' form) as a setting of `kind`.
    SettingsTable& add_list(int32_t kind, const char* text) {
        for (const LiveSetting& s : split_live_list(text)) add(kind, s.key, s.values);
        return *this;
    }
    const kvweld_setting* data() const { return rows_.data(); }
    int32_t size() const { return int32_t(rows_.size()); }

private:
    std::deque<std::string> strings_;
    std::deque<std::vector<const char*>> values_;
    std::vector<kvweld_setting> rows_;
};

}  // namespace kvweld::abi
