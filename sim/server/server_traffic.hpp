// The server's reuse under serving traffic (`kvweld traffic --engine
// llama-server`): shared-prefix workloads sent to llama-server unpinned
// (the server chooses each request's slot, as users meet it), per setting,
// every answer judged by the server simulator's oracles on the way. For
// each run: the prompt tokens sent, the tokens the server reused
// (timings.cache_n), the most the slot it chose allowed (the cache model's
// count), and the ideal: the most any slot allowed (the best choice of
// slot). Hit rate below the chosen slot's count is lost reuse (the reuse
// oracle fails it); between that and the ideal is the slot choice's loss;
// beyond the ideal, what a cache that kept every slot state (a host-RAM
// prompt cache without limit) could add.
#pragma once

#include "sim/server/server_run.hpp"

#include <string>
#include <vector>

namespace kvweld::sim::server {

// chat: conversations that go on from their last answer; few-shot: a shared
// prefix and a new tail; agent: a history resent with a few tokens cut from
// its middle and a new tail. Each has more clients than the server has slots.
enum class Workload { chat, few_shot, agent };
inline constexpr Workload kWorkloads[] = {Workload::chat, Workload::few_shot, Workload::agent};
std::string_view to_string(Workload w);

struct TrafficRow {
    ServerSettings settings;
    Workload workload = Workload::chat;
    int requests = 0;
    long prompt_tokens = 0, reused = 0, chosen_allowed = 0, ideal = 0;
    long unbounded = 0;  // the most any earlier slot state held: what a cache that kept every one could reuse
    ServerVerdict verdict = ServerVerdict::pass;
    std::string failure;  // "" none
    double rate(long n) const { return prompt_tokens ? double(n) / double(prompt_tokens) : 0.0; }
};

struct ServerTrafficOptions {
    std::string server, preset = "small", work_dir;
    std::uint64_t seed = 1;
    int requests = 60;  // per workload and setting
    double request_timeout_s = 60;
};

// The settings studied: 2 and 3 slots, unified KV or not, chunk reuse off or 4.
std::vector<ServerSettings> traffic_settings();
// One workload's requests (token ids; unpinned, greedy).
std::vector<ServerOp> traffic_ops(Workload w, std::uint64_t seed, int requests, int clients, const Model& model);
TrafficRow run_traffic(const ServerTrafficOptions& o, const ServerSettings& s, Workload w);

std::string traffic_table(const std::vector<TrafficRow>& rows);
void write_traffic_csv(const std::string& path, const std::vector<TrafficRow>& rows);
// Per workload a panel: per setting the hit rate (solid) and the ideal (dashed).
void write_traffic_plot(const std::string& png, const std::vector<TrafficRow>& rows);

}  // namespace kvweld::sim::server
