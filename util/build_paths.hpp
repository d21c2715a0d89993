#pragma once
// The absolute paths a test program needs (the source tree, the plugins this
// build makes), by name. They are not compiled into the test sources: a
// macro such as KVWELD_SOURCE_DIR expands to kvweld_build_path("KVWELD_SOURCE_DIR"),
// and one generated file per program (cmake/build_paths.cmake) holds the
// table. So the test sources compile to the same object in every clone,
// and ccache reuses them (cmake/ccache.cmake).
#include <string_view>

// The path named `name`; a name the program's table lacks stops the program
// with a message naming it (a CMake list out of step with a test).
const char* kvweld_build_path(std::string_view name);
