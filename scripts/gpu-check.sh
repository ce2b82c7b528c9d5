#!/usr/bin/env bash
# One command for a GPU host: proves rgpu on a real device and prints one summary.
#
#   1. set up and build (all cores);
#   2. probe the NVIDIA driver the way rgpu-server's `backend = "auto"` does;
#   3. the `gpu` tests: examples and end-to-end programs through rgpu-server's
#      CUDA backend and natively against NVIDIA's runtime, compared;
#   4. a loopback rgpu-server with backend = "cuda" and development
#      certificates; the examples through it; cufft_check,
#      cusolver_check, cusparse_check and cudnn_check natively and through
#      it, their lines compared; examples/cnn_train both ways;
#   5. gpu_bench natively and through rgpu: round-trip latency, launch rate,
#      H2D/D2H bandwidth, and the ratios;
#   6. the worker sandbox's refusals with NVIDIA's driver;
#   7. striped bulk transfer (rgpu-bench --stripes) on a host with many cores;
#   8. a training loop moved twice between workers on the CUDA backend
#      (rgpu-smi --migrate, docs/migration.md), its lines compared with an
#      unmoved run's, and the pauses; a session holding a CUDA array with a
#      texture and a surface object moved once; device malloc on rgpu's own
#      heap (device_malloc), and a session keeping blocks of it moved once.
# Finishes within 9 minutes on a 16-core host with one GPU. Exit status 0 only
# when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
t_start=$(date +%s)
build="$(pwd)/${RGPU_BUILD_DIR:-build}"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
declare -a summary
status=0
note() { summary+=("$1"); echo "== $1"; }
elapsed() { echo "$(( $(date +%s) - t_start ))s"; }

if ! scripts/setup.sh; then note "setup: FAILED"; exit 1; fi
if ! scripts/build.sh >"${TMPDIR:-/tmp}/rgpu-gpu-check-build.log" 2>&1; then
  tail -40 "${TMPDIR:-/tmp}/rgpu-gpu-check-build.log"
  note "build: FAILED"
  exit 1
fi
note "build: ok ($(elapsed))"

command -v nvidia-smi >/dev/null && nvidia-smi -L
if ! probe=$("$build/server/rgpu-server" --probe-cuda); then
  note "cuda probe: FAILED: $probe"
  exit 1
fi
note "cuda probe: $(echo "$probe" | tr '\n' ' ')"

# 3. gpu-labelled tests (they start their own rgpu-server with backend = "cuda").
gpu_log="$build/gpu-check-ctest.log"
(cd "$build" && ctest -L gpu --output-on-failure --timeout 300) >"$gpu_log" 2>&1
rc=$?
grep -q "Skipped\|Not Run" "$gpu_log" && rc=1  # on a GPU host nothing may skip
note "gpu tests: $(grep -E 'tests passed|tests failed' "$gpu_log" | tail -1) [rc $rc] ($(elapsed))"
[ $rc -eq 0 ] || { status=1; tail -60 "$gpu_log"; }

# 4. A server on loopback with the CUDA backend.
work="$build/gpu-check" && rm -rf "$work" && mkdir -p "$work"
"$build/server/rgpu-server" --make-dev-certs "$work" --client-cert check >/dev/null
cat >"$work/server.toml" <<TOML
listen = "127.0.0.1:0"
backend = "cuda"
[tls]
cert = "server.pem"
key = "server.key"
ca = "ca.pem"
[[users]]
name = "check"
cert_cn = "check"
TOML
"$build/server/rgpu-server" --config "$work/server.toml" --port-file "$work/port" 2>"$work/server.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do [ -s "$work/port" ] && break; kill -0 $server 2>/dev/null || break; sleep 0.05; done
if [ ! -s "$work/port" ]; then
  cat "$work/server.log"
  note "rgpu-server --backend=cuda: FAILED to start"
  exit 1
fi
port=$(cat "$work/port")
cat >"$work/client.toml" <<TOML
server = "127.0.0.1:$port"
[tls]
ca = "ca.pem"
cert = "check.pem"
key = "check.key"
TOML
rgpu_env=(env RGPU_CONFIG="$work/client.toml" LD_LIBRARY_PATH="$build/client")
native_env=(env LD_LIBRARY_PATH="$cuda_home/lib64")
passed=0; failed=0
for ex in device_query memory streams vector_add matmul reduction; do
  if "${rgpu_env[@]}" "$build/examples/$ex" >"$work/$ex.out" 2>&1; then passed=$((passed + 1)); else
    failed=$((failed + 1)); status=1; echo "-- $ex through rgpu failed:"; cat "$work/$ex.out"; fi
done
head -3 "$work/device_query.out"
note "examples through rgpu (cuda backend): $passed passed, $failed failed"
# cuFFT, cuSOLVER, cuSPARSE and cuDNN (docs/cufft.md, cusolver.md, cusparse.md, cudnn.md): their check programs
# with NVIDIA's libraries, natively and through rgpu (the worker's NVIDIA
# plans and handles, the client's work areas); the other lines (refusals,
# devInfo, workspace sizes) show whether rgpu answers as NVIDIA's libraries
# do -- apart from what rgpu refuses (half precision, sytrf, SpGEMM, CTC, int32 activations, operation graphs).
for lib in cufft cusolver cusparse cudnn; do
  for how in native rgpu; do
    if [ $how = native ]; then envs=("${native_env[@]}"); else envs=("${rgpu_env[@]}"); fi
    "${envs[@]}" "$build/tests/e2e/${lib}_check" --no-overrun >"$work/$lib-$how.out" 2>&1 || status=1
    note "${lib}_check ($how): $(grep -c ' ok$' "$work/$lib-$how.out") ok, $(tail -1 "$work/$lib-$how.out")"
  done
  skip='relative error|^\[|half.precision|^sytrf|^SpGEMM|^cudnnCreateCTCLoss|^relu on int32|^backend graph'
  diff <(grep -vE "$skip" "$work/$lib-native.out") <(grep -vE "$skip" "$work/$lib-rgpu.out") ||
    { status=1; note "${lib}_check: rgpu's lines differ from NVIDIA's (above)"; }
done
# The convolutional network of examples/cnn_train.cu (cuDNN, cuRAND, cuBLAS), natively and through rgpu.
for how in native rgpu; do
  if [ $how = native ]; then envs=("${native_env[@]}"); else envs=("${rgpu_env[@]}"); fi
  "${envs[@]}" "$build/examples/cnn_train" 8 >"$work/cnn-$how.out" 2>&1 || status=1
  note "cnn_train ($how): $(tail -1 "$work/cnn-$how.out")"
done

# 5. The benchmark, natively and through rgpu, side by side.
bench="$build/tests/e2e/gpu_bench"
"${native_env[@]}" "$bench" >"$work/bench-native.out" 2>&1 || status=1
"${rgpu_env[@]}" "$bench" >"$work/bench-rgpu.out" 2>&1 || status=1
summary+=("$(printf '%-22s %14s %14s %8s' figure native rgpu rgpu/native)")
while read -r _ name value unit; do
  base=$(awk -v n="$name" '$1 == "figure" && $2 == n { print $3 }' "$work/bench-native.out")
  ratio=$(awk -v a="${base:-0}" -v b="$value" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "-" }')
  summary+=("$(printf '%-22s %14s %14s %8s  %s' "$name" "${base:-n/a}" "$value" "$ratio" "$unit")")
done < <(grep '^figure ' "$work/bench-rgpu.out")
grep -q "gpu_bench: done" "$work/bench-native.out" || { status=1; echo "-- gpu_bench natively:"; cat "$work/bench-native.out"; }
grep -q "gpu_bench: done" "$work/bench-rgpu.out" || { status=1; cat "$work/bench-rgpu.out"; }

kill $server 2>/dev/null; wait $server 2>/dev/null
trap - EXIT
# 7. Striped bulk on a host with more cores than stripes (README, issue 18):
# 256 MiB copies with 0, 3 and 7 stripes against one raw TLS stream (sim backend).
if timeout 300 "$build/tests/bench/rgpu-bench" --stripes 0,3,7 >"$work/stripes.out" 2>&1; then
  while read -r line; do summary+=("$line"); done < <(grep -E "^(raw TLS|H2D|D2H)" "$work/stripes.out")
  note "striped bulk: rgpu-bench --stripes 0,3,7 ran"
else
  status=1
  tail -20 "$work/stripes.out"
  note "striped bulk: rgpu-bench --stripes FAILED"
fi
# 8. Moving a session on the CUDA backend: memory mapped again at its
# addresses, module variables where the driver put them (docs/migration.md).
mig="$work/migrate" && mkdir -p "$mig/checkpoints"
openssl rand -hex 32 >"$mig/key" && chmod 600 "$mig/key"
sed -e 's/^cert_cn = "check"$/cert_cn = "check"\nadmin = true/' "$work/server.toml" >"$mig/server.toml"
printf '[checkpoint]\ndir = "%s"\nkey_file = "%s"\n' "$mig/checkpoints" "$mig/key" >>"$mig/server.toml"
for f in server.pem server.key ca.pem check.pem check.key; do cp "$work/$f" "$mig/"; done
"$build/server/rgpu-server" --config "$mig/server.toml" --port-file "$mig/port" 2>"$mig/server.log" &
mserver=$!
for _ in $(seq 600); do [ -s "$mig/port" ] && break; kill -0 $mserver 2>/dev/null || break; sleep 0.05; done
sed -e "s/^server = .*/server = \"127.0.0.1:$(cat "$mig/port" 2>/dev/null)\"/" "$work/client.toml" >"$mig/client.toml"
for f in ca.pem check.pem check.key; do cp "$work/$f" "$mig/"; done
mig_env=(env RGPU_CONFIG="$mig/client.toml" LD_LIBRARY_PATH="$build/client")
program="$build/tests/e2e/migrate_client"
steps() { grep -E '^(step|big:|timing:|done)' "$1"; }
# migrate_client ARGS with its output in OUT, its session moved once at step AT:
# prints rgpu-smi's answer once the program has ended.
move_once() {
  local out=$2 client sid
  # shellcheck disable=SC2086  # ARGS are words
  "${mig_env[@]}" "$program" $1 >"$out" 2>&1 &
  client=$!
  for _ in $(seq 600); do grep -q "^step $3 " "$out" && break; sleep 0.05; done
  sid=$(grep -o "session [0-9]*: user 'check' placed" "$mig/server.log" | tail -1 | awk '{print $2}' | tr -d :)
  "${mig_env[@]}" "$build/client/rgpu-smi" --migrate "$sid" 2>&1 | tail -1
  wait $client
}
"${mig_env[@]}" "$program" 12 0 64 >"$mig/alone.out" 2>&1
"${mig_env[@]}" "$program" 12 300 64 >"$mig/moved.out" 2>&1 &
client=$!
moves=""
for at in 3 8; do
  for _ in $(seq 600); do grep -q "^step $at " "$mig/moved.out" && break; sleep 0.05; done
  sid=$(grep -o "session [0-9]*: user 'check' placed" "$mig/server.log" | tail -1 | awk '{print $2}' | tr -d :)
  moves+="$("${mig_env[@]}" "$build/client/rgpu-smi" --migrate "$sid" 2>&1 | tail -1); "
done
wait $client
# A session holding a CUDA array with a texture and a surface object, moved
# once: the driver must hand out the objects' handles again (docs/migration.md).
array_move="$(move_once "6 300 0 array" "$mig/array.out" 2)"
# Device malloc on rgpu's own heap (docs/cuda-backend.md): the driver JIT-compiles
# rgpu's allocator; then a session keeping 144 blocks of it moved once.
"${mig_env[@]}" "$build/tests/e2e/device_malloc" >"$mig/malloc.out" 2>&1
heap_move="$(move_once "8 300 0 heap" "$mig/heap.out" 3)"
if grep -q "device_malloc: all checks passed" "$mig/malloc.out" &&
   grep -q "heap: 0 words wrong in the 144 kept blocks" "$mig/heap.out" && grep -q "moved to a new worker" <<<"$heap_move"; then
  note "migration (cuda backend): device malloc on rgpu's heap passed; 144 kept blocks moved: $heap_move"
else
  status=1
  tail -20 "$mig/malloc.out" "$mig/heap.out"
  note "migration (cuda backend): device malloc on rgpu's heap FAILED: $heap_move"
fi
kill $mserver 2>/dev/null; wait $mserver 2>/dev/null
if grep -q "array: 0 wrong through the texture, surface write landed" "$mig/array.out" &&
   grep -q "moved to a new worker" <<<"$array_move"; then
  note "migration (cuda backend): an array with its texture and surface objects moved: $array_move"
else
  status=1
  tail -20 "$mig/array.out"
  note "migration (cuda backend): array FAILED: $array_move"
fi
note "the driver's texture and surface object values: $(grep '^objects of device' "$mig/array.out" | tr '\n' ' ')"
if [ -n "$(steps "$mig/alone.out")" ] && [ "$(steps "$mig/alone.out")" = "$(steps "$mig/moved.out")" ] &&
   grep -q "big: 64 MiB, 0 words wrong" "$mig/moved.out"; then
  note "migration (cuda backend): moved twice, every line as unmoved: $moves"
else
  status=1
  tail -20 "$mig/moved.out" "$mig/server.log"
  note "migration (cuda backend): FAILED: $moves"
fi
# What zeroing fresh device memory ([cuda] scrub) cost the workers (docs/security.md).
scrub=$(grep -o "scrub: .*" "$work/server.log" | tail -3 | tr "\n" ";")
note "scrub ([cuda] scrub = true), the last workers' figures: ${scrub:-none logged}"
# 6. The worker's system call allow list (docs/security.md) with NVIDIA's driver.
refused=$(grep -o "the sandbox refused system call [0-9]*" "$work/server.log" | awk '{print $NF}' | sort -un | tr '\n' ' ')
if [ -n "$refused" ]; then
  status=1
  note "worker sandbox: libcuda made calls not on the allow list (server/daemon/worker_syscalls.cc): $refused"
else
  note "worker sandbox: no system call refused with libcuda"
fi
echo
echo "================ rgpu gpu-check summary ($(elapsed)) ================"
printf '%s\n' "${summary[@]}"
[ $status -eq 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
exit $status
