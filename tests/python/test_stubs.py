"""The type stubs of batchcast._native list what the module has."""

from __future__ import annotations

import ast
from pathlib import Path

import batchcast
from batchcast import _native

STUB = Path(batchcast.__file__).with_name("_native.pyi")


def test_the_stub_matches_the_extension_module():
    tree = ast.parse(STUB.read_text())
    stub_names = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            stub_names.add(node.name)
            runtime = getattr(_native, node.name)
            members = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            for member in members - {"__init__"}:
                assert hasattr(runtime, member), f"{node.name}.{member} is in the stub only"
            public = {m for m in vars(runtime) if not m.startswith("_")}
            attrs = {t.target.id for t in node.body if isinstance(t, ast.AnnAssign)}
            assert public <= members | attrs, f"{node.name}: {public - members - attrs} missing"
        elif isinstance(node, ast.FunctionDef):
            stub_names.add(node.name)
            assert callable(getattr(_native, node.name, None)), f"{node.name}() is in the stub only"
        elif isinstance(node, ast.AnnAssign):
            stub_names.add(node.target.id)
            assert hasattr(_native, node.target.id), f"{node.target.id} is in the stub only"
    runtime_names = {n for n in dir(_native) if not n.startswith("_")}
    assert runtime_names <= stub_names, f"not in the stub: {runtime_names - stub_names}"
    assert "py.typed" in {p.name for p in STUB.parent.iterdir()}
