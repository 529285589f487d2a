#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for a bounded time (default 60 s each).
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET]
#
# With a nightly toolchain: cargo fuzz (libFuzzer, coverage-guided, address
# sanitizer), installing cargo-fuzz from crates.io if missing. New corpus
# entries go to fuzz/work/TARGET (ignored); the committed seeds in
# fuzz/corpus/TARGET are only read. Crashes land in fuzz/artifacts/TARGET.
# Without nightly (or with FUZZ_STABLE=1): the stable driver `stable-fuzz` runs the same target
# bodies over the seeds and seeded random mutations of them (no coverage
# feedback). Either way the script exits non-zero on the first crash: turn
# the saved input into a regression test in the crate at fault.
#
# Not part of CI (scripts/test.sh): fuzzing is open-ended and nightly-only.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-60}"
targets=(jpeg wire rebatch)

stable() {
    echo "== $1: the stable driver (seeds + seeded random mutations, no coverage feedback)"
    cargo build --release --bin stable-fuzz
    for t in "${targets[@]}"; do
        echo "== stable-fuzz $t (${secs} s)"
        ./target/release/stable-fuzz "$t" "$secs"
    done
}

if [[ -n "${FUZZ_STABLE:-}" ]]; then
    stable "FUZZ_STABLE is set"
elif ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    stable "no nightly toolchain (rustup toolchain list)"
elif ! cargo fuzz --version >/dev/null 2>&1 && ! cargo install cargo-fuzz --locked; then
    stable "cargo-fuzz is missing and cannot be installed"
else
    for t in "${targets[@]}"; do
        echo "== cargo +nightly fuzz run $t (${secs} s)"
        mkdir -p "work/$t"
        cargo +nightly fuzz run --features libfuzzer "$t" "work/$t" "corpus/$t" -- \
            -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10
    done
fi
