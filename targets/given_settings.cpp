#include "targets/given_settings.hpp"

#include "targets/abi_lists.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

namespace kvweld::targets {

GivenSettings GivenSettings::from_text(const char* faults, const char* params) {
    GivenSettings out;
    for (const std::string& name : abi::split_list(faults)) out.add(KVWELD_SETTING_FAULT, name, std::nullopt);
    for (const std::string& item : abi::split_list(params)) {
        const auto eq = item.find('=');
        require(eq != std::string::npos && eq > 0, "setting '", item, "': expected key=value");
        out.add(KVWELD_SETTING_PARAM, item.substr(0, eq), item.substr(eq + 1));
    }
    return out;
}

void GivenSettings::add(std::int32_t kind, const std::string& name, const std::optional<std::string>& value) {
    const char* n = strings_.emplace_back(name).c_str();
    const char* v = value ? strings_.emplace_back(*value).c_str() : nullptr;
    given_.push_back(kvweld_given{kind, n, v});
    std::string& text = kind == KVWELD_SETTING_FAULT ? faults_text_ : params_text_;
    text += cat(text.empty() ? "" : ",", name, value ? "=" : "", value.value_or(""));
}

kvweld_engine_options GivenSettings::options_for(const kvweld_engine_options& base, bool v16) const {
    kvweld_engine_options o = base;
    o.faults = v16 ? nullptr : faults_text_.c_str();
    o.params = v16 ? nullptr : params_text_.c_str();
    o.given = v16 && !given_.empty() ? given_.data() : nullptr;
    o.n_given = v16 ? std::int32_t(given_.size()) : 0;
    return o;
}

int create_engine(const kvweld_engine_api& api, const kvweld_engine_options& base, const GivenSettings& settings,
                  kvweld_engine** out, char* err, std::size_t err_len) {
    const kvweld_engine_options o = settings.options_for(base, api.create_v16 != nullptr);
    return api.create_v16 ? api.create_v16(&o, out, err, err_len) : api.create(&o, out, err, err_len);
}

}  // namespace kvweld::targets
