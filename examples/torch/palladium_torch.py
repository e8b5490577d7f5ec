"""Palladium's attention kernels as PyTorch custom ops.

    import palladium_torch
    palladium_torch.load("torch-build/libpalladium_torch.so")
    out = palladium_torch.mha(q, k, v, sm_scale=0.125, causal=True)   # (batch, seq, heads, head_dim)
    out.sum().backward()                                               # Palladium's backward kernel

`torch.ops.palladium.mha_forward` returns (out, lse) and `torch.ops.palladium.mha_backward` the
gradients; autograd joins them as the seed's custom VJP does. Tensors cross to the C library as
DLPack capsules (no copies); on a GPU the kernels are queued on torch's current stream.
"""
import ctypes

import torch

_lib = None
_DLTENSOR = b"dltensor"
_USED = b"used_dltensor"
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_P = ctypes.c_void_p


def load(path):
    """Loads libpalladium_torch.so (examples/torch/CMakeLists.txt builds it)."""
    global _lib
    _lib = ctypes.CDLL(path)
    _lib.palladium_torch_mha_forward.argtypes = [_P, _P, _P, ctypes.c_double, ctypes.c_int, _P,
                                                 ctypes.POINTER(_P), ctypes.POINTER(_P), ctypes.c_char_p, ctypes.c_size_t]
    _lib.palladium_torch_mha_backward.argtypes = [_P, _P, _P, _P, _P, _P, ctypes.c_double, ctypes.c_int, _P,
                                                  ctypes.POINTER(_P), ctypes.POINTER(_P), ctypes.POINTER(_P),
                                                  ctypes.c_char_p, ctypes.c_size_t]


def _give(t):
    """A DLManagedTensor* of t that the C library owns from now on (the capsule is marked used)."""
    capsule = torch.utils.dlpack.to_dlpack(t.contiguous())
    pointer = _get_pointer(capsule, _DLTENSOR)
    _set_name(capsule, _USED)
    return pointer


def _take(pointer):
    """A tensor over a DLManagedTensor* the C library returned (torch calls its deleter)."""
    return torch.utils.dlpack.from_dlpack(_new_capsule(pointer.value, _DLTENSOR, None))


def _stream(t):
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _call(fn, name, tensors, scalars, outputs, like):
    if _lib is None:
        raise RuntimeError("palladium_torch.load(path) first")
    results = [_P() for _ in range(outputs)]
    error = ctypes.create_string_buffer(4096)
    rc = fn(*[_give(t) for t in tensors], *scalars, _P(_stream(like)), *[ctypes.byref(r) for r in results],
            error, len(error))
    if rc != 0:
        raise RuntimeError(f"palladium::{name}: {error.value.decode(errors='replace')}")
    return tuple(_take(r) for r in results)


@torch.library.custom_op("palladium::mha_forward", mutates_args=())
def mha_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float,
                causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _call(_lib.palladium_torch_mha_forward, "mha_forward", (q, k, v), (sm_scale, int(causal)), 2, q)


@mha_forward.register_fake
def _(q, k, v, sm_scale, causal):
    batch, seq, heads, _ = q.shape
    return torch.empty_like(q), q.new_empty((batch, heads, seq), dtype=torch.float32)


@torch.library.custom_op("palladium::mha_backward", mutates_args=())
def mha_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                 dout: torch.Tensor, sm_scale: float, causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _call(_lib.palladium_torch_mha_backward, "mha_backward", (q, k, v, out, lse, dout),
                 (sm_scale, int(causal)), 3, q)


@mha_backward.register_fake
def _(q, k, v, out, lse, dout, sm_scale, causal):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, sm_scale, causal = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)  # a residual for the backward kernel
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.sm_scale, ctx.causal = sm_scale, causal


def _backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = mha_backward(q, k, v, out, lse, dout.contiguous(), ctx.sm_scale, ctx.causal)
    return dq, dk, dv, None, None


torch.library.register_autograd("palladium::mha_forward", _backward, setup_context=_setup_context)


def mha(q, k, v, sm_scale, causal=False):
    """Attention of (batch, seq, heads, head_dim) tensors, differentiable through Palladium's backward."""
    return mha_forward(q, k, v, sm_scale, causal)[0]
