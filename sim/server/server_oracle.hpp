// What every server oracle is told (sim/server/server_oracles.hpp has
// them): one method per kind of exchange, none with a default, each
// returning "" where the answer is right, else what differs.
#pragma once

#include "sim/server/server_exchange.hpp"
#include "sim/server/server_ops.hpp"

#include <string>
#include <vector>

namespace kvweld::sim::server {

class ServerOracle {
public:
    virtual ~ServerOracle() = default;
    virtual std::string name() const = 0;
    virtual std::string on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) = 0;
    // n: the count the server gave (n_saved, n_restored, n_erased).
    virtual std::string on_slot(const Slot& op, int n) = 0;
    virtual std::string on_embedding(const Embed& op, const std::vector<std::vector<float>>& embeddings) = 0;
    virtual std::string on_lora(const Lora& op) = 0;  // the server's own scales, for requests that name none
    virtual void tally(ServerTally& t) const = 0;  // what it checked, into its own fields
};

}  // namespace kvweld::sim::server
