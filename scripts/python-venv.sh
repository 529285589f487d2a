# The virtualenv of batchcast's Python tests and checks, sourced (not run)
# by scripts/test-python.sh and scripts/check-python.sh, from the repository
# root, with $root and $who (the script's name, for messages) set.
#
# Defines $venv ($BATCHCAST_VENV, default .venv) and $py, creates the venv if
# it is missing, and gives:
#   pip_install ARGS...    `pip install` that survives a flaky network
#   install_python_deps    numpy, torch, pytest, Ray and the rest of what the
#                          test suite imports, when any of it is missing
#   build_extension        the extension module, built into python/batchcast

venv="${BATCHCAST_VENV:-$root/.venv}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    echo "$who: creating $venv" >&2
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
            echo "$who: pip install failed (attempt $attempt of 4); trying again in $((attempt * 30)) s" >&2
            sleep $((attempt * 30))
        fi
    done
    echo "$who: could not install $* after 4 attempts. Check the network (or PIP_INDEX_URL), then run this script again: what was installed stays in $venv." >&2
    return 1
}

# pip 25.1 and later resume a cut-off download in place.
detect_pip_resume() {
    if "$py" -m pip install --help 2>/dev/null | grep -q -- --resume-retries; then
        pip_resume="--resume-retries 20"
    fi
}

install_python_deps() {
    if ! "$py" -c "import maturin, numpy, torch, pytest, torchvision, PIL, tensorsocket, timm, lightning, accelerate, mlflow, selenium" >/dev/null 2>&1; then
        echo "$who: installing maturin, numpy, torch, torchvision, pillow, pytest, tensorsocket, timm, lightning, accelerate, mlflow, selenium into $venv" >&2
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
    # torchdata's StatefulDataLoader, which a durable Producer checkpoints
    # through its state_dict (tests/python/test_durable_py.py).
    if ! "$py" -c "import torchdata.stateful_dataloader" >/dev/null 2>&1; then
        echo "$who: installing torchdata into $venv" >&2
        detect_pip_resume
        pip_install "torchdata==0.11.0"
    fi
    # Ray and Tune, for the multi-node sweep tests (tests/python/test_ray.py).
    if ! "$py" -c "import ray.tune" >/dev/null 2>&1; then
        echo "$who: installing ray[tune] into $venv" >&2
        detect_pip_resume
        pip_install "ray[tune]==2.60.0"
    fi
}

# Builds the extension (release; cargo makes this a no-op when nothing
# changed) and installs the package in development mode: the module lands in
# python/batchcast/, which the venv imports directly.
build_extension() {
    echo "$who: building batchcast (maturin develop --release)" >&2
    VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "$venv/bin/maturin" develop --release --quiet >&2
}
