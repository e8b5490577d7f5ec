#!/usr/bin/env bash
# Installs the Debian packages Palladium needs to build, test and benchmark (README lists what each
# is for). Installs only what is missing, so it is quick on a machine that has them.
set -euo pipefail
packages=(cmake ninja-build pkg-config g++ clang libgtest-dev libgmock-dev libbenchmark-dev python3 python3-venv python3-pip
          libopenblas-dev openmpi-bin libopenmpi-dev libdlpack-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
