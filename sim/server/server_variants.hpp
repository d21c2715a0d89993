// The server ops' variants, in one table: what a request or an action can
// be besides its kind (streamed, cancelled, several completions, pinned,
// sampled, with its own LoRA scales, ...). The simulator counts each op's
// variants into its tally; `swarm --require-terms` fails where one was
// never drawn over the seeds, as it fails where a settings field never
// took a second value.
#pragma once

#include "sim/server/server_ops.hpp"

#include <string_view>

namespace kvweld::sim::server {

struct ServerOpVariant {
    std::string_view name;
    bool (*in)(const ServerOp& op);
};

extern const ServerOpVariant kServerOpVariants[];
extern const std::size_t kServerOpVariantCount;

}  // namespace kvweld::sim::server
