"""What a producer's peers may do: a consumer of another user gets
batchcast.PermissionDenied (issue 10, fault 8); a label is at most 128 bytes.

The other user's consumer is a real process of another uid (65534,
"nobody"). It cannot be started with `setpriv` here, because the interpreter
may live in a directory only root can read (pyenv under /root): so it starts
as root, imports batchcast, then drops to uid/gid 65534 with no
supplementary groups (what `setpriv --reuid=65534 --regid=65534
--clear-groups` does) before it connects. The CLI test `fault8_another_uid_gets_permission_denied` runs the
`batchcast` binary under `setpriv` itself.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import batchcast

CONSUMER = r"""
import os, sys
import numpy  # imported while its files are still readable
import batchcast
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
try:
    batchcast.Consumer("mine", format="numpy")
except batchcast.PermissionDenied as e:
    print("PermissionDenied", isinstance(e, PermissionError), e.path, "|", e)
except BaseException as e:
    print("other", type(e).__name__, e)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
def test_fault8_another_uid_gets_permission_denied(bc_dir):
    producer = batchcast.Producer([{"x": [1.0]}], "mine", slot_size=1 << 16)
    try:
        out = subprocess.run(
            [sys.executable, "-c", CONSUMER],
            env=dict(os.environ, BATCHCAST_DIR=str(bc_dir)),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        producer.close()
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("PermissionDenied True "), line
    assert str(bc_dir / "mine.sock") in line
    assert "runs as another user" in line


def test_a_label_over_128_bytes_is_an_invalid_argument(bc_dir):
    with pytest.raises(batchcast.InvalidArgument, match="at most 128 bytes"):
        batchcast.Consumer("anyone", label="x" * 129)
