"""Arrays whose ``__dlpack__`` hands over a malformed DLTensor are refused
with a ``TypeError`` naming the array, never a panic or a read of memory
the exporter did not describe."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from batchcast import _native


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _Tensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Hostile:
    """An exporter of a legacy DLPack capsule over 48 uint8 bytes, with
    the shape and strides the test gives (None: a null pointer)."""

    def __init__(self, ndim: int, shape: list[int] | None, strides: list[int] | None) -> None:
        self.data = (ctypes.c_uint8 * 48)()
        self.shape = (ctypes.c_int64 * len(shape))(*shape) if shape is not None else None
        self.strides = (ctypes.c_int64 * len(strides))(*strides) if strides is not None else None
        t = _Tensor(
            data=ctypes.cast(self.data, ctypes.c_void_p),
            device=_Device(1, 0),  # the CPU
            ndim=ndim,
            dtype=_DType(1, 8, 1),  # uint8
            shape=ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64)) if self.shape else None,
            strides=ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
            if self.strides
            else None,
            byte_offset=0,
        )
        self.managed = _Managed(dl_tensor=t, manager_ctx=None, deleter=None)

    def __dlpack__(self, **_: object) -> object:
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


OUT = np.zeros((4, 4, 3), dtype=np.uint8)


@pytest.mark.parametrize(
    "ndim, shape, strides",
    [
        (3, None, [12, 3, 1]),  # dimensions but no shape, strides given
        (3, None, None),  # dimensions but no shape
        (-1, [4], None),  # a negative number of dimensions
        (99, [4], None),  # more dimensions than batchcast takes
        (3, [4, -4, 3], None),  # a negative dimension
        (3, [4, 4, 3], [1, 4, 16]),  # not C-contiguous
    ],
)
def test_a_malformed_dltensor_is_refused_naming_the_array(ndim, shape, strides):
    with pytest.raises(TypeError, match="image: "):
        _native.store_image(Hostile(ndim, shape, strides), 4, OUT)


def test_a_well_formed_export_through_the_same_path_is_taken():
    # The same hand-made exporter, well formed, is taken: the refusals
    # above come from the malformed fields, not from the exporter.
    good = Hostile(3, [4, 4, 3], [12, 3, 1])
    ctypes.memmove(good.data, bytes(range(48)), 48)
    out = np.zeros((4, 4, 3), dtype=np.uint8)
    _native.store_image(good, 4, out)
    assert out.tobytes() == bytes(range(48))
