#!/usr/bin/env bash
# Lints, format check and type checks of the batchcast Python package:
#
#   ruff check python/            pyflakes, pycodestyle, isort, bugbear, pyupgrade
#   ruff format --check python/   the formatter's layout (`ruff format python/` applies it)
#   mypy                          the package's types (settings in pyproject.toml)
#   stubtest batchcast._native    the hand-written _native.pyi against the built module
#
# Uses the virtualenv of scripts/test-python.sh ($BATCHCAST_VENV, default
# .venv): installs what the package imports, builds the extension, and adds
# the pinned ruff and mypy below. Runs every check, then fails if any did.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
who=check-python
# shellcheck source=scripts/python-venv.sh
. scripts/python-venv.sh

# Pinned; bump deliberately (a new release brings new rules).
RUFF=0.17.6
MYPY=2.4.1

install_python_deps
if ! "$py" -m ruff --version 2>/dev/null | grep -qx "ruff $RUFF" \
    || ! "$py" -c "import importlib.metadata as m, sys; sys.exit(m.version('mypy') != '$MYPY')" 2>/dev/null; then
    echo "$who: installing ruff $RUFF and mypy $MYPY into $venv" >&2
    pip_install "ruff==$RUFF" "mypy==$MYPY"
fi
build_extension

failed=()
check() {
    echo "== $*"
    if ! "$@"; then
        failed+=("$*")
    fi
}
check "$py" -m ruff check --no-cache python/
check "$py" -m ruff format --no-cache --check python/
check "$py" -m mypy
check "$py" -m mypy.stubtest --concise batchcast._native

if [ "${#failed[@]}" -gt 0 ]; then
    echo "$who: failed: ${failed[*]}" >&2
    echo "$who: fix what is listed above (\`ruff check --fix python/\` and \`ruff format python/\` fix most lint and layout), then run this script again." >&2
    exit 1
fi
echo "$who: ruff, ruff format, mypy and stubtest passed"
