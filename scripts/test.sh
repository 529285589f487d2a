#!/usr/bin/env bash
# Runs every test of batchcast: the Rust workspace (unit, property and
# multi-process tests) and, when the Python package is present, its pytest
# suite (scripts/test-python.sh makes a virtualenv and installs what it needs).
set -euo pipefail
cd "$(dirname "$0")/.."
# Retry crates.io downloads on a flaky network (cargo's default is 3 tries).
export CARGO_NET_RETRY="${CARGO_NET_RETRY:-10}"

echo "== Rust tests (cargo test)"
cargo test --locked

if [ -f scripts/test-python.sh ]; then
  echo "== Python tests (scripts/test-python.sh)"
  bash scripts/test-python.sh
fi
