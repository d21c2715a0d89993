# A compiler cache shared by every clone on this machine, so that a second
# clean clone (CI's warm run) compiles little. Off when ccache is missing
# (scripts/setup installs it) or with -DKVWELD_CCACHE=OFF. The cache lives
# beside llama.cpp's builds: $KVWELD_CACHE/ccache (default
# ~/.cache/kvweld/ccache).
#
# Why a hit across clones is also a correct hit: base_dir makes the paths
# under the source root relative in what ccache hashes, and
# -ffile-prefix-map makes the object itself name them relative (__FILE__ in
# KVWELD_ASSERT, the debug info), so an object made in one clone is the
# object the other would make. A definition that names an absolute path
# (a test's plugin path) is hashed as written: that file misses, as it must.
option(KVWELD_CCACHE "Compile through ccache when it is found" ON)
find_program(KVWELD_CCACHE_PROGRAM ccache)
if(KVWELD_CCACHE AND KVWELD_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  if(DEFINED ENV{KVWELD_CACHE})
    set(_ccache_dir "$ENV{KVWELD_CACHE}/ccache")
  else()
    set(_ccache_dir "$ENV{HOME}/.cache/kvweld/ccache")
  endif()
  set(KVWELD_CCACHE_LAUNCHER ${CMAKE_COMMAND} -E env
      CCACHE_DIR=${_ccache_dir} CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1
      CCACHE_MAXSIZE=6G ${KVWELD_CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${KVWELD_CCACHE_LAUNCHER})
  set(CMAKE_C_COMPILER_LAUNCHER ${KVWELD_CCACHE_LAUNCHER})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${KVWELD_CCACHE_LAUNCHER})
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-ffile-prefix-map=${PROJECT_SOURCE_DIR}/=>)
  message(STATUS "kvweld: compiling through ccache (${_ccache_dir})")
endif()
