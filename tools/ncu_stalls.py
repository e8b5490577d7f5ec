#!/usr/bin/env python3
"""Where a kernel's warps wait, per SASS instruction, from Nsight Compute's source page.

usage: tools/ncu_stalls.py SOURCE.csv [TOP]

SOURCE.csv is `ncu -i REPORT --page source --csv --print-source sass` of a report collected with
`--set full` (its warp-state sampling). Prints the sampled stall reasons over the whole kernel and
the TOP (default 30) instructions holding the most samples, each with its two largest reasons:
e.g. the wgmma waits (WARPGROUP.DEPBAR), the block barrier, the quad shuffles' short scoreboard.
Standard library only.
"""
import csv
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def count(row, column):
    return int(row[column] or 0)


def main(args):
    if not args:
        sys.exit(__doc__)
    rows = list(csv.reader(open(args[0])))
    header = next(i for i, r in enumerate(rows) if SAMPLES in r)
    names, data = rows[header], rows[header + 1:]
    col = {name: i for i, name in enumerate(names)}
    reasons = [n for n in names if n.startswith("stall_") and "Not Issued" not in n]
    total = sum(count(r, col[SAMPLES]) for r in data) or 1
    executed = sum(count(r, col["Instructions Executed"]) for r in data)
    print(f"{total} samples, {executed} warp instructions executed")
    by_reason = sorted(((sum(count(r, col[n]) for r in data), n) for n in reasons), reverse=True)
    print(" ".join(f"{n[6:]} {100 * v / total:.1f}%" for v, n in by_reason[:10]))
    top = int(args[1]) if len(args) > 1 else 30
    for r in sorted(data, key=lambda r: -count(r, col[SAMPLES]))[:top]:
        two = sorted(((count(r, col[n]), n[6:]) for n in reasons), reverse=True)[:2]
        why = ", ".join(f"{n} {100 * v / total:.1f}%" for v, n in two if v)
        print(f"{r[0][-6:]} {100 * count(r, col[SAMPLES]) / total:5.1f}%  {r[1].strip()[:60]:60s} {why}")


if __name__ == "__main__":
    main(sys.argv[1:])
