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
who=test-python
# shellcheck source=scripts/python-venv.sh
. scripts/python-venv.sh
install_python_deps

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

build_extension

exec "$py" -m pytest "$@"
