#!/usr/bin/env bash
# The whole product in one command: set up, build, make development
# certificates, start rgpu-server (sim backend) on loopback, run the examples
# through it unchanged, show what they print, stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build="$(pwd)/${RGPU_BUILD_DIR:-build}"
demo="$build/demo"
rm -rf "$demo" && mkdir -p "$demo"

"$build/server/rgpu-server" --make-dev-certs "$demo" --client-cert demo >/dev/null
cat >"$demo/server.toml" <<TOML
listen = "127.0.0.1:0"
log_level = "info"
backend = "sim"
[tls]
cert = "server.pem"
key = "server.key"
ca = "ca.pem"
[[users]]
name = "demo"
cert_cn = "demo"
admin = true
[[sim.devices]]
name = "rgpu sim H100"
memory = "16GiB"
compute_capability = "9.0"
sm_count = 132
TOML
"$build/server/rgpu-server" --config "$demo/server.toml" --port-file "$demo/port" 2>"$demo/server.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$demo/port" ] && break; sleep 0.05; done
port=$(cat "$demo/port")
cat >"$demo/client.toml" <<TOML
server = "127.0.0.1:$port"
[tls]
ca = "ca.pem"
cert = "demo.pem"
key = "demo.key"
TOML
echo "== rgpu-server listening on 127.0.0.1:$port (sim backend); client config $demo/client.toml"
export RGPU_CONFIG="$demo/client.toml" LD_LIBRARY_PATH="$build/client${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
for ex in device_query memory streams vector_add matmul reduction; do
  echo
  echo "== examples/$ex.cu (built with nvcc -cudart shared, run unchanged)"
  "$build/examples/$ex" || status=1
done
echo
echo "== examples/mlp_train.cu (nvcc -cudart shared ... -lcublas): a small network learns, cuBLAS through rgpu"
"$build/examples/mlp_train" 15 || status=1
echo
echo "== examples/cnn_train.cu (nvcc -cudart shared ... -lcudnn -lcublas -lcurand): a convolutional network learns"
"$build/examples/cnn_train" 8 || status=1
echo
echo "== rgpu-smi: the server's pool while a benchmark program (tests/bench/gpu_bench.cu) runs"
"$build/tests/e2e/gpu_bench" >"$demo/gpu_bench.out" &
bench=$!
sleep 0.6
"$build/client/rgpu-smi" || status=1
"$build/client/rgpu-smi" --query-gpu=index,name,memory.used,memory.total,sessions --format=csv || status=1
wait $bench || status=1
sed -e 's/^/   /' "$demo/gpu_bench.out"
echo
echo "== the same program through rgpu-run --local (a private server for one run)"
"$build/client/rgpu-run" --local "$build/examples/device_query" || status=1
echo
echo "== server log"
sed -e 's/^/   /' "$demo/server.log"
exit $status
