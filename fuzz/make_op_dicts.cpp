// Writes the fuzz dictionaries whose tokens come from the op table, so a new
// op kind is in them the moment its row exists (the build runs this; the
// hand-written dictionaries once stopped at `warmup`, 7 kinds short):
//   ops_fuzzer.dict    one byte per kind, as ops_fuzzer reads a kind;
//   trace_fuzzer.dict  BASE (the trace's header, config and field tokens),
//                      then each kind's name and the fields its op writes.
// Usage: make_op_dicts BASE OUT_DIR
#include "sim/ops.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using kvweld::sim::kOpKinds;
using kvweld::sim::Op;
using kvweld::sim::OpArgs;

// A default op of each kind, as the table writes it.
template <std::size_t... I>
std::vector<nlohmann::json> default_ops(std::index_sequence<I...>) {
    std::vector<nlohmann::json> out;
    (out.push_back(nlohmann::json(Op{std::variant_alternative_t<I, OpArgs>{}})), ...);
    return out;
}

// A dictionary entry: the JSON string token "\"text\"", escaped for libFuzzer.
std::string quoted(const std::string& text) { return "\"\\\"" + text + "\\\"\""; }

bool write(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    return bool(out);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: make_op_dicts BASE OUT_DIR\n";
        return 2;
    }
    std::ifstream base_in(argv[1]);
    if (!base_in) {
        std::cerr << "make_op_dicts: cannot read " << argv[1] << "\n";
        return 1;
    }
    std::stringstream base;
    base << base_in.rdbuf();
    std::set<std::string> seen;  // the base's tokens are not repeated
    for (std::string line; std::getline(base, line);) seen.insert(line);

    std::string ops = "# op kinds as ops_fuzzer reads them (0.." + std::to_string(kOpKinds - 1) +
                      ", sim/ops.hpp); written by fuzz/make_op_dicts.cpp\n";
    for (int k = 0; k < kOpKinds; ++k) {
        char byte[16];
        std::snprintf(byte, sizeof byte, "\"\\x%02x\"\n", k);
        ops += byte;
    }
    ops += "\"\\x00\\x00\\x00\\x00\"\n\"\\xff\\xff\\xff\\xff\"\n";

    std::string trace = base.str();
    if (!trace.empty() && trace.back() != '\n') trace += '\n';
    trace += "# each op kind's name and fields (fuzz/make_op_dicts.cpp, from the op table)\n";
    for (const nlohmann::json& op : default_ops(std::make_index_sequence<kOpKinds>{})) {
        if (const std::string name = quoted(op.at("op").get<std::string>()); seen.insert(name).second)
            trace += name + "\n";
        for (const auto& [key, value] : op.items())
            if (seen.insert(quoted(key)).second) trace += quoted(key) + "\n";
    }
    const std::string dir = argv[2];
    if (!write(dir + "/ops_fuzzer.dict", ops) || !write(dir + "/trace_fuzzer.dict", trace)) {
        std::cerr << "make_op_dicts: cannot write into " << dir << "\n";
        return 1;
    }
    return 0;
}
