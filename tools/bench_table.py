#!/usr/bin/env python3
"""Every GPU benchmark row beside its peers, with the speed ratio, from one job's logs.

usage: tools/bench_table.py LOG [LOG ...]

The logs are cuda_bench's `ROW` lines and the peer scripts' ( .peers/torch_peers.py, .peers/jax_peers.py), all from the same
job: tools/gpu_run.sh passes its $OUT logs. For each workload and shape it prints Palladium's best
row (the fastest of its configurations, named) and each peer's, with ratio = peer time /
Palladium time (above 1: Palladium is faster). Standard library only.
"""
import re
import sys

# cuda_bench's workloads as the peers name them, and the peer systems compared with each.
WORK_OF_PEER = {"attn bwd(+fwd)": "attn fwd+bwd", "indrnn T1000": "indrnn f32"}
PEERS = {
    "add f32": ["torch add", "xla add", "cuMemcpyDtoDAsync"],
    "matmul bf16": ["cuBLASLt (same binary)", "torch matmul (cuBLAS)", "xla jnp.dot (cuBLAS)"],
    "attn fwd": ["torch sdpa cudnn", "torch sdpa flash", "jax-pallas-triton mha"],
    "attn fwd+bwd": ["torch sdpa cudnn", "torch sdpa flash", "jax-pallas-triton mha"],
    "indrnn f32": ["jax lax.scan", "jax-pallas-triton indrnn"],
}
# The copy is a bandwidth peer: its row is "d2d copy f32" in cuda_bench's own table.
COPY = ("d2d copy f32", "add f32")
# cuda_bench: ROW work shape system ms rate (padded columns, a long field may touch the next).
BENCH_ROW = re.compile(r"^ROW (add f32|d2d copy f32|matmul bf16|attn fwd\+bwd|attn fwd|indrnn f32)\s+"
                       r"(b\d+ s\d+ h\d+ d\d+ c\d|\d+\^3|2\^28(?: block \d+)?|T1000 F1024)\s+"
                       r"(palladium.*?|cuBLASLt \(same binary\)|cuMemcpyDtoDAsync)\s+([\d.]+) ms\s*([\d.]+)?")
PEER_ROW = re.compile(r"^ROW (.+?)\s+(attn fwd|attn bwd\(\+fwd\)|matmul bf16|add f32|d2d copy f32|indrnn T1000)\s+"
                      r"(\S+(?: \S+)*?)\s+([\d.]+) ms\s*([\d.]+)?")


def case_of(work, shape):
    """The shape that peers share: attention's 'b8 s2048 h32 d64 c0', '4096^3', '2^28', 'F1024'."""
    if work == "add f32" or work == "d2d copy f32":
        return "2^28"
    if work == "indrnn f32":
        return "T1000 F1024"
    return shape.split(" blk")[0].split(" block")[0]


def rows(paths):
    """Every benchmark row of the logs as (work, case, system, ms, rate): cuda_bench's and the peers',
    work named as cuda_bench names it, rate the TFLOP/s or GB/s printed after the time (or None)."""
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                m = BENCH_ROW.match(line)
                if m:
                    work, shape, system = m.group(1), m.group(2), m.group(3)
                    work = COPY[1] if work == COPY[0] else work
                else:
                    m = PEER_ROW.match(line)
                    if not m:
                        continue
                    system, work, shape = m.group(1).strip(), m.group(2), m.group(3)
                    work = WORK_OF_PEER.get(work, work)
                rate = float(m.group(5)) if m.group(5) else None
                yield work, case_of(work, shape), system, float(m.group(4)), rate


def read(paths):
    best = {}   # (work, case) -> (ms, system) of Palladium's fastest row
    peers = {}  # (work, case, system) -> ms, a peer's best block as ours
    for work, case, system, ms, _ in rows(paths):
        if system.startswith("palladium"):
            if "checked" not in system and ((work, case) not in best or ms < best[(work, case)][0]):
                best[(work, case)] = (ms, system)
        else:
            peers[(work, case, system)] = min(ms, peers.get((work, case, system), ms))
    return best, peers


def order(case):
    """Attention cases by head_dim, sequence, causal (as the README's table); others by size."""
    m = re.match(r"b\d+ s(\d+) h\d+ d(\d+) c(\d)", case)
    if m:
        return (int(m.group(2)), int(m.group(1)), int(m.group(3)))
    return tuple(int(x) for x in re.findall(r"\d+", case))


def main(paths):
    best, peers = read(paths)
    print("| workload | shape | Palladium (best configuration) | ms | peer | ms | ratio |")
    print("|---|---|---|---|---|---|---|")
    missing = 0
    for work in PEERS:
        for (w, case), (ms, system) in sorted(best.items(), key=lambda kv: order(kv[0][1])):
            if w != work:
                continue
            found = [(p, peers[(work, case, p)]) for p in PEERS[work] if (work, case, p) in peers]
            if not found:
                missing += 1
                print(f"| {work} | {case} | {system} | {ms:.3f} | (no peer row) | | |")
            for peer, pms in found:
                print(f"| {work} | {case} | {system} | {ms:.3f} | {peer} | {pms:.3f} | {pms / ms:.2f} |")
    if not best:
        print("no Palladium rows: did cuda_bench finish?", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
