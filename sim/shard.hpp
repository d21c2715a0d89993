// Campaigns on many machines: a seed range split into shards, each run as
// its own swarm writing a JSON report, and the reports merged back into the
// very report the unsharded run writes (byte for byte).
//
// A shard is a contiguous block of the range: shard i of n gets seeds
// [first + i*len/n, first + (i+1)*len/n). The split depends only on the
// range and n, the shards are disjoint, and their union is the range.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <utility>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvweld::sim {

struct Shard {
    std::uint64_t index = 0;
    std::uint64_t count = 1;
};

// "i/n" with 0 <= i < n; throws Error naming the text.
Shard parse_shard(std::string_view text);
// The seeds of shard s of [first, last]; throws Error when the range has
// fewer seeds than shards.
std::pair<std::uint64_t, std::uint64_t> shard_range(std::uint64_t first, std::uint64_t last, Shard s);

// Identifies the binary: reports from different builds never merge.
std::string build_id();

// What every swarm report shares, whichever simulator wrote it: the header
// (format, version, build, range, shard, steps) and the identity fields
// its kind adds; and the merge of one campaign's shards into the report
// the unsharded run writes, seeds in order (each kind rebuilds its table
// from them).
nlohmann::json swarm_header(const char* format, std::uint64_t range_first, std::uint64_t range_last, Shard shard,
                            std::uint64_t first, std::uint64_t last, int steps);
nlohmann::json merge_shards(const std::vector<std::pair<std::string, nlohmann::json>>& named_reports,
                            std::span<const char* const> identity);
std::string report_format(const nlohmann::json& report);  // "" when it has none

}  // namespace kvweld::sim
