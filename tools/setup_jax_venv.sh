#!/usr/bin/env bash
# Create (or reuse) a Python venv with a pinned CPU-only JAX, used by the
# differential tests (tests/differential/pallas_reference.py) to run the real
# JAX Pallas kernels in interpret mode.
#
# Usage: tools/setup_jax_venv.sh VENV_DIR
#
# Idempotent: if VENV_DIR/bin/python already imports the pinned jax/jaxlib/numpy
# it exits 0 at once. Needs network access to PyPI only when installing.
#
# Why jax 0.4.35: its jax/experimental/pallas/ops/gpu/attention.py is identical
# (modulo whitespace) to the seed copy (Oct 2024) that Palladium ports, and its
# Pallas API still matches the quickstart (BlockSpec(block_shape, index_map)).
set -euo pipefail

JAX_VERSION=0.4.35
PINS=(
  "jax==${JAX_VERSION}"
  "jaxlib==${JAX_VERSION}"
  "numpy==2.1.3"
  "ml_dtypes==0.5.0"
  "scipy==1.14.1"
  "opt_einsum==3.4.0"
)
PYTHON=${PYTHON:-python3}

if [[ $# -ne 1 || -z "$1" ]]; then
  echo "usage: $0 VENV_DIR" >&2
  exit 2
fi
VENV=$1
VPY="$VENV/bin/python"

check_venv() {
  [[ -x "$VPY" ]] || return 1
  "$VPY" - "$JAX_VERSION" <<'EOF' >/dev/null 2>&1
import sys
import jax, jaxlib, numpy
from jax.experimental import pallas  # noqa: F401
want = sys.argv[1]
sys.exit(0 if jax.__version__ == want and jaxlib.__version__ == want
         and numpy.__version__ == "2.1.3" else 1)
EOF
}

if check_venv; then
  echo "jax venv ok: $VENV (jax $JAX_VERSION, already set up)"
  exit 0
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "error: $PYTHON not found; install Debian package python3 (and python3-venv)" >&2
  exit 1
fi

if [[ ! -x "$VPY" ]]; then
  if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "error: '$PYTHON -m venv' is unavailable (no venv/ensurepip module);" \
         "the Debian package python3-venv is needed" >&2
    exit 1
  fi
  created=0
  [[ -e "$VENV" ]] || created=1
  if ! "$PYTHON" -m venv "$VENV"; then
    echo "error: '$PYTHON -m venv $VENV' failed; the Debian package python3-venv" \
         "may be missing" >&2
    [[ $created -eq 1 ]] && rm -rf -- "$VENV"
    exit 1
  fi
fi

if ! "$VPY" -m pip install -q --disable-pip-version-check --no-input \
      "${PINS[@]}"; then
  echo "error: pip install of ${PINS[*]} into $VENV failed" >&2
  exit 1
fi

if ! check_venv; then
  echo "error: $VENV was installed but does not import jax $JAX_VERSION" >&2
  exit 1
fi
echo "jax venv ok: $VENV (jax $JAX_VERSION, CPU)"
