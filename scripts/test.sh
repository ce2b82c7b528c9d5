#!/usr/bin/env bash
# Sets up, builds, and runs the whole test suite (unit, integration, e2e; gpu
# tests skip cleanly without a GPU). Arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${RGPU_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 600 "$@"
