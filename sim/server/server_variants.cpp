// The server ops' variants (sim/server/server_variants.hpp).
#include "sim/server/server_variants.hpp"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace kvweld::sim::server {

namespace {

// The completions an op sends: a complete's one, a burst's each, a during's stream and what it sent, none for the other kinds.
std::vector<const Completion*> requests(const ServerOp& op) {
    std::vector<const Completion*> out;
    std::visit(
        [&](const auto& a) {
            using T = std::decay_t<decltype(a)>;
            if constexpr (std::is_same_v<T, Complete>) out.push_back(&a.request);
            else if constexpr (std::is_same_v<T, Burst>)
                for (const Completion& c : a.requests) out.push_back(&c);
            else if constexpr (std::is_same_v<T, During>) {
                out.push_back(&a.stream);
                if (const auto* c = std::get_if<Completion>(&a.then)) out.push_back(c);
            } else static_assert(std::is_same_v<T, Slot> || std::is_same_v<T, Embed> || std::is_same_v<T, Lora>, "every server op kind");
        },
        op.args);
    return out;
}

template <class Pred>
bool any_request(const ServerOp& op, Pred p) {
    const std::vector<const Completion*> rs = requests(op);
    return std::any_of(rs.begin(), rs.end(), [&](const Completion* c) { return p(*c); });
}

template <class Pred>
bool during(const ServerOp& op, Pred p) {
    const auto* d = std::get_if<During>(&op.args);
    return d && p(*d);
}

bool slot_action(const ServerOp& op, SlotAction a) {
    const auto* s = std::get_if<Slot>(&op.args);
    return s && s->action == a;
}

}  // namespace

const ServerOpVariant kServerOpVariants[] = {
    {"streamed", [](const ServerOp& op) { return any_request(op, [](const Completion& c) { return c.stream; }); }},
    {"cancelled", [](const ServerOp& op) { return any_request(op, [](const Completion& c) { return c.cancel_after > 0; }); }},
    {"n_cmpl>1", [](const ServerOp& op) { return any_request(op, [](const Completion& c) { return c.n_cmpl > 1; }); }},
    {"sampled", [](const ServerOp& op) { return any_request(op, [](const Completion& c) { return c.temperature > 0; }); }},
    {"pinned", [](const ServerOp& op) { return any_request(op, [](const Completion& c) { return c.slot >= 0; }); }},
    {"own-lora", [](const ServerOp& op) { return any_request(op, [](const Completion& c) { return !c.lora.empty(); }); }},
    {"n_keep", [](const ServerOp& op) { return any_request(op, [](const Completion& c) { return c.n_keep != 0; }); }},
    {"burst>1", [](const ServerOp& op) {
         const auto* b = std::get_if<Burst>(&op.args);
         return b && b->requests.size() > 1;
     }},
    {"slot-save", [](const ServerOp& op) { return slot_action(op, SlotAction::save); }},
    {"slot-restore", [](const ServerOp& op) { return slot_action(op, SlotAction::restore); }},
    {"slot-erase", [](const ServerOp& op) { return slot_action(op, SlotAction::erase); }},
    {"embed>1", [](const ServerOp& op) {
         const auto* e = std::get_if<Embed>(&op.args);
         return e && e->inputs.size() > 1;
     }},
    {"server-lora", [](const ServerOp& op) { return std::holds_alternative<Lora>(op.args); }},
    {"during-token", [](const ServerOp& op) { return during(op, [](const During& d) { return d.at_token > 0; }); }},
    {"during-end", [](const ServerOp& op) { return during(op, [](const During& d) { return d.at_token == 0; }); }},
    {"during-n_cmpl>1", [](const ServerOp& op) { return during(op, [](const During& d) { return d.stream.n_cmpl > 1; }); }},
    {"during-lora", [](const ServerOp& op) { return during(op, [](const During& d) { return std::holds_alternative<Lora>(d.then); }); }},
};
const std::size_t kServerOpVariantCount = std::size(kServerOpVariants);

}  // namespace kvweld::sim::server
