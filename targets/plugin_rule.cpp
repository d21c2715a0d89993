#include "targets/plugin_rule.hpp"

#include "targets/given_settings.hpp"
#include "targets/plugin_host.hpp"
#include "targets/registry.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"
#include "util/overloaded.hpp"

#include <array>

namespace kvweld::targets {

namespace {

constexpr std::size_t kRuleErrLen = 512;

// A call of `kind` with the fields its kind uses, the rest 0.
kvweld_call c_call(std::int32_t kind, int seq = 0, int a = 0, int b = 0, int c = 0) {
    kvweld_call out{};
    out.kind = kind;
    out.seq = seq, out.a = a, out.b = b, out.c = c;
    return out;
}
kvweld_call adapters_call(const Adapters* before, const Adapters* after) {
    kvweld_call out = c_call(KVWELD_CALL_ADAPTERS);
    out.before = before->set_id().get(), out.after = after->set_id().get();
    return out;
}

// A memory call as the plugin's rule hears it. White-box calls are never
// made of a plugin.
kvweld_call to_c(const MemoryCall& call) {
    return std::visit(
        Overloaded{
            [](const calls::Open& c) { return c_call(KVWELD_CALL_OPEN, c.seq); },
            [](const calls::Close& c) { return c_call(KVWELD_CALL_CLOSE, c.seq); },
            [](const calls::Truncate& c) { return c_call(KVWELD_CALL_TRUNCATE, c.seq, c.n, c.drafts); },
            [](const calls::Clear& c) { return c_call(KVWELD_CALL_CLEAR, c.seq); },
            [](const calls::Copy& c) { return c_call(KVWELD_CALL_COPY, c.src, c.dst, c.opened); },
            [](const calls::ClearAll&) { return c_call(KVWELD_CALL_CLEAR_ALL); },
            [](const calls::Reload&) { return c_call(KVWELD_CALL_RELOAD); },
            [](const calls::SwapLayer& c) { return c_call(KVWELD_CALL_SWAP_LAYER, c.seq, c.layer); },
            [](const calls::PoolOp& c) { return c_call(KVWELD_CALL_POOL_OP, 0, c.op); },
            [](const calls::SetLoras& c) { return adapters_call(c.before, c.after); },
            [](const calls::SetCvec& c) { return adapters_call(c.before, c.after); },
            [](const calls::SetWarmup& c) { return adapters_call(c.before, c.after); },
            [](const calls::Shift& c) { return c_call(KVWELD_CALL_SHIFT, c.seq, c.p0, c.p1, c.len); },
            [](const calls::Save& c) { return c_call(KVWELD_CALL_SAVE, c.seq, c.id); },
            [](const calls::Load& c) { return c_call(KVWELD_CALL_LOAD, c.seq, c.len, c.id); },
            [](const calls::LoadRefused& c) { return c_call(KVWELD_CALL_LOAD_REFUSED, c.seq); },
            [](const calls::SetLive& c) {
                kvweld_call out = c_call(KVWELD_CALL_LIVE);
                out.key = c.key.c_str(), out.value = c.value.c_str();
                return out;
            },
            [](const calls::SetSampler& c) {
                return c_call(KVWELD_CALL_SAMPLER, c.seq, c.spec.has_value(), c.in_place);
            },
            [](const calls::Keep& c) {
                kvweld_call out = c_call(KVWELD_CALL_KEEP, c.seq);
                out.list = c.emptied.data(), out.n_list = std::int32_t(c.emptied.size());
                return out;
            },
            [](const calls::OpenSized&) -> kvweld_call { throw Error("a white-box open reached a plugin's rule"); },
            [](const calls::Migrate&) -> kvweld_call { throw Error("a white-box migrate reached a plugin's rule"); },
        },
        call);
}

class PluginRule final : public ReuseRule {
public:
    PluginRule(std::shared_ptr<const PluginLibrary> library, const EngineSetup& setup) : library_(std::move(library)) {
        // The options as the plugin's create takes them (ABI 16: its settings as data).
        const GivenSettings settings = GivenSettings::from_text("", setup.params.c_str());
        const kvweld_engine_options options = settings.options_for(
            kvweld_engine_options{"", setup.n_ctx, setup.seqs, setup.threads, nullptr, nullptr, nullptr, 0}, api().create_v16 != nullptr);
        check("rule_create", [&](char* e, std::size_t n) { return api().rule_create(&options, &rule_, e, n); });
        require(rule_ != nullptr, "engine ", api().name, ": rule_create made no rule");
    }
    ~PluginRule() override { api().rule_destroy(rule_); }
    PluginRule(const PluginRule&) = delete;
    PluginRule& operator=(const PluginRule&) = delete;

    ReuseExpectation on_decode(std::span<const int> seqs, std::span<const std::uint8_t> outputs) override {
        kvweld_expectation x{};
        check("rule_on_decode", [&](char* e, std::size_t n) {
            return api().rule_on_decode(rule_, seqs.data(), outputs.empty() ? nullptr : outputs.data(),
                                        std::int32_t(seqs.size()), &x, e, n);
        });
        require(x.plans >= 0 && x.must_reuse >= 0 && x.may_reuse >= 0 && x.must_reuse + x.may_reuse <= x.plans,
                "engine ", api().name, ": its rule expects ", x.must_reuse, " + ", x.may_reuse, " reuses of ",
                x.plans, " plans");
        ReuseExpectation out;
        out.plans = x.plans, out.must_reuse = x.must_reuse, out.may_reuse = x.may_reuse;
        if (x.builds >= 0) out.builds = x.builds;
        if (x.rebinds >= 0) out.rebinds = x.rebinds;
        return out;
    }
    std::string why_last() const override {
        std::array<char, kRuleErrLen> text{};
        api().rule_why(rule_, text.data(), text.size());
        text.back() = '\0';
        return cat("the rule engine ", api().name, " ships: ", text.data());
    }
    void on_call(const MemoryCall& call) override {
        const kvweld_call c = to_c(call);
        check("rule_on_call", [&](char* e, std::size_t n) { return api().rule_on_call(rule_, &c, e, n); });
    }

private:
    const kvweld_engine_api& api() const { return library_->api(); }
    template <class F>
    void check(const char* what, F&& f) const {
        std::array<char, kRuleErrLen> err{};
        if (f(err.data(), err.size()) == 0) return;
        err.back() = '\0';
        throw Error(cat("engine ", api().name, ": ", what, " failed: ", err.data()));
    }
    std::shared_ptr<const PluginLibrary> library_;
    kvweld_rule* rule_ = nullptr;
};

}  // namespace

std::unique_ptr<ReuseRule> shipped_rule(const std::string& engine, const EngineSetup& setup) {
    if (engine_in_process(engine)) return nullptr;
    std::shared_ptr<const PluginLibrary> library = engine_library(engine);
    if (!library->api().rule_create) return nullptr;
    return std::make_unique<PluginRule>(std::move(library), setup);
}

}  // namespace kvweld::targets
