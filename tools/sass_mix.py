#!/usr/bin/env python3
"""The SASS instruction mix of generated CUDA kernels, on a machine without a GPU.

usage: tools/sass_mix.py DIR_OR_CUBIN [...]

Give it the cubins that a compile-only run writes (PALLADIUM_CUDA_COMPILE_ONLY=1 with a debug
call and PALLADIUM_DEBUG_DIR=DIR: every pallas_call's .cu, .ptx and .cubin for sm_90a). For each
cubin it prints the kernel's instruction count and, for every loop holding a wgmma (a branch back
to an earlier label), the loop's length, its uniform-datapath share and its most frequent opcodes:
what one iteration issues per warp, which is what the attention loops are bound by at head_dim 64.

nvdisasm comes from $PL_NVDISASM, the PATH, /usr/local/cuda/bin, or else PyPI's
nvidia-cuda-nvdisasm wheel, downloaded once into ~/.cache/palladium/nvdisasm (pip download, no
install). Standard library only.
"""
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

CACHE = pathlib.Path.home() / ".cache" / "palladium" / "nvdisasm"


def find_nvdisasm():
    for candidate in (os.environ.get("PL_NVDISASM"), shutil.which("nvdisasm"), "/usr/local/cuda/bin/nvdisasm"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    found = sorted(CACHE.glob("**/bin/nvdisasm"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(CACHE),
                        "nvidia-cuda-nvdisasm"], check=True)
        for wheel in CACHE.glob("*.whl"):
            zipfile.ZipFile(wheel).extractall(CACHE)
        found = sorted(CACHE.glob("**/bin/nvdisasm"))
    if not found:
        sys.exit("sass_mix: no nvdisasm (set PL_NVDISASM)")
    found[-1].chmod(0o755)
    return str(found[-1])


def instructions(listing):
    """The listing's instructions in order, and each label's position among them."""
    ins, labels = [], {}
    for line in listing.splitlines():
        label = re.match(r"^\s*(\.L_x_\d+):", line)
        if label:
            labels[label.group(1)] = len(ins)
            continue
        m = re.match(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            ins.append(m.group(2))
    return ins, labels


def opcode(text):
    return re.sub(r"^@!?U?P[0-9T]+\s+", "", text).split()[0].split(".")[0]


def report(cubin, nvdisasm):
    listing = subprocess.run([nvdisasm, "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    ins, labels = instructions(listing)
    print(f"{cubin}: {len(ins)} instructions")
    for end, text in enumerate(ins):
        target = re.search(r"BRA\s+`\((\.L_x_\d+)\)", text)
        if not target or labels.get(target.group(1), end + 1) > end:
            continue
        body = ins[labels[target.group(1)]:end + 1]
        # out-of-line retry stubs after the kernel's EXIT branch back too: not loops
        if not any("HGMMA" in b for b in body) or any(opcode(b) == "EXIT" for b in body):
            continue
        mix = collections.Counter(opcode(b) for b in body)
        uniform = sum(n for op, n in mix.items() if op.startswith("U") and op != "UTMALDG")
        top = " ".join(f"{op}:{n}" for op, n in mix.most_common(12))
        print(f"  loop of {len(body)} ({uniform} uniform): {top}")


def main(args):
    if not args:
        sys.exit(__doc__)
    nvdisasm = find_nvdisasm()
    for arg in args:
        path = pathlib.Path(arg)
        for cubin in sorted(path.glob("*.cubin")) if path.is_dir() else [path]:
            report(cubin, nvdisasm)


if __name__ == "__main__":
    main(sys.argv[1:])
