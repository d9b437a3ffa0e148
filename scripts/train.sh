#!/usr/bin/env bash
# Trains with configs/default.py (creating .venv on first use). Extra arguments are
# passed on, e.g. scripts/train.sh --workdir=runs/a --config.traversal.max_depth=2; a
# --config=configs/default.py:PRESET argument picks a preset instead of the default.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh
VENV=${LC_CFR_VENV:-.venv}
config=(--config=configs/default.py)
for arg in "$@"; do
  if [[ "$arg" == --config=* ]]; then config=(); fi
done
exec "$VENV/bin/python" -m lc_cfr.main "${config[@]}" "$@"
