#!/usr/bin/env bash
# One of llama.cpp's upstream-style tests of a finding (tests/test-<id>.cpp,
# carried by docs/findings/<id>.patch and built in llama.cpp's own tree by
# scripts/setup-llama), run from a cached build: it must exit WANT (1: the
# bug shown, on the pinned build; 0: not, on the fixed one). A cache
# without the test skips (77), naming what builds it, unless REQUIRED is ON
# (KVWELD_REQUIRE_LLAMA, as in CI): then it fails.
#   upstream_test.sh TEST_BINARY WANT REQUIRED
set -uo pipefail
bin=$1 want=$2 required=${3:-OFF}
if [[ ! -x $bin ]]; then
  echo "no $bin: scripts/setup-llama builds each patch's test into the pinned build and the fixed one"
  [[ $required == ON ]] && exit 1
  exit 77
fi
out=$(GGML_NO_BACKTRACE=1 "$bin" 2>&1); rc=$?
printf '%s\n' "$out" | tail -8
if [[ $rc != "$want" ]]; then
  echo "upstream_test: $bin exited $rc, expected $want ($([[ $want == 1 ]] && echo 'the bug shown on the unfixed build' || echo 'no bug with the fix'))"
  exit 1
fi
echo "upstream_test: $bin exited $rc, as it must"
