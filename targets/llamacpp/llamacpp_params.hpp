// llama.cpp's settings (options.params), one list for its plugin's parser,
// its reuse rule and the settings a seed draws.
#pragma once

#include <string>
#include <vector>

namespace kvweld::targets {

inline const std::vector<std::string> kLlamacppSettings = {"kv_unified", "graph_reuse", "kv_type", "flash_attn",
                                                           "rope_scale", "n_ubatch",   "kv_cells", "pooling",
                                                           "arch",       "n_rs_seq",    "swa_full", "swa_window"};

}  // namespace kvweld::targets
