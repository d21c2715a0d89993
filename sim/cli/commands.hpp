// The kvweld command line: each subcommand registers itself on the app and,
// when chosen, stores the function that runs it.
#pragma once

#include "engine/cat.hpp"
#include "engine/error.hpp"

#include <CLI/CLI.hpp>

#include <functional>

namespace kvweld::cli {

void add_decode_command(CLI::App& app, std::function<int()>& action);

}  // namespace kvweld::cli
