#!/usr/bin/env bash
# Runs every test of batchcast: the Rust workspace (unit, property and
# multi-process tests) and, when the Python package is present, its pytest
# suite (scripts/test-python.sh makes a virtualenv and installs what it needs).
set -euo pipefail
cd "$(dirname "$0")/.."
# Retry crates.io downloads on a flaky network (cargo's default is 3 tries).
export CARGO_NET_RETRY="${CARGO_NET_RETRY:-10}"

# The Rust test build takes about 2.5 GB under target/, the release build of
# the Python extension 0.4 GB, and the Python test environment 6.7 GB.
need_gb=3
[ -d "${BATCHCAST_VENV:-.venv}" ] || need_gb=10
free_gb=$(( $(df -Pk . | awk 'NR==2 {print $4}') / 1048576 ))
if [ "$free_gb" -lt "$need_gb" ]; then
  echo "test: warning: ${free_gb} GB of disk is free here and a first run needs about ${need_gb} GB (target/ and the Python environment). If the build stops with 'No space left on device', free some space (for example \`cargo clean\` in another checkout) and run this again." >&2
fi

echo "== Rust tests (cargo test)"
cargo test --locked

if [ -f scripts/test-python.sh ]; then
  echo "== Python tests (scripts/test-python.sh)"
  bash scripts/test-python.sh
fi
