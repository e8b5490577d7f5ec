"""NumPy <-> Palladium through DLPack in one process (run by tests/interop/numpy_test.cc).

Usage: numpy_dlpack.py <path to libpl_dlpack_probe.so>
Palladium's arrays become NumPy arrays without copies (np.from_dlpack), and NumPy's arrays become
Palladium arrays (x.__dlpack__() handed to probe_consume, which takes ownership). Exits non-zero
on any mismatch.
"""
import ctypes
import sys

import numpy as np

lib = ctypes.CDLL(sys.argv[1])
lib.probe_make.restype = ctypes.c_void_p
lib.probe_make.argtypes = [ctypes.c_int64, ctypes.c_int]
lib.probe_consume.restype = ctypes.c_double
lib.probe_consume.argtypes = [ctypes.c_void_p]

capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype = ctypes.py_object
capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
capsule_pointer.restype = ctypes.c_void_p
capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
capsule_rename = ctypes.pythonapi.PyCapsule_SetName
capsule_rename.restype = ctypes.c_int
capsule_rename.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Exported:
    """What np.from_dlpack needs: __dlpack__ and __dlpack_device__."""

    def __init__(self, pointer):
        self.capsule = capsule_new(pointer, b"dltensor", None)

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


failures = []
for code, dtype in [(0, np.float32), (1, np.float64), (2, np.int32)]:
    got = np.from_dlpack(Exported(lib.probe_make(7, code)))
    want = (np.arange(7) * 0.5).astype(dtype)
    if got.dtype != want.dtype or not np.array_equal(got, want):
        failures.append(f"Palladium -> NumPy {dtype.__name__}: {got!r} != {want!r}")

rng = np.random.default_rng()
for dtype in [np.float32, np.float64, np.int32, np.int64, np.uint8, np.float16, np.bool_]:
    x = rng.standard_normal((3, 4)) * 10
    x = x.astype(dtype)
    capsule = x.__dlpack__()
    pointer = capsule_pointer(capsule, b"dltensor")
    capsule_rename(capsule, b"used_dltensor")  # Palladium owns it now
    got = lib.probe_consume(pointer)
    want = float(np.sum(x.astype(np.float64).ravel() * np.arange(1, 13)))
    if abs(got - want) > 1e-9 * max(1.0, abs(want)):
        failures.append(f"NumPy -> Palladium {np.dtype(dtype).name}: {got} != {want}")

# A transposed view is not row-major: Palladium refuses it (-1) rather than misreading it.
t = np.arange(12, dtype=np.float32).reshape(3, 4).T
capsule = t.__dlpack__()
pointer = capsule_pointer(capsule, b"dltensor")
capsule_rename(capsule, b"used_dltensor")
if lib.probe_consume(pointer) != -1:
    failures.append("a transposed (strided) NumPy array was accepted")

print("\n".join(failures) if failures else "numpy <-> palladium dlpack: ok")
sys.exit(1 if failures else 0)
