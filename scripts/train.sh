#!/usr/bin/env bash
# Trains with configs/default.py (creating .venv on first use). Extra arguments are
# passed on, e.g. scripts/train.sh --workdir=runs/a --config.traversal.backend=recursive
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh
VENV=${LC_CFR_VENV:-.venv}
if [ ! -f lc_cfr/main.py ]; then
  echo "The trainer (python -m lc_cfr.main --config=configs/default.py) lands with the" >&2
  echo "trainer issue; this checkout has the game engines only. See README.md." >&2
  exit 2
fi
exec "$VENV/bin/python" -m lc_cfr.main --config=configs/default.py "$@"
