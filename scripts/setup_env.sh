#!/usr/bin/env bash
# Creates .venv on first use (exact versions from constraints.txt, CPU torch) and builds
# the Cython engine in place. Cheap when nothing changed; sourced by test.sh and train.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LC_CFR_VENV:-.venv}
stamp="$VENV/.lc_cfr_stamp"
want=$(cat constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setting up $VENV (first use or changed dependencies)..." >&2
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -c constraints.txt setuptools wheel Cython numpy
  "$VENV/bin/python" -m pip install -q --no-build-isolation -c constraints.txt -e ".[dev,openspiel,plots,search,browser]"
  echo "$want" > "$stamp"
fi
"$VENV/bin/python" setup.py -q build_ext --inplace >/dev/null
# The real-browser test of lc_cfr.serve (tests/test_serve.py) drives Debian's chromium
# through chromium-driver: CI installs them; elsewhere that test skips and names this.
if [ "${CI:-}" = "true" ] && ! command -v chromedriver >/dev/null 2>&1; then
  echo "installing chromium and chromium-driver for the browser test..." >&2
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  # never fatal: without them the browser test skips and says how to install them
  ($SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null) \
    || echo "could not install chromium and chromium-driver: the browser test will skip" >&2
fi
