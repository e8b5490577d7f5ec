"""The seed attention, forward and backward, run by Palladium inside jitted JAX programs (XLA FFI).

Usage: python attention_from_jax.py <path to libpalladium_jax.so> [cpu|cuda]
(cuda: JAX's arrays on its first GPU; Palladium runs on XLA's stream, on XLA's buffers.)
(examples/jax/CMakeLists.txt builds the library; the test suite builds and runs this.)
Checks the result against attention written in jax.numpy; jax.grad through a jax.custom_vjp whose
halves are Palladium's forward (with its residual) and backward kernels, against float64
gradients; and that a Palladium error reaches JAX with its message. Exits non-zero on a mismatch.
"""
import ctypes
import functools
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
jax.config.update("jax_enable_x64", True)  # for the float64 references; the kernels' operands are float32
HANDLERS = {"palladium_mha_forward": "PalladiumMhaForward", "palladium_mha_residuals": "PalladiumMhaResiduals",
            "palladium_mha_backward": "PalladiumMhaBackward"}
if platform == "cuda":
    gpu = jax.devices("gpu")[0]
    jax.config.update("jax_default_device", gpu)
    for target, symbol in HANDLERS.items():
        ffi.register_ffi_target(target + "_cuda", ffi.pycapsule(getattr(lib, symbol + "Cuda")), platform="CUDA")
else:
    jax.config.update("jax_default_device", jax.devices("cpu")[0])
    for target, symbol in HANDLERS.items():
        ffi.register_ffi_target(target, ffi.pycapsule(getattr(lib, symbol)), platform="cpu")


def call(target, results, *operands, sm_scale, causal):
    attrs = dict(sm_scale=np.float32(sm_scale), causal=np.bool_(causal), block_q=np.int64(32), block_k=np.int64(32))
    if platform == "cuda":
        attrs["device"] = np.int64(gpu.local_hardware_id)
        target += "_cuda"
    return ffi.ffi_call(target, results)(*operands, **attrs)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def palladium_mha_vjp(q, k, v, sm_scale, causal):
    return palladium_mha_residuals(q, k, v, sm_scale, causal)[0]


def palladium_mha_residuals(q, k, v, sm_scale, causal):
    batch, seq, heads, _ = q.shape
    out, lse = call("palladium_mha_residuals",
                    (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((batch, heads, seq), jnp.float32)),
                    q, k, v, sm_scale=sm_scale, causal=causal)
    return out, (q, k, v, out, lse)


def palladium_mha_backward(sm_scale, causal, residuals, dout):
    q, k, v, out, lse = residuals
    spec = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)]
    return tuple(call("palladium_mha_backward", spec, q, k, v, out, lse, dout, sm_scale=sm_scale, causal=causal))


palladium_mha_vjp.defvjp(palladium_mha_residuals, palladium_mha_backward)


def palladium_mha(q, k, v, sm_scale, causal):
    return call("palladium_mha_forward", jax.ShapeDtypeStruct(q.shape, q.dtype), q, k, v, sm_scale=sm_scale,
                causal=causal)


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
dout = jax.random.normal(jax.random.fold_in(key, 7), shape, jnp.float32)
for causal in (False, True):
    loss = lambda a, b, c: jnp.sum(palladium_mha_vjp(a, b, c, 0.125, causal) * dout)
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    loss64 = lambda a, b, c: jnp.sum(reference_mha(a, b, c, 0.125, causal) * dout.astype(jnp.float64))
    want = jax.grad(loss64, argnums=(0, 1, 2))(*(x.astype(jnp.float64) for x in (q, k, v)))
    errs = [float(jnp.linalg.norm(g.astype(jnp.float64) - w) / jnp.linalg.norm(w)) for g, w in zip(grads, want)]
    worst = max(worst, *errs)
    print(f"{platform} causal={causal}: jax.grad through custom_vjp, relative error against float64: "
          f"dq {errs[0]:.2e}, dk {errs[1]:.2e}, dv {errs[2]:.2e}")
for causal in (False, True):
    got = jax.jit(lambda a, b, c: palladium_mha(a, b, c, 0.125, causal) * 2.0)(q, k, v) / 2.0
    want = reference_mha(*(x.astype(jnp.float64) for x in (q, k, v)), 0.125, causal)
    err = float(jnp.linalg.norm(got.astype(jnp.float64) - want) / jnp.linalg.norm(want))
    worst = max(worst, err)
    print(f"{platform} causal={causal}: relative error against float64 jax.numpy attention {err:.2e}")

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
