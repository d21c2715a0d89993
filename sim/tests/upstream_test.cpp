// Every finding says what upstream already knows (sim/upstream.hpp): the
// library's findings files, the server's own findings, and the one report
// written by hand. Both halves: the repository's files pass, and a file
// whose finding lacks the field (or states it wrongly) is named.
#include "sim/jsonl.hpp"
#include "sim/known_findings.hpp"
#include "sim/server/server_known.hpp"
#include "sim/upstream.hpp"
#include "util/error.hpp"
#include "util/build_paths.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

namespace kvweld::sim {
namespace {

const std::filesystem::path kRoot = KVWELD_SOURCE_DIR;
const std::filesystem::path kLibrary = kRoot / "targets/llamacpp/known_findings/b11434.json";
const std::filesystem::path kOld = kRoot / "targets/llamacpp/findings/0.3.16.json";
const std::filesystem::path kServer = kRoot / "targets/llamaserver/known_findings/b11434.json";

std::string read(const std::filesystem::path& p) { return read_text_file(p.string(), "file"); }

// The findings of a library findings file that lack what a report needs:
// an upstream status, and the program and data sheet it points a user to.
std::vector<std::string> gaps(const KnownFindings& known) {
    std::vector<std::string> out;
    for (const KnownFinding& f : known.findings) {
        if (!f.upstream) out.push_back(f.id + ": no upstream");
        for (const std::string& path : {f.program, f.sheet})
            if (path.empty() || !std::filesystem::exists(kRoot / path)) out.push_back(f.id + ": no file '" + path + "'");
    }
    return out;
}

// A copy of `from` with `edit` applied to its first finding, in a folder of
// its own (a trace path resolves against it, and is not read here).
std::filesystem::path edited(const std::filesystem::path& from, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(read(from));
    edit(j.at("findings").at(0));
    const auto dir = std::filesystem::temp_directory_path() / ("kvweld-upstream-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / from.filename();
    std::ofstream(path) << j.dump(2);
    return path;
}

TEST(Upstream, EveryLibraryFindingSaysWhatUpstreamKnows) {
    for (const auto& file : {kLibrary, kOld}) {
        const KnownFindings known = load_known_findings(file.string());
        ASSERT_FALSE(known.findings.empty()) << file;
        EXPECT_EQ(gaps(known), std::vector<std::string>{}) << file;
    }
}

TEST(Upstream, AFindingWithoutTheFieldIsNamed) {
    const auto path = edited(kLibrary, [](nlohmann::json& f) { f.erase("upstream"); });
    const KnownFindings known = load_known_findings(path.string());
    std::filesystem::remove_all(path.parent_path());
    const std::vector<std::string> g = gaps(known);
    ASSERT_EQ(g.size(), 1u);
    EXPECT_EQ(g[0], known.findings.front().id + ": no upstream");
}

TEST(Upstream, EveryServerFindingSaysWhatUpstreamKnows) {
    const server::ServerKnownFindings server = server::load_server_known_findings(kServer.string());
    const KnownFindings library = load_known_findings(kLibrary.string());
    for (const server::ServerKnownFinding& f : server.findings) {
        if (f.own_facts) {
            EXPECT_FALSE(f.upstream.searched_terms.empty()) << f.id;
            continue;
        }
        // A library finding met through the server: its entry in the library's file says it.
        const auto it = std::find_if(library.findings.begin(), library.findings.end(),
                                     [&](const KnownFinding& k) { return k.id == f.id; });
        ASSERT_NE(it, library.findings.end()) << f.id;
        EXPECT_TRUE(it->upstream.has_value()) << f.id;
    }
}

// The row of FINDINGS.md's server table for `id`, or "" where it has none.
std::string table_row(const std::string& doc, const std::string& id) {
    const std::string start = "| `" + id + "` |";
    const auto at = doc.find(start);
    return at == std::string::npos ? "" : doc.substr(at, doc.find('\n', at) - at);
}

// What a row must say of `u`: its status and every number it cites.
std::vector<std::string> row_gaps(const std::string& row, const Upstream& u) {
    std::vector<std::string> out;
    const std::string status = u.status == Upstream::Status::none ? "none found" : to_string(u.status);
    if (row.find("| " + status) == std::string::npos) out.push_back("status " + status);
    for (const auto* refs : {&u.issues, &u.prs})
        for (const Upstream::Ref& r : *refs)
            if (row.find("#" + std::to_string(r.number)) == std::string::npos) out.push_back("#" + std::to_string(r.number));
    return out;
}

TEST(Upstream, ServerFindingsTableIsTheFiles) {
    const std::string doc = read(kRoot / "docs/FINDINGS.md");
    for (const server::ServerKnownFinding& f : server::load_server_known_findings(kServer.string()).findings) {
        if (!f.own_facts) continue;
        const std::string row = table_row(doc, f.id);
        ASSERT_FALSE(row.empty()) << f.id << ": no row in FINDINGS.md's upstream table";
        EXPECT_EQ(row_gaps(row, f.upstream), std::vector<std::string>{}) << row;
    }
    // And the check bites: a row that drops a number is named.
    Upstream u;
    u.status = Upstream::Status::reported;
    u.issues = {{28139, "open", ""}};
    EXPECT_EQ(row_gaps("| `x` | reported: #28992 |", u), std::vector<std::string>{"#28139"});
    EXPECT_EQ(row_gaps("| `x` | related: #28139 |", u), std::vector<std::string>{"status reported"});
}

TEST(Upstream, AServerFindingWithoutTheFieldDoesNotLoad) {
    const auto path = edited(kServer, [](nlohmann::json& f) {
        f["in"] = "server", f["title"] = "t", f["source"] = "s", f["explanation"] = "e";
        f.erase("upstream");
    });
    std::string refused;
    try {
        server::load_server_known_findings(path.string());
    } catch (const Error& e) {
        refused = e.what();
    }
    std::filesystem::remove_all(path.parent_path());
    EXPECT_NE(refused.find("no 'upstream'"), std::string::npos) << "a server finding without upstream: '" << refused << "'";
}

TEST(Upstream, TheReportWrittenByHandSaysItToo) {
    const std::string text = read(kRoot / "docs/findings/lora-adapters-leak.md");
    EXPECT_NE(text.find("## Upstream status"), std::string::npos);
    EXPECT_NE(text.find("#18490"), std::string::npos);
}

TEST(Upstream, AStatusMustBeStatedWhole) {
    const nlohmann::json searched = {{"date", "2026-12-06"}, {"terms", {"t"}}};
    const nlohmann::json issue = nlohmann::json::array({{{"number", 1}, {"state", "open"}}});
    auto fails = [](const nlohmann::json& u, const std::string& says) {
        try {
            upstream_from_json(u, "x");
        } catch (const Error& e) {
            return std::string(e.what()).find(says) != std::string::npos;
        }
        return false;
    };
    EXPECT_TRUE(fails({{"status", "maybe"}, {"searched", searched}}, "status 'maybe'"));
    EXPECT_TRUE(fails({{"status", "none"}}, "no 'searched'"));
    EXPECT_TRUE(fails({{"status", "none"}, {"issues", issue}, {"searched", searched}}, "cites an issue"));
    EXPECT_TRUE(fails({{"status", "related"}, {"issues", issue}, {"searched", searched}}, "a note"));
    EXPECT_TRUE(fails({{"status", "reported"}, {"searched", searched}}, "the issue of the same bug"));
    EXPECT_TRUE(fails({{"status", "fixed"}, {"prs", issue}, {"searched", searched}}, "a merged PR"));
    EXPECT_TRUE(fails({{"status", "reported"}, {"issues", {{{"number", 2}, {"state", "stale"}}}}, {"searched", searched}},
                      "state 'stale'"));
    const Upstream u = upstream_from_json({{"status", "reported"}, {"issues", issue}, {"searched", searched}}, "x");
    EXPECT_EQ(u.summary(), "reported: issue #1 (open)");
    EXPECT_EQ(upstream_from_json({{"status", "none"}, {"searched", searched}}, "x").summary(),
              "none found (searched 2026-12-06)");
}

}  // namespace
}  // namespace kvweld::sim
