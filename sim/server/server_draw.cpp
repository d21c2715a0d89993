// The generated run's requests (sim/server/server_sim.hpp ServerDraw): the
// conversations each slot holds, drawn on from what the server answered.
#include "sim/server/server_sim.hpp"

#include "util/error.hpp"

#include <array>

namespace kvweld::sim::server {

namespace {

// The generator's PRNG is apart from the one that drew the settings.
constexpr std::uint64_t kRequestStream = 0x5e5e5e5eULL;

template <std::size_t I = 0>
ServerOp draw_kind(std::size_t kind, ServerDraw& d) {
    if constexpr (I + 1 < std::size_t(kServerOpKinds)) {
        if (kind != I) return draw_kind<I + 1>(kind, d);
    }
    return ServerOp{std::variant_alternative_t<I, ServerOpArgs>::draw(d)};
}

template <std::size_t... I>
std::array<int, sizeof...(I)> weights(const ServerSettings& s, std::index_sequence<I...>) {
    return {std::variant_alternative_t<I, ServerOpArgs>::weight(s)...};
}

}  // namespace

ServerDraw::ServerDraw(std::uint64_t seed, const ServerSettings& settings, int vocab, int max_len)
    : settings_(settings), vocab_(vocab), max_len_(max_len), turns_(settings, max_len, Turn{}),
      rng_(seed ^ kRequestStream) {
    shared_ = tokens(16);
}

std::uint64_t ServerDraw::below(std::uint64_t n) { return rng_.below(n); }
std::int64_t ServerDraw::range(std::int64_t lo, std::int64_t hi) { return rng_.range(lo, hi); }
bool ServerDraw::chance(double p) { return rng_.chance(p); }
bool ServerDraw::saved(int file) const { return turns_.file(file) != nullptr; }
bool ServerDraw::fills_slot(const Completion& c) const {
    return int(c.prompt.size()) + c.n_predict - 1 >= settings_.slot_ctx(max_len_);
}

std::vector<int> ServerDraw::tokens(int n) {
    std::vector<int> out;
    for (int i = 0; i < n; ++i) out.push_back(int(rng_.below(std::uint64_t(vocab_))));
    return out;
}

// A multi-turn chat (the slot's last prompt, its answer, a few new tokens),
// an agent's edit (the slot's last prompt with a few tokens cut from its
// middle, a new tail), a few-shot prompt (the shared prefix, a new tail) or
// a fresh one; 1 to 6 tokens generated. Unpinned, slot 0's conversation.
std::vector<float> ServerDraw::lora_scales() {
    std::vector<float> out;
    for (int i = 0; i < settings_.loras; ++i) out.push_back(std::array<float, 3>{0.0f, 0.5f, 1.0f}[below(3)]);
    return out;
}

Completion ServerDraw::completion(int slot) {
    Completion c;
    c.slot = slot;
    c.n_predict = int(range(1, 6));
    if (settings_.loras > 0 && chance(0.5)) c.lora = lora_scales();
    const Turn& last = turns_.slot(std::max(slot, 0));
    auto append = [&](std::vector<int>& v, int n) {
        const std::vector<int> more = tokens(n);
        v.insert(v.end(), more.begin(), more.end());
    };
    switch (below(4)) {
        case 0:
            c.prompt = last.prompt;
            c.prompt.insert(c.prompt.end(), last.answer.begin(), last.answer.end());
            append(c.prompt, int(range(1, 4)));
            break;
        case 1:
            c.prompt = last.prompt;
            if (c.prompt.size() > 8) {
                const auto at = c.prompt.begin() + std::ptrdiff_t(range(2, std::int64_t(c.prompt.size()) - 4));
                c.prompt.erase(at, at + std::ptrdiff_t(range(1, 3)));
            }
            append(c.prompt, int(range(1, 4)));
            break;
        case 2: c.prompt = shared_, append(c.prompt, int(range(2, 8))); break;
        default: c.prompt = tokens(int(range(4, 16))); break;
    }
    // A conversation that no longer fits starts again.
    if (int(c.prompt.size()) + c.n_predict > max_len_) c.prompt = tokens(int(range(4, 16)));
    // With context shift, sometimes a request that fills its slot: the
    // server drops half of what is past n_keep (0, 4, or the prompt) and
    // generates on.
    if (settings_.context_shift && chance(0.2)) {
        const int grown = int(range(64, 100));
        if (int(c.prompt.size()) < grown) append(c.prompt, grown - int(c.prompt.size()));
        c.n_predict = settings_.slot_ctx(max_len_) - int(c.prompt.size()) + int(range(1, 24));
        c.n_keep = std::array<int, 3>{0, 4, -1}[below(3)];
    }
    return c;
}

void ServerDraw::heard(const Completion& c, const ServerAnswer& a) {
    if (a.slot >= 0 && a.slot < settings_.slots) turns_.slot(a.slot) = {c.prompt, a.tokens};
}

// What the server answered, as the trace records it (observed_json): each
// answer's slot and tokens go on the slot's conversation; a slot action moves it.
void ServerDraw::observe(const ServerOp& op, const nlohmann::json& observed) {
    for (const Answered& a : answered(op, observed))
        for (const ServerAnswer& x : a.answers) heard(a.request, x);
    std::visit(
        [&](const auto& a) {
            using T = std::decay_t<decltype(a)>;
            if constexpr (std::is_same_v<T, Slot>) {
                turns_.act(a);
            } else {
                // a completion's answers were heard above; an embedding holds no conversation, nor do the server's scales
                static_assert(std::is_same_v<T, Complete> || std::is_same_v<T, Burst> || std::is_same_v<T, Embed> ||
                                  std::is_same_v<T, Lora> || std::is_same_v<T, During>,
                              "every server op kind is handled");
            }
        },
        op.args);
}

ServerOp ServerDraw::next() {
    const auto w = weights(settings_, std::make_index_sequence<kServerOpKinds>{});
    int total = 0;
    for (int x : w) total += x;
    require(total > 0, "no server op kind has weight under these settings (", settings_.describe(), ")");
    int r = int(below(std::uint64_t(total)));
    std::size_t kind = 0;
    while (r >= w[kind]) r -= w[kind++];
    return draw_kind(kind, *this);
}

}  // namespace kvweld::sim::server
