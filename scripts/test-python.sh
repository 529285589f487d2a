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

# pip_install ARGS...: `pip install` that survives a flaky network. pip
# retries each connection and resumes a download cut off part-way (torch's
# wheel is over 500 MB); if the whole install still fails, it is tried again
# after a pause, up to four times, before giving up with what to do.
pip_resume=""
pip_install() {
    local attempt
    for attempt in 1 2 3 4; do
        # shellcheck disable=SC2086
        if "$py" -m pip install --quiet --retries 10 --timeout 60 $pip_resume "$@"; then
            return 0
        fi
        if [ "$attempt" -lt 4 ]; then
            echo "test-python: pip install failed (attempt $attempt of 4); trying again in $((attempt * 30)) s" >&2
            sleep $((attempt * 30))
        fi
    done
    echo "test-python: could not install $* after 4 attempts. Check the network (or PIP_INDEX_URL), then run this script again: what was installed stays in $venv." >&2
    return 1
}

# pip 25.1 and later resume a cut-off download in place.
detect_pip_resume() {
    if "$py" -m pip install --help 2>/dev/null | grep -q -- --resume-retries; then
        pip_resume="--resume-retries 20"
    fi
}

if ! "$py" -c "import maturin, numpy, torch, pytest, torchvision, PIL, tensorsocket, timm, lightning, accelerate, mlflow, selenium" >/dev/null 2>&1; then
    echo "test-python: installing maturin, numpy, torch, torchvision, pillow, pytest, tensorsocket, timm, lightning, accelerate, mlflow, selenium into $venv" >&2
    pip_install --upgrade pip
    detect_pip_resume
    # TORCH_SPEC lets CI pick a build, e.g. "torch --index-url https://download.pytorch.org/whl/cpu".
    # Pinned to the versions the suite last passed with; bump deliberately.
    # shellcheck disable=SC2086
    pip_install "maturin==1.16.0" "numpy==2.4.6" "pytest==9.2.0" \
        "pillow==13.0.0" tensorsocket==0.0.5 ${TORCH_SPEC:-torch==2.15.0 torchvision==0.29.2}
    # The training libraries the drop-in tests drive (tests/python/test_dropin.py);
    # installed after torch, so that they reuse the build chosen above.
    pip_install timm==1.0.31 lightning==2.6.6 accelerate==1.15.0
    # The real MLflow client, which logs into the run store through the
    # endpoint of `batchcast run` (tests/python/test_mlflow_endpoint.py).
    pip_install mlflow-skinny==3.17.2
    # WebDriver client of the dashboard's browser tests (tests/python/test_ui_browser.py).
    pip_install selenium==4.51.0
fi

# Headless Chromium and its driver for the browser tests, from Debian's
# packages (deselect those tests with -m "not browser" where they cannot run).
if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
    echo "test-python: installing chromium and chromium-driver (apt-get)" >&2
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo -n"
    apt_get() { $sudo apt-get -o Acquire::Retries=5 "$@" >&2; }
    apt_get install -y -q chromium chromium-driver \
        || { apt_get update -q && apt_get install -y -q chromium chromium-driver; } \
        || echo "test-python: could not install chromium; the browser tests will say so" >&2
fi
# Ray and Tune, for the multi-node sweep tests (tests/python/test_ray.py).
if ! "$py" -c "import ray.tune" >/dev/null 2>&1; then
    echo "test-python: installing ray[tune] into $venv" >&2
    detect_pip_resume
    pip_install "ray[tune]==2.60.0"
fi

# Build the extension (release; cargo makes this a no-op when nothing
# changed) and install the package in development mode: the module lands in
# python/batchcast/, which the venv imports directly.
echo "test-python: building batchcast (maturin develop --release)" >&2
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "$venv/bin/maturin" develop --release --quiet >&2

exec "$py" -m pytest "$@"
