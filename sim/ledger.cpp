#include "sim/ledger.hpp"

#include "engine/cat.hpp"

namespace kvweld::sim {

std::optional<std::string> StorageLedger::accept(const std::vector<KvLayer>& layers) {
    std::set<StorageSerial> mine;
    for (std::size_t l = 0; l < layers.size(); ++l) {
        const StorageSerial s = layers[l]->serial();
        if (!s) return cat("layer ", l, " reports storage serial 0 (no storage)");
        if (seen(s))
            return cat("layer ", l, " reports storage serial ", s.get(),
                       ", which this run has seen before: the storage was not replaced");
        if (!mine.insert(s).second)
            return cat("layer ", l, " reports storage serial ", s.get(), ", shared with another layer");
    }
    seen_.insert(mine.begin(), mine.end());
    return std::nullopt;
}

std::vector<StorageSerial> LedgerEntry::serials() const {
    std::vector<StorageSerial> out;
    out.reserve(storage.size());
    for (const KvLayer& l : storage) out.push_back(l->serial());
    return out;
}

}  // namespace kvweld::sim
