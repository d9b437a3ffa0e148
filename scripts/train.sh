#!/usr/bin/env bash
# Trains with configs/default.py (creating .venv on first use). Extra arguments are
# passed on, e.g. scripts/train.sh --workdir=runs/a --config.traversal.sampling_mode=external
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh
VENV=${LC_CFR_VENV:-.venv}
exec "$VENV/bin/python" -m lc_cfr.main --config=configs/default.py "$@"
