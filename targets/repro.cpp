#include "targets/repro.hpp"

#include "targets/abi_lists.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <charconv>

namespace kvweld::targets {

ReproTruth parse_repro_truth(const std::string& text) {
    ReproTruth out;
    out.text = text;
    for (const std::string& part : abi::split_list(text.c_str())) {
        if (part == "count-reuse") {
            out.count_reuse = true;
        } else if (part == "new-chains") {
            out.new_chains = true;
        } else if (part.starts_with("skip=")) {
            for (std::size_t at = 5; at <= part.size();) {
                const std::size_t end = std::min(part.find('+', at), part.size());
                int line = 0;
                const auto [p, err] = std::from_chars(part.data() + at, part.data() + end, line);
                require(err == std::errc() && p == part.data() + end && line >= 2, "--truth ", text, ": '", part,
                        "': skip=N+M... names trace lines, 2 or more (line 1 is the header)");
                out.skip.push_back(line);
                at = end + 1;
            }
        } else if (part.starts_with("engine.") && part.find('=') > 7 && part.find('=') != std::string::npos) {
            out.engine_params += cat(out.engine_params.empty() ? "" : ",", part.substr(7));
        } else {
            require(part.find('=') != std::string::npos && part.front() != '=', "--truth ", text, ": '", part,
                    "' is neither an engine setting k=v, engine.k=v, skip=N+M, count-reuse nor new-chains");
            out.params += cat(out.params.empty() ? "" : ",", part);
        }
    }
    return out;
}

}  // namespace kvweld::targets
