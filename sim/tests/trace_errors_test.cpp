// A truncated, corrupt or wrong-version trace gets an error naming the line
// and what is wrong.
#include "util/error.hpp"
#include "targets/registry.hpp"
#include "sim/jsonl.hpp"
#include "sim/run.hpp"

#include <gtest/gtest.h>

namespace kvweld::sim {
namespace {

std::string good_trace() {
    const std::string engine(targets::kDefaultEngine);
    const RunResult r = run_generated(draw_config(9, EngineChoice{engine, "", ""}, "", targets::engine_capabilities(engine)), 20);
    return trace_text(r);
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
    lines[4] = "{\"op\": \"step\", \"wants\": ";
    expect_trace_error(join(lines), {"line 5", "invalid JSON"});
}

// Before version 3 there were two simulators with a format each: both are
// refused, naming the version read and the one this build reads.
TEST(TraceErrors, WrongVersionOrTheOldSecondFormat) {
    std::string text = good_trace();
    replace_all(text, "\"version\":3", "\"version\":2");
    expect_trace_error(text, {"line 1", "version 2", "version 3"});
    replace_all(text, "\"kvweld-trace\"", "\"kvweld-serve-trace\"");
    expect_trace_error(text, {"line 1", "version 2", "kvweld-serve-trace", "kvweld-trace version 3"});
}

TEST(TraceErrors, UnknownOpAndBadFields) {
    auto lines = lines_of(good_trace());
    auto with_line = [&](int i, const std::string& l) {
        auto copy = lines;
        copy[static_cast<std::size_t>(i)] = l;
        return join(copy);
    };
    expect_trace_error(with_line(2, R"({"op":"explode","pick":1})"), {"line 3", "unknown op 'explode'"});
    expect_trace_error(with_line(2, R"({"op":"retire"})"), {"line 3", "missing field 'pick'"});
    expect_trace_error(with_line(2, R"({"op":"retire","pick":"x"})"), {"line 3", "'pick'", "wrong type"});
    expect_trace_error(with_line(2, R"({"op":"swap_layer","pick":1,"layer":-2})"), {"line 3", "'layer' = -2"});
    expect_trace_error(
        with_line(2, R"({"op":"admit","pick":1,"prompt":[-4],"max_new":1,"capacity":0,"recycle":false})"),
        {"line 3", "negative value -4"});
    expect_trace_error(
        with_line(2, R"({"op":"admit","pick":1,"prompt":[100000],"max_new":1,"capacity":0,"recycle":false})"),
        {"line 3", "token 100000 out of range"});
    expect_trace_error(with_line(2, "[1,2,3]"), {"line 3", "object"});
}

TEST(TraceErrors, BadHeader) {
    expect_trace_error("", {"line 1", "empty"});
    expect_trace_error("{\"format\":\"other\"}\n", {"line 1", "kvweld-trace"});
    std::string text = good_trace();
    replace_all(text, "\"seqs\":", "\"seqs_\":");
    expect_trace_error(text, {"line 1", "missing field 'seqs'"});
    text = good_trace();
    replace_all(text, "\"family\":\"llama\"", "\"family\":\"gpt\"");
    replace_all(text, "\"family\":\"qwen3\"", "\"family\":\"gpt\"");
    expect_trace_error(text, {"line 1", "gpt"});
    text = good_trace();
    replace_all(text, "\"capacities\":[", "\"capacities\":[100000,");
    expect_trace_error(text, {"line 1", "capacities", "100000"});
}

// A fault the engine does not list is refused when the trace is run, naming it.
TEST(TraceErrors, UnknownFaultIsRefusedByTheEngine) {
    std::string text = good_trace();
    replace_all(text, "\"faults\":\"\"", "\"faults\":\"nope\"");
    const Trace t = parse_trace(text);
    try {
        run_ops(t.config, t.ops, t.steps);
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown fault 'nope'"), std::string::npos) << e.what();
    }
}

TEST(TraceErrors, MoreOpsThanSteps) {
    std::string text = good_trace();
    replace_all(text, "\"steps\":20", "\"steps\":3");
    expect_trace_error(text, {"20 ops", "3 steps"});
}

TEST(TraceErrors, MissingFile) {
    EXPECT_THROW(read_text_file("/nonexistent/t.jsonl"), Error);
}

}  // namespace
}  // namespace kvweld::sim
