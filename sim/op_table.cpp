// The op table's generic face: kind k is the k-th alternative of OpArgs,
// whose struct (sim/ops.hpp) declares its row and whose file
// (sim/ops/<name>.cpp) defines it. Names, JSON, eligibility and the
// weighted draw over every kind; what an op does to the engine is the
// simulator's (Simulator::run, one overload per kind, in the same file).
#include "sim/op_table.hpp"

#include "sim/json_field.hpp"
#include "sim/simulator.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <array>

namespace kvweld::sim {

namespace {

// The table's generic face: kind k's row is the k-th alternative's.
template <std::size_t... I>
constexpr auto make_names(std::index_sequence<I...>) {
    return std::array<std::string_view, sizeof...(I)>{std::variant_alternative_t<I, OpArgs>::name...};
}
constexpr auto kNames = make_names(std::make_index_sequence<kOpKinds>{});

template <std::size_t I = 0, class F>
decltype(auto) with_kind(OpKind kind, F&& f) {
    if constexpr (I + 1 < std::size_t(kOpKinds)) {
        if (std::size_t(kind) != I) return with_kind<I + 1>(kind, std::forward<F>(f));
    }
    return f(std::type_identity<std::variant_alternative_t<I, OpArgs>>{});
}

}  // namespace

std::string_view to_string(OpKind k) {
    require(std::size_t(k) < kNames.size(), "op kind ", int(k), " out of range");
    return kNames[std::size_t(k)];
}

std::vector<std::string_view> op_variants(OpKind k) {
    return with_kind(k, [](auto type) {
        using T = typename decltype(type)::type;
        if constexpr (HasVariants<T>) return std::vector<std::string_view>(T::variants.begin(), T::variants.end());
        else return std::vector<std::string_view>{};
    });
}

OpKind op_kind_from_string(std::string_view s) {
    for (std::size_t k = 0; k < kNames.size(); ++k)
        if (kNames[k] == s) return OpKind(k);
    std::string known;
    for (std::string_view name : kNames) known += cat(known.empty() ? "" : ", ", name);
    throw Error(cat("unknown op '", s, "' (known: ", known, ")"));
}

std::uint32_t Op::pick() const {
    return std::visit(
        [](const auto& a) -> std::uint32_t {
            if constexpr (requires { a.pick; }) return a.pick;
            else return 0;
        },
        args);
}

void to_json(nlohmann::json& j, const Op& op) {
    j = nlohmann::json::object();
    j["op"] = to_string(op.kind());
    std::visit([&](const auto& a) { std::decay_t<decltype(a)>::write(j, a); }, op.args);
}

Op op_from_json(const nlohmann::json& j) {
    require(j.is_object(), "an op must be a JSON object");
    const OpKind kind = op_kind_from_string(json_field<std::string>(j, "op"));
    return with_kind(kind, [&](auto type) { return Op{decltype(type)::type::read(j)}; });
}

std::vector<int> eligible_for(const Simulator& sim, OpKind kind) {
    return with_kind(kind, [&](auto type) { return decltype(type)::type::eligible(sim); });
}

// Which kinds can act now, weighted by the config; none: retire one. The
// pick is drawn for every kind (a kind that picks nothing drops it), so
// each seed's draws stay in the order they always had.
Op draw_op(const Simulator& sim, Entropy& entropy) {
    std::array<int, kOpKinds> w{};
    for (int k = 0; k < kOpKinds; ++k) w[std::size_t(k)] = sim.eligible(OpKind(k)).empty() ? 0 : sim.config().weights[std::size_t(k)];
    const OpKind kind = OpKind(entropy.weighted(w).value_or(int(OpKind::retire)));
    const std::uint32_t pick = entropy.pick();
    return with_kind(kind, [&](auto type) { return Op{decltype(type)::type::draw(sim, entropy, pick)}; });
}

}  // namespace kvweld::sim
