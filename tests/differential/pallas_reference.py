#!/usr/bin/env python3
"""Run one Palladium differential-test case through real JAX Pallas.

Usage: pallas_reference.py CASE DIR

Reads DIR/params.json (optional) and DIR/in_<name>.npy, runs CASE with
pallas_call(..., interpret=True) on the CPU in float32, writes
DIR/out_<name>.npy and exits 0. Any error prints a message and exits 1.
See tests/differential/README.md for the cases and their files.
"""
import functools
import json
import os
import sys
import traceback

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402

jax.config.update("jax_enable_x64", False)
jax.config.update("jax_default_matmul_precision", "highest")


class CaseError(Exception):
  pass


def block_spec(block_shape, index_map):
  # BlockSpec(index_map, block_shape) became BlockSpec(block_shape, index_map)
  # in jax 0.4.31; keywords work for both orders.
  return pl.BlockSpec(block_shape=block_shape, index_map=index_map)


# ---- quickstart kernels ---------------------------------------------------

def add_vectors(x, y):
  def kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]
  out_dtype = jnp.result_type(x, y)
  return pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct(x.shape, out_dtype),
      interpret=True)(x, y)


def iota(size):
  def kernel(o_ref):
    i = pl.program_id(0)
    o_ref[i] = i
  return pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct((size,), jnp.int32),
      grid=(size,), interpret=True)()


def matmul(x, y, activation=None):
  def kernel(x_ref, y_ref, z_ref):
    z = jnp.dot(x_ref[...], y_ref[...], precision=lax.Precision.HIGHEST)
    z_ref[...] = z if activation is None else activation(z)
  m, n = x.shape[0], y.shape[1]
  return pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
      grid=(2, 2),
      in_specs=[
          block_spec((m // 2, x.shape[1]), lambda i, j: (i, 0)),
          block_spec((y.shape[0], n // 2), lambda i, j: (0, j)),
      ],
      out_specs=block_spec((m // 2, n // 2), lambda i, j: (i, j)),
      interpret=True)(x, y)


# ---- fused attention (jax.experimental.pallas.ops.gpu.attention) ----------

def attention_args(inputs, params):
  q, k, v = (inputs[n].astype(np.float32) for n in ("q", "k", "v"))
  if q.ndim != 4 or k.shape != q.shape or v.shape != q.shape:
    raise CaseError(f"q/k/v must share a (batch, seq, heads, head_dim) shape, "
                    f"got {q.shape} {k.shape} {v.shape}")
  seg = inputs.get("segment_ids")
  if seg is not None:
    seg = seg.astype(np.int32)
    if seg.shape != q.shape[:2]:
      raise CaseError(f"segment_ids must be (batch, seq)={q.shape[:2]}, "
                      f"got {seg.shape}")
  opts = dict(sm_scale=float(params.get("sm_scale", 1.0)),
              causal=bool(params.get("causal", False)),
              block_q=int(params.get("block_q", 128)),
              block_k=int(params.get("block_k", 128)))
  return q, k, v, seg, opts


def mha_forward(inputs, params):
  from jax.experimental.pallas.ops.gpu import attention
  q, k, v, seg, o = attention_args(inputs, params)
  # _mha_forward is the custom_vjp forward rule: positional arguments
  # (q, k, v, segment_ids, sm_scale, causal, block_q, block_k,
  #  backward_pass_impl, num_warps, num_stages, grid, interpret, debug).
  fwd = jax.jit(functools.partial(
      attention._mha_forward, sm_scale=o["sm_scale"], causal=o["causal"],
      block_q=o["block_q"], block_k=o["block_k"], backward_pass_impl="triton",
      num_warps=None, num_stages=2, grid=None, interpret=True, debug=False))
  out, residuals = fwd(q, k, v, seg)
  lse = residuals[-1]
  return {"o": out, "lse": lse}


def mha_backward(inputs, params):
  from jax.experimental.pallas.ops.gpu import attention
  q, k, v, seg, o = attention_args(inputs, params)
  do = inputs["do"].astype(np.float32)
  if do.shape != q.shape:
    raise CaseError(f"do must have q's shape {q.shape}, got {do.shape}")

  def f(q, k, v):
    return attention.mha(q, k, v, seg, sm_scale=o["sm_scale"],
                         causal=o["causal"], block_q=o["block_q"],
                         block_k=o["block_k"], backward_pass_impl="triton",
                         interpret=True)

  @jax.jit
  def grads(q, k, v, do):
    _, vjp = jax.vjp(f, q, k, v)
    return vjp(do)

  dq, dk, dv = grads(q, k, v, do)
  return {"dq": dq, "dk": dk, "dv": dv}


def matmul_case(inputs, activation=None):
  x, y = inputs["x"].astype(np.float32), inputs["y"].astype(np.float32)
  if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[0]:
    raise CaseError(f"matmul needs (M,K) x (K,N), got {x.shape} {y.shape}")
  if x.shape[0] % 2 or y.shape[1] % 2:
    raise CaseError("matmul uses a 2x2 grid: M and N must be even")
  return {"o": matmul(x, y, activation)}


def vmap_matmul_relu_case(inputs):
  x, y = inputs["x"].astype(np.float32), inputs["y"].astype(np.float32)
  if (x.ndim != 3 or y.ndim != 3 or x.shape[0] != y.shape[0]
      or x.shape[2] != y.shape[1] or x.shape[1] % 2 or y.shape[2] % 2):
    raise CaseError(f"need (B,M,K) x (B,K,N) with even M, N; "
                    f"got {x.shape} {y.shape}")
  f = jax.vmap(functools.partial(matmul, activation=jax.nn.relu))
  return {"o": f(x, y)}


CASES = {
    "add_vectors": (("x", "y"), (),
                    lambda i, p: {"o": add_vectors(i["x"], i["y"])}),
    "iota": ((), (), lambda i, p: {"o": iota(int(p["size"]))}),
    "matmul": (("x", "y"), (), lambda i, p: matmul_case(i)),
    "matmul_relu": (("x", "y"), (),
                    lambda i, p: matmul_case(i, jax.nn.relu)),
    "vmap_matmul_relu": (("x", "y"), (),
                         lambda i, p: vmap_matmul_relu_case(i)),
    "mha_forward": (("q", "k", "v"), ("segment_ids",), mha_forward),
    "mha_backward": (("q", "k", "v", "do"), ("segment_ids",), mha_backward),
}


def main(argv):
  if len(argv) != 3 or argv[1] not in CASES:
    print(f"usage: {argv[0]} CASE DIR   (CASE one of {', '.join(CASES)})",
          file=sys.stderr)
    return 1
  case, d = argv[1], argv[2]
  required, optional, run = CASES[case]
  try:
    pfile = os.path.join(d, "params.json")
    params = {}
    if os.path.exists(pfile):
      with open(pfile) as f:
        params = json.load(f) or {}
    if case == "iota" and "size" not in params:
      raise CaseError("iota needs params.json with {\"size\": N}")
    inputs = {}
    for name in required + optional:
      path = os.path.join(d, f"in_{name}.npy")
      if os.path.exists(path):
        inputs[name] = np.load(path, allow_pickle=False)
      elif name in required:
        raise CaseError(f"missing input file {path}")
    outputs = run(inputs, params)
    for name, value in outputs.items():
      np.save(os.path.join(d, f"out_{name}.npy"), np.asarray(value))
  except Exception as e:  # noqa: BLE001 -- report anything and exit 1
    if not isinstance(e, CaseError):
      traceback.print_exc()
    print(f"pallas_reference: case {case} in {d} failed: "
          f"{type(e).__name__}: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
