// Several requests in flight at once, each on its own connection and
// thread: the server batches them (continuous batching across slots).
#include "sim/server/server_oracle.hpp"
#include "sim/server/server_sim.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <exception>
#include <thread>

namespace kvweld::sim::server {

// Not with a RAM cache: which request took its slot first, and whether
// one had ended before another began, decide what the cache holds, and
// neither is seen from outside.
int Burst::weight(const ServerSettings& s) { return s.embeddings() || s.slots < 2 || s.cache_ram != 0 ? 0 : 3; }

// Each request pinned to its own slot, greedy, one completion each. Not
// unpinned: two requests the server may put on one slot run in an order it
// chooses, and each slot's oracles need the order its requests ran in.
Burst Burst::draw(ServerDraw& d) {
    const int slots = d.settings().slots;
    const int n = int(d.range(2, slots));
    const int first = int(d.below(std::uint64_t(slots)));
    Burst op;
    for (int i = 0; i < n; ++i) op.requests.push_back(d.completion((first + i) % slots));
    return op;
}

void Burst::write(nlohmann::json& j, const Burst& a) {
    j["requests"] = nlohmann::json::array();
    for (const Completion& c : a.requests) {
        nlohmann::json one;
        write_completion(one, c);
        j["requests"].push_back(one);
    }
}

Burst Burst::read(const nlohmann::json& j) {
    require(j.contains("requests") && j.at("requests").is_array() && j.at("requests").size() >= 1,
            "field 'requests' must be a non-empty array");
    Burst op;
    for (const nlohmann::json& one : j.at("requests")) {
        op.requests.push_back(read_completion(one));
        const int slot = op.requests.back().slot;
        require(slot >= 0, "a burst's request has slot ", slot, ": each one is pinned to a slot of its own");
        for (std::size_t k = 0; k + 1 < op.requests.size(); ++k)
            require(op.requests[k].slot != slot, "a burst's requests share slot ", slot, ": each one is pinned to a slot of its own");
    }
    return op;
}

void ServerSim::run(const Burst& op, std::size_t index, nlohmann::json& observed) {
    std::vector<std::vector<ServerAnswer>> answers(op.requests.size());
    std::vector<std::exception_ptr> errors(op.requests.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < op.requests.size(); ++i)
        threads.emplace_back([&, i] {
            try {
                answers[i] = send(op.requests[i], cat("op ", index, " (burst, request ", i, ")"));
            } catch (...) {
                errors[i] = std::current_exception();
            }
        });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
    observed = nlohmann::json::array();
    for (const auto& a : answers) observed.push_back(observed_json(a));
    // One request per slot: the order between slots does not matter.
    for (std::size_t i = 0; i < op.requests.size(); ++i) judge_completion(op.requests[i], answers[i], index);
}

}  // namespace kvweld::sim::server
