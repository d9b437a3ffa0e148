#!/usr/bin/env bash
# What lc_cfr does on a machine with an NVIDIA GPU, in one bounded run.
#
#   scripts/gpu_check.sh [OUT_DIR]          # OUT_DIR: the argument, else $OUT, else gpu_results/
#   GPU_CHECK_QUICK=1 scripts/gpu_check.sh  # tiny settings (seconds of work per benchmark)
#
# With `nvidia-smi` present it sets up a separate venv (.venv-gpu, or $LC_CFR_GPU_VENV) by
# scripts/setup_env.sh, so the CPU venv the tests use is never touched, and installs
# jax[cuda12] there at constraints.txt's jax version. torch stays constraints.txt's pin
# (the CPU build where that is what the wheel source has): the torch learner and the
# torch backends then run on the CPU, and a CUDA torch wheel installed into that venv by
# hand is used when present (the check adds a jax+torch iteration on `cuda`). Without a
# GPU it says so and runs everything on the CPU venv (.venv) with the tiny settings.
#
# It prints the devices, then runs the engine, traversal, learner and whole-iteration
# benchmarks (scripts/bench_*.py, --json) one after the other, each under `timeout`
# within one budget (GPU_CHECK_BUDGET seconds, default 450: the benchmarks end in under 8
# minutes; a benchmark that runs out of time is cut and the next one runs), then a short
# summary. OUT_DIR receives devices.txt, <bench>.json and <bench>.log per benchmark,
# status.txt (exit code and seconds of each; 124 = cut by its timeout) and summary.txt.
# Setting up the venv (first use: minutes of downloads) is outside the budget.
set -uo pipefail # no -e: one failing benchmark must not stop the others

out_arg=${1:-${OUT:-gpu_results}}
mkdir -p "$out_arg"
OUT_DIR=$(cd "$out_arg" && pwd) # resolved before leaving the caller's directory
cd "$(dirname "$0")/.."
QUICK=${GPU_CHECK_QUICK:-0}
BUDGET=${GPU_CHECK_BUDGET:-450}

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  GPU=1
  VENV=${LC_CFR_GPU_VENV:-.venv-gpu}
else
  GPU=0
  QUICK=1
  VENV=.venv
  echo "gpu_check: no NVIDIA GPU (nvidia-smi absent or failing): running on the CPU with tiny settings"
fi

setup_start=$SECONDS
LC_CFR_VENV=$VENV scripts/setup_env.sh || {
  echo "gpu_check: setting up $VENV failed" >&2
  exit 1
}
PY=$VENV/bin/python
if [ "$GPU" = 1 ]; then
  jax_version=$(sed -n 's/^jax==//p' constraints.txt)
  have=$("$PY" -m pip show jax-cuda12-plugin 2>/dev/null | sed -n 's/^Version: //p')
  if [ "$have" != "$jax_version" ]; then
    echo "installing jax[cuda12]==$jax_version into $VENV..."
    # -c constraints.txt keeps jax and jaxlib at the tested pins; the CUDA plugin and the
    # nvidia-* runtime wheels it pulls are not in the constraints and come as released
    "$PY" -m pip install -q -c constraints.txt "jax[cuda12]==$jax_version" ||
      echo "gpu_check: WARNING: could not install jax[cuda12] (offline?): JAX will run on the CPU" >&2
  fi
fi
echo "set-up: $((SECONDS - setup_start)) s"

# a result of an earlier check in OUT_DIR must not pass for one of this check
rm -f "$OUT_DIR"/{engine,traversal,learner,iteration_*}.{json,log}
: >"$OUT_DIR/status.txt"
{
  [ "$GPU" = 1 ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" - <<'EOF'
import os

import jax
import torch

print(f"jax {jax.__version__}, default backend {jax.default_backend()}")
for device in jax.devices():
    print(f"  jax device {device} ({device.device_kind})")
print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
print(f"{os.cpu_count()} CPUs")
EOF
} 2>&1 | tee "$OUT_DIR/devices.txt"
JAX_BACKEND=$("$PY" -c "import jax; print(jax.default_backend())" 2>/dev/null)
TORCH_CUDA=$("$PY" -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null)
if [ "$GPU" = 1 ] && [ "$JAX_BACKEND" != "gpu" ]; then
  echo "gpu_check: WARNING: JAX sees no GPU (backend $JAX_BACKEND): the figures are CPU figures" >&2
fi

bench_start=$SECONDS
# run_step NAME SECONDS COMMAND...: at most SECONDS, and never past the budget
run_step() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - (SECONDS - bench_start)))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 20 ]; then
    echo "$name: skipped (budget spent)" | tee -a "$OUT_DIR/status.txt"
    return
  fi
  echo
  echo "== $name (at most ${limit} s): $*"
  local start=$SECONDS
  # timeout signals the command's whole process group (torch workers included)
  timeout -k 15 "$limit" "$@" 2>&1 | tee "$OUT_DIR/$name.log"
  local code=${PIPESTATUS[0]}
  echo "$name: exit $code after $((SECONDS - start)) s" | tee -a "$OUT_DIR/status.txt"
}

C=configs/default.py
if [ "$QUICK" = 1 ]; then
  run_step engine 60 "$PY" scripts/bench_engine.py --batches 64 --min-games 64 \
    --cython-games 256 --repeats 1 --json "$OUT_DIR/engine.json"
  run_step traversal 60 "$PY" scripts/bench_traversal.py --config "$C:smoke" --lanes 8 \
    --repeats 1 --forward-rows 64 --min-forwards 2 --json "$OUT_DIR/traversal.json"
  run_step learner 60 "$PY" scripts/bench_learner.py --config "$C:smoke,classic" \
    --variants optax,torch --updates 4 --repeats 1 --rows 2000 --json "$OUT_DIR/learner.json"
  run_step iteration_classic 150 "$PY" scripts/bench_iteration.py --config "$C:smoke,classic" \
    --variants jax+optax,interleaved+optax --iterations 2 --variant-timeout 70 \
    --json "$OUT_DIR/iteration_classic.json"
  run_step iteration_default 90 "$PY" scripts/bench_iteration.py --config "$C:smoke" \
    --variants jax+optax --iterations 2 --variant-timeout 80 \
    --json "$OUT_DIR/iteration_default.json"
else
  # a GPU wants large batches: the engine and the lockstep lanes at 1024 and beyond
  run_step engine 60 "$PY" scripts/bench_engine.py --batches 1024,16384 --min-games 16384 \
    --repeats 2 --json "$OUT_DIR/engine.json"
  run_step traversal 90 "$PY" scripts/bench_traversal.py --lanes 1024,4096 --repeats 2 \
    --json "$OUT_DIR/traversal.json"
  run_step learner 45 "$PY" scripts/bench_learner.py --variants optax,torch --updates 64 \
    --repeats 2 --json "$OUT_DIR/learner.json"
  # the classic modes (every backend runs them; the issue's reference figures), then the
  # default estimator (expanded at a sampled decision, card head: jax only)
  run_step iteration_classic 140 "$PY" scripts/bench_iteration.py \
    --variants jax+optax,interleaved+optax --iterations 2 --variant-timeout 100 \
    --json "$OUT_DIR/iteration_classic.json"
  run_step iteration_default 90 "$PY" scripts/bench_iteration.py --config "$C" \
    --variants jax+optax --iterations 2 --variant-timeout 85 \
    --json "$OUT_DIR/iteration_default.json"
  if [ "$TORCH_CUDA" = 1 ]; then
    run_step iteration_torch_cuda 60 "$PY" scripts/bench_iteration.py --variants jax+torch \
      --set run.device=cuda --iterations 2 --variant-timeout 55 \
      --json "$OUT_DIR/iteration_torch_cuda.json"
  fi
fi

echo
echo "== summary (benchmarks $((SECONDS - bench_start)) s; $OUT_DIR)"
"$PY" - "$OUT_DIR" <<'EOF' | tee "$OUT_DIR/summary.txt"
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])


def sec(value):
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def load(name):
    path = out / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def missing(name):
    """Why a benchmark has no result: cut or failed (its log says), or never started."""
    if (out / f"{name}.log").exists():
        return f"{name}: no result (cut by its timeout or failed: see {name}.log)"
    return f"{name}: not run (budget spent)"


print((out / "devices.txt").read_text().strip())
engine = load("engine")
if engine:
    jax_rows = [
        r for r in engine["results"] if r["engine"].startswith("jax") and "noenc" not in r["engine"]
    ]
    best = max(jax_rows, key=lambda r: r["decisions_per_second"])
    cython = engine["results"][0]["decisions_per_second"]
    print(
        f"engine: JAX {best['decisions_per_second']:,.0f} decisions/s at batch {best['batch']} "
        f"({engine['backend']}), Cython {cython:,.0f}: {best['ratio_to_cython']:.2f}x"
    )
else:
    print(missing("engine"))
traversal = load("traversal")
if traversal:
    print(
        f"traversal ({traversal['config']}): {traversal['best_nodes_per_second']:,.0f} nodes/s "
        f"at lanes {traversal['best_nodes_per_second_lanes']}, best ratio to the forward-only "
        f"limit {traversal['best_ratio']:.2f}"
    )
else:
    print(missing("traversal"))
learner = load("learner")
if learner:
    cells = ", ".join(f"{r['variant']} {r['updates_per_second']:.1f}" for r in learner["results"])
    print(f"learner (updates/s, batch {learner['batch_size']}): {cells}")
else:
    print(missing("learner"))
for name in ("iteration_classic", "iteration_default", "iteration_torch_cuda"):
    report = load(name)
    if report is None:
        if name != "iteration_torch_cuda":  # run only where torch sees a GPU
            print(missing(name))
        continue
    print(f"{name} ({report['config']}, {report['iterations']} iterations):")
    for r in report["results"]:
        if "error" in r:
            print(f"  {r['variant']}: FAILED: {r['error']}")
            continue
        last = r["steady"] or r["iteration_1"]
        device = f", device peak {r['device_peak_gb']:.2f} GB" if r["device_peak_gb"] else ""
        print(
            f"  {r['variant']}: iteration 1 {sec(r['iteration_1']['iteration_seconds'])} s, "
            f"then {sec(last['iteration_seconds'])} s (traversal {sec(last['traversal_seconds'])}, "
            f"advantage {sec(last['advantage_train_seconds'])}, strategy "
            f"{sec(last['strategy_train_seconds'])}), {last['nodes_per_second']:,.0f} nodes/s, "
            f"peak RSS {r['peak_rss_gb']:.2f} GB{device}"
        )
print((out / "status.txt").read_text().strip())
EOF
