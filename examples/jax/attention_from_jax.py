"""The seed attention forward, run by Palladium inside a jitted JAX program (XLA FFI).

Usage: python attention_from_jax.py <path to libpalladium_jax.so> [cpu|cuda]
(cuda: JAX's arrays on its first GPU; Palladium runs on XLA's stream, on XLA's buffers.)
(examples/jax/CMakeLists.txt builds the library; the test suite builds and runs this.)
Checks the result against attention written in jax.numpy, and that a Palladium error reaches
JAX with its message. Exits non-zero on a mismatch.
"""
import ctypes
import sys

import numpy as np
import jax
import jax.numpy as jnp

try:
    ffi = jax.ffi  # JAX >= 0.4.38
except AttributeError:
    import jax.extend as je
    ffi = je.ffi

lib = ctypes.cdll.LoadLibrary(sys.argv[1])
platform = sys.argv[2] if len(sys.argv) > 2 else "cpu"
if platform == "cuda":
    gpu = jax.devices("gpu")[0]
    jax.config.update("jax_default_device", gpu)
    ffi.register_ffi_target("palladium_mha_forward_cuda", ffi.pycapsule(lib.PalladiumMhaForwardCuda), platform="CUDA")
else:
    jax.config.update("jax_default_device", jax.devices("cpu")[0])
    ffi.register_ffi_target("palladium_mha_forward", ffi.pycapsule(lib.PalladiumMhaForward), platform="cpu")


def palladium_mha(q, k, v, sm_scale, causal):
    attrs = dict(sm_scale=np.float32(sm_scale), causal=np.bool_(causal), block_q=np.int64(32), block_k=np.int64(32))
    if platform == "cuda":
        call = ffi.ffi_call("palladium_mha_forward_cuda", jax.ShapeDtypeStruct(q.shape, q.dtype))
        return call(q, k, v, device=np.int64(gpu.local_hardware_id), **attrs)
    call = ffi.ffi_call("palladium_mha_forward", jax.ShapeDtypeStruct(q.shape, q.dtype))
    return call(q, k, v, **attrs)


def reference_mha(q, k, v, sm_scale, causal):
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision="highest") * sm_scale
    if causal:
        n = q.shape[1]
        logits = jnp.where(jnp.tril(jnp.ones((n, n), bool)), logits, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v, precision="highest")


key = jax.random.PRNGKey(np.random.default_rng().integers(1 << 31))
kq, kk, kv = jax.random.split(key, 3)
shape = (2, 128, 4, 64)  # batch, seq, heads, head_dim
q, k, v = (jax.random.normal(s, shape, jnp.float32) for s in (kq, kk, kv))
worst = 0.0
for causal in (False, True):
    got = jax.jit(lambda a, b, c: palladium_mha(a, b, c, 0.125, causal) * 2.0)(q, k, v) / 2.0
    want = reference_mha(q, k, v, 0.125, causal)
    err = float(jnp.linalg.norm(got - want) / jnp.linalg.norm(want))
    worst = max(worst, err)
    print(f"{platform} causal={causal}: relative error against jax.numpy attention {err:.2e}")

try:
    bad = jnp.ones((2, 128, 4, 32), jnp.float32)  # k's head_dim differs from q's
    jax.block_until_ready(jax.jit(lambda a, b: palladium_mha(a, b, b, 0.125, False))(q, bad))
    print("a shape mismatch was not reported")
    sys.exit(1)
except Exception as e:  # XlaRuntimeError carrying Palladium's message
    message = str(e)
    if "mha" not in message and "dot" not in message and "shape" not in message:
        print("unexpected error:", message)
        sys.exit(1)
    print("a shape mismatch reaches JAX as:", message.splitlines()[0][:160])

sys.exit(0 if worst < 1e-5 else 1)
