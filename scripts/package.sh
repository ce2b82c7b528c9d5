#!/usr/bin/env bash
# Builds the Debian packages rgpu-client and rgpu-server (cmake/packaging.cmake)
# into build/packages/ (or $RGPU_BUILD_DIR/packages). Extra arguments go to CMake.
# Install them with `apt install ./build/packages/rgpu-*.deb` (docs/operations.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "$@"
build="${RGPU_BUILD_DIR:-build}"
(cd "$build" && cpack -G DEB >/dev/null)
ls -1 "$build"/packages/rgpu-client_*.deb "$build"/packages/rgpu-server_*.deb
