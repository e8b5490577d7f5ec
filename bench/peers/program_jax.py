# JAX's side of cuda_bench's "program" rows, same shapes: a jitted chain of 8 elementwise ops on
# 2^26 float32 (XLA fuses it), and the host dispatch time per call of a jitted 21-op program, an
# eager add and a jitted mixed program (matmuls, reductions, transpose) on small device arrays.
import time
import jax, jax.numpy as jnp

def per_call_us(f, n):
    jax.block_until_ready(f())
    t = time.perf_counter()
    for _ in range(n):
        r = f()
    jax.block_until_ready(r)
    return (time.perf_counter() - t) / n * 1e6

def chain8(a, b):
    h = a * b
    h = h + a
    h = jnp.tanh(h)
    h = h * 0.5
    h = h - b
    h = jnp.maximum(h, a)
    return jnp.exp(h * 0.1)

def program21(a, b):
    h = a * b
    h = jnp.sin(h + a) * 0.5
    h = jnp.exp((jnp.cos(h) - b) * 0.1)
    h = jnp.tanh(h)
    h = jnp.log(jnp.sqrt(h * h + 1.0))
    h = jnp.minimum(jnp.maximum(h, a), 2.0)
    h = h / (jnp.abs(b) + 1.0)
    return jnp.abs(-h) * a

def mixed(a, b):
    s = a @ b
    s = s - jnp.max(s, axis=1, keepdims=True)
    e = jnp.exp(s)
    p = e / jnp.sum(e, axis=1, keepdims=True)
    o = p.T @ a * 0.5 + b
    return jnp.tanh(o) + jnp.mean(o, axis=0, keepdims=True)

k = jax.random.split(jax.random.key(0), 6)
n = 1 << 26
x = jax.random.normal(k[0], (n,), jnp.float32); y = jax.random.normal(k[1], (n,), jnp.float32)
jc = jax.jit(chain8)
jax.block_until_ready(jc(x, y))
ts = []
for _ in range(5):
    t = time.perf_counter()
    for _ in range(20):
        r = jc(x, y)
    jax.block_until_ready(r)
    ts.append((time.perf_counter() - t) / 20 * 1e3)
ms = sorted(ts)[2]
print(f"ROW chain of 8 f32      2^26                         jax.jit (XLA fusion)               {ms:9.3f} ms {12.0 * n / ms / 1e6:.0f} GB/s", flush=True)
a = jax.random.normal(k[2], (256,), jnp.float32); b = jax.random.normal(k[3], (256,), jnp.float32)
j21 = jax.jit(program21)
print(f"ROW dispatch            21 ops f32[256]              jax.jit, per call (host)           {per_call_us(lambda: j21(a, b), 2000) / 1e3:9.3f} ms", flush=True)
print(f"ROW dispatch            1 op f32[256]                jax eager a + b, per call (host)   {per_call_us(lambda: a + b, 2000) / 1e3:9.3f} ms", flush=True)
m = jax.random.normal(k[4], (32, 32), jnp.float32); w = jax.random.normal(k[5], (32, 32), jnp.float32)
jm = jax.jit(mixed)
print(f"ROW dispatch            mixed 20 ops f32[32,32]      jax.jit, per call (host)           {per_call_us(lambda: jm(m, w), 2000) / 1e3:9.3f} ms", flush=True)
