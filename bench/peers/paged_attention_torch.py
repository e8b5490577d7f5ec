"""The paged-attention benchmark's peer (cuda_bench `paged`, bench/cuda/attention.cc): the same decode problem in
PyTorch, which has no paged kernel: gather each sequence's pages, then scaled_dot_product_attention
with a length mask, timed with triton.testing.do_bench; a ROW line like cuda_bench's."""
import torch
from triton.testing import do_bench

batch, heads, kv_heads, hd, page, per_seq = 64, 32, 8, 128, 16, 128
pool = batch * per_seq
torch.manual_seed(0)
# The same lengths as cuda_bench's (one formula), so both attend over the same tokens.
lengths = torch.tensor([1 + (b * 977) % (per_seq * page) for b in range(batch)], device="cuda")
table = torch.randperm(pool, device="cuda").reshape(batch, per_seq)
q = torch.randn(batch, heads, 1, hd, device="cuda", dtype=torch.bfloat16)
k_pages = torch.randn(kv_heads, pool, page, hd, device="cuda", dtype=torch.bfloat16)
v_pages = torch.randn(kv_heads, pool, page, hd, device="cuda", dtype=torch.bfloat16)
positions = torch.arange(per_seq * page, device="cuda")


def step():
    k = k_pages[:, table].permute(1, 0, 2, 3, 4).reshape(batch, kv_heads, per_seq * page, hd)
    v = v_pages[:, table].permute(1, 0, 2, 3, 4).reshape(batch, kv_heads, per_seq * page, hd)
    mask = (positions[None, :] < lengths[:, None])[:, None, None, :]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


moved = int(lengths.sum()) * kv_heads * hd * 2 * 2
ms = do_bench(step, return_mode="median")
print(f"ROW {'paged attention decode':22s} {'bf16 b64 h32/8 d128 p16 x128':28s} "
      f"{'torch ' + torch.__version__ + ' gather+SDPA':34s} {ms:9.3f} ms {int(moved / ms / 1e6)} GB/s", flush=True)
