# llama.cpp, built once by scripts/setup (scripts/setup-llama) into a cache
# outside the checkout. When it is absent the llama.cpp tests are not built
# and one ctest entry says why (a visible skip), unless KVWELD_REQUIRE_LLAMA
# (the option, or the environment variable scripts/test sets) makes a
# missing llama.cpp a configure error: CI must never pass with no llama.cpp
# coverage. Under it the llama.cpp gtests fail where they would skip.
set(_kvweld_cache "$ENV{KVWELD_CACHE}")
if(NOT _kvweld_cache)
  set(_kvweld_cache "$ENV{HOME}/.cache/kvweld")
endif()
set(KVWELD_LLAMA_PREFIX "${_kvweld_cache}/llama.cpp/install" CACHE PATH "llama.cpp install prefix (scripts/setup-llama)")
option(KVWELD_LLAMA "Build the llama.cpp engine tests when llama.cpp is found" ON)
option(KVWELD_REQUIRE_LLAMA "A missing llama.cpp is a configure error (so is KVWELD_REQUIRE_LLAMA=1 in the environment)" OFF)
set(KVWELD_LLAMA_REQUIRED OFF)
if(KVWELD_REQUIRE_LLAMA OR "$ENV{KVWELD_REQUIRE_LLAMA}" STREQUAL "1")
  set(KVWELD_LLAMA_REQUIRED ON)
endif()
set(KVWELD_HAVE_LLAMA OFF)
if(KVWELD_LLAMA)
  find_package(llama CONFIG QUIET PATHS "${KVWELD_LLAMA_PREFIX}" NO_DEFAULT_PATH)
  if(llama_FOUND)
    set(KVWELD_HAVE_LLAMA ON)
    message(STATUS "kvweld: llama.cpp found at ${KVWELD_LLAMA_PREFIX}")
  else()
    set(KVWELD_LLAMA_MISSING "llama.cpp not found at ${KVWELD_LLAMA_PREFIX}: run scripts/setup")
    if(KVWELD_LLAMA_REQUIRED)
      message(FATAL_ERROR "kvweld: ${KVWELD_LLAMA_MISSING} (KVWELD_REQUIRE_LLAMA is set: "
                          "CI does not pass without llama.cpp; KVWELD_REQUIRE_LLAMA=0 to build without it)")
    endif()
    message(STATUS "kvweld: ${KVWELD_LLAMA_MISSING}; its tests skip")
  endif()
else()
  set(KVWELD_LLAMA_MISSING "KVWELD_LLAMA=OFF in this build")
endif()
