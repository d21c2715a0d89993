#!/bin/bash -eu
# Builds kvweld's fuzz targets under the OSS-Fuzz build contract: $CC, $CXX,
# $CFLAGS, $CXXFLAGS (sanitizer and coverage flags), $LIB_FUZZING_ENGINE,
# $OUT (where the binaries go), $WORK (scratch), run from the source root
# ($SRC/kvweld in the image). Beside each binary in $OUT it ships
# <target>_seed_corpus.zip, <target>.dict and <target>.options.
#
# Locally: scripts/cflite-check runs this with clang and libFuzzer.
# fuzz/targets: each target and its max_len.
declare -A max_len
while read -r name len; do
  if [[ $name =~ ^[a-z] ]]; then max_len[$name]=$len; fi
done < fuzz/targets
targets=("${!max_len[@]}")
build=${WORK:?}/kvweld-build

# CMake takes CC, CXX, CFLAGS and CXXFLAGS from the environment.
cmake -S . -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DKVWELD_FUZZ=ON -DKVWELD_FUZZ_ENGINE="$LIB_FUZZING_ENGINE" \
  -DKVWELD_TESTS=OFF -DKVWELD_BENCH=OFF -DKVWELD_CUDA=OFF -DKVWELD_NATIVE=OFF \
  -DKVWELD_FAULTS=ON -DCMAKE_UNITY_BUILD=ON
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" fuzz_dicts

for t in "${targets[@]}"; do
  cp "$build/fuzz/$t" "$OUT/"
  # The op table's dictionaries are built (fuzz/make_op_dicts.cpp), the rest written.
  if [[ -f $build/fuzz/dict/$t.dict ]]; then cp "$build/fuzz/dict/$t.dict" "$OUT/$t.dict"
  else cp "fuzz/dict/$t.dict" "$OUT/$t.dict"; fi
  rm -f "$OUT/${t}_seed_corpus.zip"
  zip -q -j "$OUT/${t}_seed_corpus.zip" fuzz/corpus/"$t"/*
  printf '[libfuzzer]\ndict = %s.dict\nmax_len = %s\n' "$t" "${max_len[$t]}" > "$OUT/$t.options"
done
