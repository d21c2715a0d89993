// A truncated, corrupt or wrong-version trace gets an error naming the line
// and what is wrong.
#include "engine/error.hpp"
#include "sim/trace.hpp"

#include <gtest/gtest.h>

namespace kvweld::sim {
namespace {

std::string good_trace() {
    const RunResult r = run_generated(draw_config(9), 20);
    return trace_text(r.config, r.steps, r.ops);
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::size_t start = 0;
    for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
        out.push_back(text.substr(start, nl - start));
    return out;
}

std::string join(const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& l : lines) out += l + "\n";
    return out;
}

void expect_trace_error(const std::string& text, std::initializer_list<std::string> fragments) {
    try {
        parse_trace(text, "t.jsonl");
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        for (const std::string& f : fragments)
            EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what() << " lacks " << f;
    }
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
    for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
}

TEST(TraceErrors, GoodTraceParses) {
    const Trace t = parse_trace(good_trace());
    EXPECT_EQ(t.config.seed, 9u);
    EXPECT_EQ(t.steps, 20);
    EXPECT_EQ(t.ops.size(), 20u);
}

TEST(TraceErrors, Truncated) {
    const std::string text = good_trace();
    expect_trace_error(text.substr(0, text.size() - 7), {"t.jsonl", "line 21", "truncated"});
}

TEST(TraceErrors, CorruptJsonNamesTheLine) {
    auto lines = lines_of(good_trace());
    lines[4] = "{\"op\": \"decode\", \"pick\": ";
    expect_trace_error(join(lines), {"line 5", "invalid JSON"});
}

TEST(TraceErrors, WrongVersion) {
    std::string text = good_trace();
    replace_all(text, "\"version\":2", "\"version\":3");
    expect_trace_error(text, {"line 1", "version 3", "version 2"});
}

TEST(TraceErrors, UnknownOpAndBadFields) {
    auto lines = lines_of(good_trace());
    auto with_line = [&](int i, const std::string& l) {
        auto copy = lines;
        copy[static_cast<std::size_t>(i)] = l;
        return join(copy);
    };
    expect_trace_error(with_line(2, R"({"op":"explode","pick":1})"), {"line 3", "unknown op 'explode'"});
    expect_trace_error(with_line(2, R"({"op":"decode"})"), {"line 3", "missing field 'pick'"});
    expect_trace_error(with_line(2, R"({"op":"decode","pick":"x","seed":1})"), {"line 3", "'pick'", "wrong type"});
    expect_trace_error(with_line(2, R"({"op":"spec","pick":1,"drafts":[1,2],"m":5,"seed":1})"),
                       {"line 3", "'m' = 5", "0..2"});
    expect_trace_error(with_line(2, R"({"op":"admit","pick":1,"prompt":[-4],"fresh":true,"accept":0.5,"max_new":1,"seed":1})"),
                       {"line 3", "negative token -4"});
    expect_trace_error(with_line(2, "[1,2,3]"), {"line 3", "object"});
}

TEST(TraceErrors, BadHeader) {
    expect_trace_error("", {"line 1", "empty"});
    expect_trace_error("{\"format\":\"other\"}\n", {"line 1", "kvweld-trace"});
    std::string text = good_trace();
    replace_all(text, "\"slots\":", "\"slots_\":");
    expect_trace_error(text, {"line 1", "missing field 'slots'"});
    text = good_trace();
    replace_all(text, "\"family\":\"llama\"", "\"family\":\"gpt\"");
    replace_all(text, "\"family\":\"qwen3\"", "\"family\":\"gpt\"");
    expect_trace_error(text, {"line 1", "gpt"});
    text = good_trace();
    replace_all(text, "\"faults\":[]", "\"faults\":[\"nope\"]");
    expect_trace_error(text, {"line 1", "unknown fault 'nope'"});
}

TEST(TraceErrors, MoreOpsThanSteps) {
    std::string text = good_trace();
    replace_all(text, "\"steps\":20", "\"steps\":3");
    expect_trace_error(text, {"20 ops", "3 steps"});
}

TEST(TraceErrors, MissingFile) {
    EXPECT_THROW(read_trace("/nonexistent/t.jsonl"), Error);
}

}  // namespace
}  // namespace kvweld::sim
