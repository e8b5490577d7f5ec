"""The seed attention forward, run by Palladium inside a jitted JAX program (XLA FFI, CPU).

Usage: python attention_from_jax.py <path to libpalladium_jax.so>
(examples/jax/CMakeLists.txt builds the library; the test suite builds and runs this.)
Checks the result against attention written in jax.numpy, and that a Palladium error reaches
JAX with its message. Exits non-zero on a mismatch.
"""
import ctypes
import sys

import numpy as np
import jax
import jax.numpy as jnp
import jax.extend as je

lib = ctypes.cdll.LoadLibrary(sys.argv[1])
je.ffi.register_ffi_target("palladium_mha_forward", je.ffi.pycapsule(lib.PalladiumMhaForward), platform="cpu")


def palladium_mha(q, k, v, sm_scale, causal):
    call = je.ffi.ffi_call("palladium_mha_forward", jax.ShapeDtypeStruct(q.shape, q.dtype))
    return call(q, k, v, sm_scale=np.float32(sm_scale), causal=np.bool_(causal), block_q=np.int64(32),
                block_k=np.int64(32))


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
    print(f"causal={causal}: relative error against jax.numpy attention {err:.2e}")

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
