// What upstream already knows of a finding: the findings files' "upstream"
// object, one form for the library's and the server's findings. A report
// that cites nothing must say which search found nothing, so "searched"
// (the terms, the date) is always there:
//
//   {"status": "none" | "related" | "reported" | "fixed",
//    "issues": [{"number", "state", optionally "title"}],
//    "prs":    [{"number", "state", optionally "title"}],
//    "note": "how the cited reports relate to this finding",
//    "searched": {"date": "YYYY-MM-DD", "terms": ["...", ...]}}
//
// none: the search found no report (no issue, no PR). related: reports of
// a nearby bug, not this one (the note says how they differ). reported: an
// issue of the same bug (open or closed, with any fix PR). fixed: a merged
// PR fixes it in a newer source.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace kvweld::sim {

struct Upstream {
    enum class Status { none, related, reported, fixed };
    struct Ref {
        int number = 0;
        std::string state;  // open, closed, merged
        std::string title;  // "" where not recorded
    };
    Status status = Status::none;
    std::vector<Ref> issues, prs;
    std::string note;
    std::string searched_date;
    std::vector<std::string> searched_terms;

    // One line: "reported: issue #27175 (open); PR #27186 (open)", or
    // "none found (searched 2026-12-06)".
    std::string summary() const;
};

const char* to_string(Upstream::Status s);

// Reads and checks the object (throws Error naming the finding and the
// field): a status from the list, "none" citing nothing, "related" and
// "reported" citing an issue or PR, "fixed" a merged PR, and "searched".
Upstream upstream_from_json(const nlohmann::json& j, const std::string& id);

}  // namespace kvweld::sim
