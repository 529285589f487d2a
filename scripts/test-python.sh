#!/usr/bin/env bash
# Builds the batchcast Python package into a virtualenv and runs its tests.
#
#   scripts/test-python.sh                 # everything
#   scripts/test-python.sh -m "not slow"   # extra arguments go to pytest
#
# Needs Rust (cargo) and python3 (3.9+) with the venv module; everything
# else (maturin, numpy, torch, pytest, timm, lightning, accelerate) is installed into $BATCHCAST_VENV
# (default .venv) on the first run. Later runs only rebuild what changed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${BATCHCAST_VENV:-$root/.venv}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    echo "test-python: creating $venv" >&2
    "$python" -m venv "$venv"
fi
py="$venv/bin/python"

if ! "$py" -c "import maturin, numpy, torch, pytest, torchvision, PIL, tensorsocket, timm, lightning, accelerate, mlflow, selenium" >/dev/null 2>&1; then
    echo "test-python: installing maturin, numpy, torch, torchvision, pillow, pytest, tensorsocket, timm, lightning, accelerate into $venv" >&2
    "$py" -m pip install --quiet --upgrade pip
    # TORCH_SPEC lets CI pick a build, e.g. "torch --index-url https://download.pytorch.org/whl/cpu".
    # shellcheck disable=SC2086
    # Pinned to the versions the suite last passed with; bump deliberately.
    "$py" -m pip install --quiet "maturin==1.16.0" "numpy==2.4.6" "pytest==9.2.0" \
        "pillow==13.0.0" tensorsocket==0.0.5 ${TORCH_SPEC:-torch==2.15.0 torchvision==0.29.2}
    # The training libraries the drop-in tests drive (tests/python/test_dropin.py);
    # installed after torch, so that they reuse the build chosen above.
    "$py" -m pip install --quiet timm==1.0.31 lightning==2.6.6 accelerate==1.15.0
    # The real MLflow client, which logs into the run store through the
    # endpoint of `batchcast run` (tests/python/test_mlflow_endpoint.py).
    "$py" -m pip install --quiet mlflow-skinny==3.17.2
    # WebDriver client of the dashboard's browser tests (tests/python/test_ui_browser.py).
    "$py" -m pip install --quiet selenium==4.51.0
fi

# Headless Chromium and its driver for the browser tests, from Debian's
# packages (deselect those tests with -m "not browser" where they cannot run).
if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
    echo "test-python: installing chromium and chromium-driver (apt-get)" >&2
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo -n"
    $sudo apt-get install -y -q chromium chromium-driver >&2 \
        || { $sudo apt-get update -q >&2 && $sudo apt-get install -y -q chromium chromium-driver >&2; } \
        || echo "test-python: could not install chromium; the browser tests will say so" >&2
fi
# Ray and Tune, for the multi-node sweep tests (tests/python/test_ray.py).
if ! "$py" -c "import ray.tune" >/dev/null 2>&1; then
    echo "test-python: installing ray[tune] into $venv" >&2
    "$py" -m pip install --quiet "ray[tune]==2.60.0"
fi

# Build the extension (release; cargo makes this a no-op when nothing
# changed) and install the package in development mode: the module lands in
# python/batchcast/, which the venv imports directly.
echo "test-python: building batchcast (maturin develop --release)" >&2
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "$venv/bin/maturin" develop --release --quiet >&2

exec "$py" -m pytest "$@"
