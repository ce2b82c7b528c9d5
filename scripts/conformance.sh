#!/usr/bin/env bash
# Runs a set of CUDA programs through rgpu (rgpu-run --local: a private
# sim-backend server) and prints one PASS/FAIL line per program and a total.
# A program passes when it exits 0; each checks its own results against the
# host. The programs are the examples and the end-to-end test programs that
# exercise the runtime API broadly (streams, memory of every kind offered,
# hints, pools, graphs, device malloc, compiler-emitted PTX shapes, cuBLAS/cuBLASLt,
# Thrust and CUB). Sizes below the programs' defaults are named in the list.
#   scripts/conformance.sh          build (incrementally) and run
#   RGPU_BUILD_DIR=dir              another build directory
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null || { echo "conformance: the build failed (run scripts/build.sh)" >&2; exit 2; }
build="$(pwd)/${RGPU_BUILD_DIR:-build}"
run="$build/client/rgpu-run"
e2e="$build/tests/e2e"
ex="$build/examples"
programs=(
  "$ex/device_query"
  "$ex/memory"
  "$ex/streams"
  "$ex/vector_add"
  "$ex/matmul"
  "$ex/reduction"
  "$ex/mlp_train"
  "$ex/cnn_train"
  "$e2e/streams_ptds"
  "$e2e/memory_ptds"
  "$e2e/ptx_only_matmul"
  "$e2e/launch_check"
  "$e2e/hints"
  "$e2e/compiled_ptx"
  "$e2e/device_malloc"
  "$e2e/mempool"
  "$e2e/graphs"
  "$e2e/graph_native"
  "$e2e/conditional"
  "$e2e/managed"
  "$e2e/mapped"
  "$e2e/managed_var"
  "$e2e/arrays"
  "$e2e/textures"
  "$e2e/array_graphs"
  "$e2e/recursion"
  "$e2e/library"
  "$e2e/cooperative"
  "$e2e/clusters"
  "$e2e/fp8"
  "$e2e/async_copy"
  "$e2e/tensor_cores"
  "$e2e/mma_sync"
  "$e2e/cublas_check"
  "$e2e/cublaslt_check"
  "$e2e/cufft_check"
  "$e2e/cusolver_check"
  "$e2e/cusparse_check"
  "$e2e/cudnn_check"
  "$e2e/thrust_cub 1000000"
)
pass=0; fail=0
log="$build/conformance"
mkdir -p "$log"
for entry in "${programs[@]}"; do
  read -r -a argv <<<"$entry"
  name="$(basename "${argv[0]}")${argv[1]:+ ${argv[*]:1}}"
  start=$(date +%s.%N)
  if timeout 600 "$run" --local "${argv[@]}" >"$log/$(basename "${argv[0]}").out" 2>&1; then
    result=PASS; pass=$((pass + 1))
  else
    result=FAIL; fail=$((fail + 1))
  fi
  printf '%s %-28s %6.1f s\n' "$result" "$name" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
done
echo "conformance: $pass of $((pass + fail)) programs pass (outputs in $log)"
[ "$fail" -eq 0 ]
