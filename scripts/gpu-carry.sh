#!/usr/bin/env bash
# Fills .gpu-carry/ with what scripts/gpu-check.sh needs on a GPU machine
# that has no network: the abi3 wheel of batchcast, the stripped release
# binary, and wheels for Python 3.12 of tensorsocket 0.0.5, pyzmq, tornado,
# pytest (and its dependencies) and nvidia-ml-py. Run it from the
# repository root on the build machine (it needs the venv of
# scripts/test-python.sh for maturin and pip); the folder is ignored by git
# and travels with the run as a carried path.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${BATCHCAST_VENV:-$root/.venv}"
[ -x "$venv/bin/maturin" ] || { echo "gpu-carry: no $venv/bin/maturin; run scripts/test-python.sh once" >&2; exit 2; }
carry="$root/.gpu-carry"
rm -rf "$carry"
mkdir -p "$carry/wheels"

echo "gpu-carry: the wheel (maturin build --release)" >&2
"$venv/bin/maturin" build --release --strip --quiet -o "$carry" >&2

echo "gpu-carry: the binary (cargo build --release -p batchcast-cli), stripped" >&2
cargo build --release --locked --quiet -p batchcast-cli
strip -o "$carry/batchcast" target/release/batchcast

echo "gpu-carry: wheels for Python 3.12" >&2
"$venv/bin/pip" download --quiet --no-deps --only-binary :all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --implementation cp -d "$carry/wheels" \
    tensorsocket==0.0.5 "pyzmq==27.3.0" "tornado==6.6.1" pytest==9.2.0 "pluggy==1.7.0" \
    "iniconfig==2.3.1" "packaging==26.4" "pygments==2.21.0" "nvidia-ml-py==13.615.71"
du -sh "$carry" >&2
