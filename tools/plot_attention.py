#!/usr/bin/env python3
"""The README's attention plot: an SVG bar chart from cuda_bench's and the torch peers' ROW lines.

usage: tools/plot_attention.py [--gpu NAME] OUT.svg JOB_LOG [JOB_LOG ...] [-- JOB_LOG ...]

Each JOB_LOG holds `ROW` lines of `cuda_bench attention attention-bwd` or of the torch peer script
(.peers/torch_peers.py); `--` separates the logs of one GPU job from the next. A bar pair
(Palladium and cuDNN, forward or forward+backward) always comes from one job: the last job whose
logs hold both of its rows. Per case
(batch, sequence, heads, head_dim, causal) it draws Palladium's forward (its best block), cuDNN's
forward, Palladium's forward+backward (the default blocks, forward 128 / backward 64) and cuDNN's,
in TFLOP/s, with Palladium's ratio to cuDNN above its bars. --gpu names the GPU in the title
(default H100). Standard library only.
"""
import sys

import bench_table  # the ROW parser (tools/, beside this script)

DEFAULT_BACKWARD = "palladium mha_vjp f128 b64"


def read(paths):
    fwd_best, out = {}, {}  # case -> best Palladium forward; (case, series) -> TFLOP/s
    for work, case, system, _, rate in bench_table.rows(paths):
        if work == "attn fwd" and system.startswith("palladium"):
            fwd_best[case] = max(fwd_best.get(case, 0.0), rate)
        elif work == "attn fwd+bwd" and system == DEFAULT_BACKWARD:
            out[(case, "palladium fwd+bwd")] = rate
        elif work in ("attn fwd", "attn fwd+bwd") and system == "torch sdpa cudnn":
            out[(case, "cudnn fwd" if work == "attn fwd" else "cudnn fwd+bwd")] = rate
    for case, rate in fwd_best.items():
        out[(case, "palladium fwd")] = rate
    return out


def label(case):
    b, s, h, d, c = case.split()
    return f"{s} {d}" + (" causal" if c == "c1" else "")


def svg(rows, gpu):
    series = [("palladium fwd", "#1f6f8b"), ("cudnn fwd", "#9ccfd8"), ("palladium fwd+bwd", "#c4451c"),
              ("cudnn fwd+bwd", "#f2b8a2")]
    cases = sorted({c for c, _ in rows}, key=lambda c: (int(c.split()[3][1:]), int(c.split()[1][1:]), c.split()[4]))
    cases = [c for c in cases if all((c, s) in rows for s, _ in series)]
    top = max(rows[(c, s)] for c in cases for s, _ in series)
    top = (int(top / 100) + 1) * 100
    width, height, left, bottom, plot_h = 120 + 110 * len(cases), 420, 60, 70, 300
    bar, gap = 22, 4
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">Attention on an {gpu}, bf16, 16k tokens, hidden 2048: TFLOP/s (ratio: Palladium / cuDNN)</text>']
    y0 = height - bottom
    for t in range(0, top + 1, 100):
        y = y0 - plot_h * t / top
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - 20}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{t}</text>')
    for i, case in enumerate(cases):
        x0 = left + 20 + 110 * i
        for j, (name, color) in enumerate(series):
            v = rows[(case, name)]
            h = plot_h * v / top
            x = x0 + j * (bar + gap)
            out.append(f'<rect x="{x}" y="{y0 - h:.1f}" width="{bar}" height="{h:.1f}" fill="{color}"><title>{name} {case}: {v:.0f}</title></rect>')
            if name.startswith("palladium"):
                peer = rows[(case, name.replace("palladium", "cudnn"))]
                out.append(f'<text x="{x + bar / 2:.1f}" y="{y0 - h - 4:.1f}" text-anchor="middle" font-size="10">{v / peer:.2f}</text>')
        out.append(f'<text x="{x0 + 2 * (bar + gap) - gap / 2:.1f}" y="{y0 + 16}" text-anchor="middle">{label(case)}</text>')
    for j, (name, color) in enumerate(series):
        x = left + 20 + 170 * j
        out.append(f'<rect x="{x}" y="{height - 30}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{x + 16}" y="{height - 20}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def merge(jobs):
    rows = {}
    for job in jobs:
        got = read(job)
        for (case, name), v in got.items():
            if not name.startswith("palladium"):
                continue
            peer = name.replace("palladium", "cudnn")
            if (case, peer) in got:
                rows[(case, name)], rows[(case, peer)] = v, got[(case, peer)]
    return rows


def main():
    args = sys.argv[1:]
    gpu = "H100"
    if args[:1] == ["--gpu"] and len(args) > 1:
        gpu, args = args[1], args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    jobs = [[]]
    for arg in args[1:]:
        if arg == "--":
            jobs.append([])
        else:
            jobs[-1].append(arg)
    rows = merge(jobs)
    if not rows:
        sys.exit("plot_attention: no attention ROW lines in " + ", ".join(args[1:]))
    with open(args[0], "w") as f:
        f.write(svg(rows, gpu))


if __name__ == "__main__":
    main()
