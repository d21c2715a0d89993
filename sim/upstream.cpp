#include "sim/upstream.hpp"

#include "sim/json_field.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <utility>

namespace kvweld::sim {

namespace {

constexpr std::array<std::pair<Upstream::Status, const char*>, 4> kStatuses{{
    {Upstream::Status::none, "none"},
    {Upstream::Status::related, "related"},
    {Upstream::Status::reported, "reported"},
    {Upstream::Status::fixed, "fixed"},
}};

constexpr std::array<const char*, 3> kStates{"open", "closed", "merged"};

std::vector<Upstream::Ref> refs_from_json(const nlohmann::json& j, const char* name) {
    std::vector<Upstream::Ref> out;
    if (!j.contains(name)) return out;
    require(j.at(name).is_array(), "'", name, "' must be an array");
    for (const nlohmann::json& r : j.at(name)) {
        Upstream::Ref ref;
        ref.number = json_field<int>(r, "number");
        require(ref.number > 0, "'", name, "': number ", ref.number, " is not an issue or PR number");
        ref.state = json_field<std::string>(r, "state");
        require(std::find(kStates.begin(), kStates.end(), ref.state) != kStates.end(), "'", name, "' #", ref.number,
                ": state '", ref.state, "' (expected open, closed or merged)");
        ref.title = r.value("title", "");
        out.push_back(std::move(ref));
    }
    return out;
}

void check_status(const Upstream& u) {
    const bool cites = !u.issues.empty() || !u.prs.empty();
    switch (u.status) {
    case Upstream::Status::none:
        require(!cites, "status none cites an issue or PR: say related, reported or fixed");
        return;
    case Upstream::Status::related:
        require(cites && !u.note.empty(), "status related needs the reports it cites and a note saying how they differ");
        return;
    case Upstream::Status::reported:
        require(!u.issues.empty(), "status reported needs the issue of the same bug");
        return;
    case Upstream::Status::fixed:
        require(std::any_of(u.prs.begin(), u.prs.end(), [](const Upstream::Ref& r) { return r.state == "merged"; }),
                "status fixed needs a merged PR");
        return;
    }
}

std::string refs_line(const char* what, const std::vector<Upstream::Ref>& refs) {
    std::string out;
    for (const Upstream::Ref& r : refs) out += cat(out.empty() ? cat(what, " ") : ", ", "#", r.number, " (", r.state, ")");
    return out;
}

}  // namespace

const char* to_string(Upstream::Status s) {
    for (const auto& [status, name] : kStatuses)
        if (status == s) return name;
    return "?";
}

std::string Upstream::summary() const {
    if (status == Status::none) return cat("none found (searched ", searched_date, ")");
    const std::string i = refs_line("issue", issues), p = refs_line("PR", prs);
    return cat(to_string(status), ": ", i, !i.empty() && !p.empty() ? "; " : "", p);
}

Upstream upstream_from_json(const nlohmann::json& j, const std::string& id) {
    try {
        require(j.is_object(), "'upstream' must be an object");
        Upstream u;
        const std::string status = json_field<std::string>(j, "status");
        const auto it = std::find_if(kStatuses.begin(), kStatuses.end(), [&](const auto& s) { return status == s.second; });
        require(it != kStatuses.end(), "status '", status, "' (expected none, related, reported or fixed)");
        u.status = it->first;
        u.issues = refs_from_json(j, "issues");
        u.prs = refs_from_json(j, "prs");
        u.note = j.value("note", "");
        const nlohmann::json& searched = j.contains("searched") ? j.at("searched") : nlohmann::json();
        require(searched.is_object(), "no 'searched' (the terms and the date of the search that found what it cites, or nothing)");
        u.searched_date = json_field<std::string>(searched, "date");
        u.searched_terms = json_field<std::vector<std::string>>(searched, "terms");
        require(!u.searched_terms.empty(), "'searched' names no terms");
        check_status(u);
        return u;
    } catch (const Error& e) {
        throw Error(cat("finding '", id, "': upstream: ", e.what()));
    }
}

}  // namespace kvweld::sim
