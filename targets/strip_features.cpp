#include "targets/strip_features.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <vector>

namespace kvweld::targets {

namespace {

std::string_view trimmed(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

bool starts(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// "KVWELD_USES(A) || KVWELD_USES(B)": whether any is used; an unknown
// feature or another form throws.
bool any_used(std::string_view condition, const std::set<std::string>& uses, int line) {
    bool any = false;
    while (true) {
        condition = trimmed(condition);
        constexpr std::string_view kCall = "KVWELD_USES(";
        const auto close = condition.find(')');
        require(starts(condition, kCall) && close != std::string_view::npos, "strip: line ", line,
                ": a guard is KVWELD_USES(F) joined by ||, not '", condition, "'");
        const std::string feature(condition.substr(kCall.size(), close - kCall.size()));
        require(repro_features().count(feature), "strip: line ", line, ": unknown feature '", feature, "'");
        any = any || uses.count(feature);
        condition = trimmed(condition.substr(close + 1));
        if (condition.empty()) return any;
        require(starts(condition, "||"), "strip: line ", line, ": a guard joins features by || only");
        condition.remove_prefix(2);
    }
}

}  // namespace

Stripped strip_features(std::string_view text, const std::set<std::string>& uses) {
    enum class Frame { keep, drop, other };  // a guard kept or dropped, or a directive not ours (kept whole)
    std::vector<Frame> frames;
    Stripped stripped;
    std::string& out = stripped.text;
    bool in_default = false, blank = false;
    int line = 0;
    const auto keeping = [&] {
        for (Frame f : frames)
            if (f == Frame::drop) return false;
        return true;
    };
    while (!text.empty()) {
        const auto nl = text.find('\n');
        const std::string_view raw = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        ++line;
        const std::string_view t = trimmed(raw);
        if (starts(t, "//") && !starts(t, "// ----")) continue;
        if (in_default) {
            in_default = !starts(t, "#endif");
            continue;
        }
        if (t == "#ifndef KVWELD_USES") {
            in_default = true;
            continue;
        }
        if (t == "#pragma once" || starts(t, "#include \"")) continue;
        if (starts(t, "#if KVWELD_USES")) {
            frames.push_back(any_used(t.substr(3), uses, line) ? Frame::keep : Frame::drop);
            continue;
        }
        if (starts(t, "#if") || starts(t, "#ifdef") || starts(t, "#ifndef")) {
            frames.push_back(Frame::other);
        } else if (starts(t, "#else") || starts(t, "#elif")) {
            require(frames.empty() || frames.back() == Frame::other, "strip: line ", line,
                    ": a KVWELD_USES guard has no #else; guard each side by its own feature");
        } else if (starts(t, "#endif")) {
            require(!frames.empty(), "strip: line ", line, ": #endif without its #if");
            const Frame f = frames.back();
            frames.pop_back();
            if (f != Frame::other) continue;
            if (!keeping()) continue;
            out.append(raw).push_back('\n');
            blank = false;
            continue;
        }
        if (!keeping()) continue;
        if (starts(t, "#include <")) {
            stripped.includes.emplace(t);
            continue;
        }
        if (t.empty()) {  // a blank line before a section title only
            blank = true;
            continue;
        }
        if (blank && starts(t, "// ----") && !out.empty()) out.push_back('\n');
        blank = false;
        out.append(raw).push_back('\n');
    }
    require(frames.empty() && !in_default, "strip: the text ends inside a guard opened before line ", line);
    return stripped;
}

}  // namespace kvweld::targets
