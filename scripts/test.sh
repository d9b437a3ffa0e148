#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it: environment, formatter, linter, pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not slow" -x).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh
VENV=${LC_CFR_VENV:-.venv}
"$VENV/bin/ruff" format --check .
"$VENV/bin/ruff" check .
"$VENV/bin/python" -m pytest -n 2 "$@"
