"""The seed attention, forward and backward, run by Palladium as PyTorch custom ops.

Usage: python attention_from_torch.py <path to libpalladium_torch.so> [cpu] [cuda]
(examples/torch/CMakeLists.txt builds the library; the test suite builds and runs this where torch
is installed.) For each device: the output and the gradients of q, k and v against a float64
attention written in torch, torch.library.opcheck on the ops, and a Palladium error reaching torch
with its message. Exits non-zero on a mismatch.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import palladium_torch  # noqa: E402

palladium_torch.load(sys.argv[1])
devices = sys.argv[2:] or ["cpu"]


def reference(q, k, v, sm_scale, causal):
    logits = torch.einsum("bqhd,bkhd->bhqk", q, k) * sm_scale
    if causal:
        n = q.shape[1]
        logits = logits.masked_fill(~torch.tril(torch.ones(n, n, dtype=torch.bool, device=q.device)), -torch.inf)
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(logits, dim=-1), v)


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


failed = False
for device in devices:
    g = torch.Generator(device="cpu").manual_seed(int.from_bytes(os.urandom(4), "little"))
    shape = (2, 128, 4, 64)  # batch, seq, heads, head_dim
    q, k, v, dout = (torch.randn(shape, generator=g).to(device) for _ in range(4))
    for causal in (False, True):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = palladium_torch.mha(*leaves, 0.125, causal)
        out.backward(dout)
        leaves64 = [t.double().requires_grad_() for t in (q, k, v)]
        want = reference(*leaves64, 0.125, causal)
        want.backward(dout.double())
        errors = [rel(out.detach(), want.detach())] + [rel(a.grad, b.grad) for a, b in zip(leaves, leaves64)]
        print(f"{device} causal={causal}: relative error against float64 torch: out {errors[0]:.2e}, "
              f"dq {errors[1]:.2e}, dk {errors[2]:.2e}, dv {errors[3]:.2e}")
        failed |= not all(e < 2e-5 for e in errors)
    # The ops' registrations (schema, fake tensors, autograd) as torch checks them.
    small = [t[:, :32].contiguous() for t in (q, k, v)]
    small = [t.requires_grad_() for t in small]
    torch.library.opcheck(torch.ops.palladium.mha_forward.default, (*small, 0.125, True),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    print(f"{device}: torch.library.opcheck passed")
    try:
        palladium_torch.mha(q, k[..., :32].contiguous(), v, 0.125)  # k's head_dim differs from q's
        print("a shape mismatch was not reported")
        failed = True
    except RuntimeError as e:
        print("a shape mismatch reaches torch as:", str(e).splitlines()[0][:160])
        failed |= "palladium::mha_forward" not in str(e)

sys.exit(1 if failed else 0)
