"""The norms benchmark's peer (bench/cuda_bench.cc `norms`, `norms-bwd`): PyTorch's layer_norm,
rms_norm and softmax, forward and forward+backward (y.backward(dy)), on the same shapes and dtypes,
timed with triton.testing.do_bench, as ROW lines."""
import torch
from triton.testing import do_bench

rows, features = 8192, 4096
for dtype, name in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
    x = torch.randn(rows, features, device="cuda", dtype=dtype)
    w = torch.randn(features, device="cuda", dtype=dtype)
    b = torch.randn(features, device="cuda", dtype=dtype)
    moved = 2 * x.numel() * x.element_size()
    for what, fn in (("layer_norm fwd", lambda: torch.nn.functional.layer_norm(x, (features,), w, b, 1e-5)),
                     ("rms_norm fwd", lambda: torch.nn.functional.rms_norm(x, (features,), w, 1e-5)),
                     ("softmax fwd", lambda: torch.softmax(x, -1))):
        ms = do_bench(fn, return_mode="median")
        print(f"ROW {what:22s} {name} {rows}x{features:<20} {'torch ' + torch.__version__:34s} {ms:9.3f} ms "
              f"{int(moved / ms / 1e6)} GB/s", flush=True)

for dtype, name in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
    x = torch.randn(rows, features, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(features, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(features, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn(rows, features, device="cuda", dtype=dtype)
    moved = 3 * x.numel() * x.element_size()
    for what, fn in (("layer_norm fwd+bwd", lambda: torch.nn.functional.layer_norm(x, (features,), w, b, 1e-5)),
                     ("rms_norm fwd+bwd", lambda: torch.nn.functional.rms_norm(x, (features,), w, 1e-5)),
                     ("softmax fwd+bwd", lambda: torch.softmax(x, -1))):
        ms = do_bench(lambda: fn().backward(dy), return_mode="median", grad_to_none=[x, w, b])
        print(f"ROW {what:22s} {name} {rows}x{features:<20} {'torch ' + torch.__version__:34s} {ms:9.3f} ms "
              f"{int(moved / ms / 1e6)} GB/s", flush=True)
