#!/usr/bin/env bash
# Sets up, builds, and runs the whole test suite (unit, integration, e2e; gpu
# tests skip cleanly without a GPU). Arguments go to ctest (e.g. -L unit).
#
#   scripts/test.sh --sanitize   ASan + UBSan build (build-asan/), whole suite
#   scripts/test.sh --tsan       TSan build (build-tsan/), unit and integration
#                                tests (the client's and server's threads)
#   scripts/test.sh --fuzz       clang + libFuzzer + ASan/UBSan build (build-fuzz/):
#                                each fuzz target for 60 s from its seed corpus
# The sanitizer builds take about 8 minutes each on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=""
if [ "${1:-}" = "--sanitize" ] || [ "${1:-}" = "--tsan" ] || [ "${1:-}" = "--fuzz" ]; then
  mode="$1"
  shift
fi
scripts/setup.sh
case "$mode" in
  --sanitize)
    flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
    RGPU_BUILD_DIR=build-asan RGPU_BUILD_TYPE=Debug scripts/build.sh -DCMAKE_CXX_FLAGS="$flags -O1" \
      -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags"
    cd build-asan
    ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$(nproc)" --timeout 600 -L "unit|integration" "$@"
    # CUDA programs are not built with the sanitizers: preload their runtimes.
    LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
      ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 \
      ctest --output-on-failure -j "$(nproc)" --timeout 600 -L e2e "$@"
    ;;
  --tsan)
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    RGPU_BUILD_DIR=build-tsan RGPU_BUILD_TYPE=Debug scripts/build.sh -DCMAKE_CXX_FLAGS="$flags -O1" \
      -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags"
    cd build-tsan
    TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j "$(nproc)" --timeout 600 -L "unit|integration" "$@"
    ;;
  --fuzz)
    flags="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer"
    CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DRGPU_LIBFUZZER=ON \
      -DCMAKE_CXX_FLAGS="$flags -O1" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
    cmake --build build-fuzz -j "$(nproc)" --target fuzz_frame fuzz_fatbin fuzz_ptx fuzz_dispatch rgpu_test_fatbins rgpu_ptx_bench_kernels
    cd build-fuzz
    ctest --output-on-failure --timeout 600 -R '^Fuzz\.' "$@"
    ;;
  *)
    scripts/build.sh
    cd "${RGPU_BUILD_DIR:-build}"
    ctest --output-on-failure -j "$(nproc)" --timeout 600 "$@"
    ;;
esac
