"""Whole training iterations side by side, per traversal backend and learner.

Every variant `BACKEND+LEARNER[+amp][+compile]` (backend: jax | recursive | interleaved
| server; learner: optax | torch, `optimization.learner`; `+amp` sets run.use_amp,
`+compile` run.torch_compile) runs `--iterations` Deep CFR iterations of the same config
in its own fresh subprocess, one variant after the other, so that each starts from a
cold process and its peak resident memory is its own. The child builds
`lc_cfr.train.Trainer` from the config exactly as `lc_cfr.main` does and calls
`Trainer.iteration` as `Trainer.run` does, with evaluation off and, unless
`--checkpoint` is given, no checkpoints (the run directory is a temporary folder,
removed at the end). With `--checkpoint` it saves after every iteration as the default
config does (`checkpoint.save_latest`, asynchronous unless the config says otherwise),
and `checkpoint_seconds` is what the loop paid for it.

Per variant and iteration it reports the trainer's own timing fields of a metrics row
(`iteration_seconds`, `traversal_seconds`, `memory_add_seconds`,
`advantage_train_seconds`, `strategy_train_seconds`, `checkpoint_seconds`), the nodes per
second of the traversal, milliseconds per update of the advantage training (both
players' updates together) and of the strategy training, the resident memory (RSS) of
the trainer's process after iteration 1 and its peak at the end (VmHWM), the RSS of its
worker processes after iteration 1 (torch backends), and the device's peak memory where
JAX reports one (GPUs). Iteration 1 includes compilation (XLA, and the torch workers'
start-up); `it 2+` is the mean of the later iterations, the steady state. With the
persistent compilation cache (`--jax-cache`, by default lc_cfr.main's:
$LC_CFR_JAX_CACHE or ~/.cache/lc_cfr/jax) a warm cache shortens iteration 1;
`--jax-cache ''` compiles cold.

Measured ratios (this run): per figure, the first variant's over this variant's
(`against_first_variant`: numerator, denominator and value, on `it 2+` where measured,
else iteration 1); the variants run one after the other in separate processes, in one
run of this script. Advantage samples per second (`traversal/advantage_samples` over
`traversal_seconds`, issue 23's currency) is a rate, so its ratio is this variant's over
the first's.

TWO CONFIGS SIDE BY SIDE: a variant may carry `+preset=NAME` (a preset of the --config
file, applied after the file's own) and `+block.field=value` (applied after --set), so
one run trains, say, the default until 2026-12-04 beside today's, each on its own
networks as they learn (the traversal's cost depends on how long the policies' games
run, which random networks do not show):

    .venv/bin/python scripts/bench_iteration.py --config configs/default.py --iterations 3 \\
        --variants jax+optax+preset=plain+traversal.lockstep_schedule=all_lanes,jax+optax

EXTERNAL REFERENCES, not measured by this script (`EXTERNAL_REFERENCES`, stored in the
JSON with their provenance and printed apart as "against external reference":
reference / measured, never a speed-up):

* the predecessor's (PyTorch Deep CFR), reported by issue 13 as measured on the 2-core
  x86_64 CPU machine these figures come from, with its own default config: iteration
  132.1 s, traversal 48.1 s, advantage training 56.0 s (2 x 512 updates of batch
  1024), strategy training 28.0 s plus 10.2 s building the batch tensors (the
  strategy figure counts both: lc_cfr gathers its batches inside the jitted training
  scan), peak RSS 0.75 GB. It was the FIRST iteration of a one-iteration run, so it is
  compared with each variant's iteration 1 (compilation and worker start-up included;
  the persistent compilation cache, `jax_cache` in the JSON, can shorten it);
* lc_cfr's before issue 13, same machine: `jax` 89.3 s (traversal 12.7, advantage 47.6,
  strategy 26.0, peak 7.26 GB) and `interleaved` 81.8 s (10.7, 45.7, 22.2, 7.15 GB),
  both with the optax learner, on the configuration that is now `wide,classic`
  (outcome sampling from the root, max_depth 2, slot head; 512x3 networks, 512 updates
  of batch 1024, 2M-row float16 memories allocated up front). The issue did not record
  which iteration they are, nor whether compilation was included, so they are compared
  with both iteration 1 and `it 2+` of the same backend with optax.

The default `--config` is therefore `configs/default.py:wide,classic`, the modes every
backend implements (docs/backends.md) at the predecessor's sizes (`wide`: 512x3, 1024
traversals; the default's own sizes since 2026-12-01 are 256x3 and 2048);
`--config configs/default.py:wide` measures the default estimator (expanded at a
sampled decision, card head), which only `jax+optax` runs (the others are refused at
start-up, and the table says so).

    .venv/bin/python scripts/bench_iteration.py [--config configs/default.py:wide,classic] \\
        [--variants jax+optax,interleaved+optax] [--iterations 2] [--checkpoint] \\
        [--set traversal.num_workers=2 ...] [--variant-timeout SECONDS] [--json out.json]
    .venv/bin/python scripts/bench_iteration.py \\
        --variants jax+optax,interleaved+torch,recursive+torch,server+torch,jax+torch

A SCALED config for quick runs (about a tenth of the default's work; per-update
milliseconds and nodes/s stay comparable, seconds per iteration and memory do not):

    .venv/bin/python scripts/bench_iteration.py --set traversal.traversals_per_player=128 \\
        --set optimization.advantage_updates=64 --set optimization.strategy_updates=64 \\
        --set memory.advantage_capacity=200000 --set memory.strategy_capacity=200000

and for seconds, the 3-colour `:small,classic` preset or the `:smoke` preset (jax+optax
only, its default estimator). The memories dominate the peak RSS: three reservoirs of
`memory.*_capacity` rows each (2M by default).

JSON schema 2 (since issue 21): `external_references` (figures and provenance),
per variant `against_first_variant` (ratio records with parts), `steady_spread` and
`against_external_reference`. Schema 1 files (no `schema` field) held `references` and
`speedup_vs_first` / `speedup_vs_predecessor`, the latter against the variant's `it 2+`
where measured (not like with like: the predecessor's figure is a first iteration).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import psutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_common  # noqa: E402
from bench_learner import random_memory  # noqa: E402
from best_response import apply_overrides  # noqa: E402

from lc_cfr import compile_cache  # noqa: E402
from lc_cfr.memory import reservoir  # noqa: E402
from lc_cfr.train import Trainer  # noqa: E402
from lc_cfr.train.setup import LEARNERS  # noqa: E402
from lc_cfr.traversal.registry import BACKENDS  # noqa: E402

DEFAULT_CONFIG = f"{ROOT / 'configs' / 'default.py'}:wide,classic"
DEFAULT_VARIANTS = "jax+optax,interleaved+optax"
EXTRAS = ("amp", "compile")
PRESET = "preset"  # `+preset=NAME` in a variant: a preset of the config file on top of its own

# The per-iteration figures, in the order the table prints them.
TIMINGS = (
    "iteration_seconds",
    "traversal_seconds",
    "memory_add_seconds",
    "advantage_train_seconds",
    "strategy_train_seconds",
    "checkpoint_seconds",
)
# Timing fields a row holds only in some configurations (recorded, not tabulated).
OTHER_TIMINGS = ("checkpoint_wait_seconds", "value_train_seconds", "evaluation_seconds")
FIGURES = (
    *TIMINGS,
    "other_seconds",
    "nodes_per_second",
    "advantage_samples_per_second",
    "advantage_ms_per_update",
    "strategy_ms_per_update",
)
# Figures of the whole process, one per variant.
PROCESS_FIGURES = (
    "peak_rss_gb",
    "rss_after_iteration_1_gb",
    "workers_rss_after_iteration_1_gb",
    "device_peak_gb",
)
# External references (see the module docstring): not measured by this script.
PREDECESSOR = bench_common.external_reference(
    {
        "iteration_seconds": 132.1,
        "traversal_seconds": 48.1,
        "advantage_train_seconds": 56.0,
        # its strategy training (28.0 s) plus building the batch tensors (10.2 s), which
        # lc_cfr does inside the training scan: the comparable cost
        "strategy_train_seconds": 28.0 + 10.2,
        "advantage_ms_per_update": 1000 * 56.0 / (2 * 512),
        "strategy_ms_per_update": 1000 * 28.0 / 512,
        "peak_rss_gb": 0.75,
    },
    {
        "what": "the predecessor (PyTorch Deep CFR), its own default config: outcome "
        "sampling, 512x3 networks, 2 x 512 advantage and 512 strategy updates of batch 1024",
        "machine": "the 2-core x86_64 CPU (no GPU) of lc_cfr's 2026-11-30/12-01 figures, "
        "as issue 13 reports",
        "date": "not recorded; reported in issue 13, in lc_cfr since 2026-12-01 (9b5a910)",
        "iteration": 1,
        "iteration_note": "the first iteration of a one-iteration run (start-up included)",
        "includes": "strategy_train_seconds = 28.0 s strategy training + 10.2 s building "
        "the batch tensors; strategy_ms_per_update from the 28.0 s alone",
    },
)
BEFORE = {
    f"lc_cfr before issue 13, {backend}+optax": bench_common.external_reference(
        figures,
        {
            "what": f"lc_cfr before issue 13, backend {backend}, optax learner, the config "
            "now `wide,classic` (512x3, 1024 traversals, 512 updates of batch 1024, 2M-row "
            "float16 memories allocated up front)",
            "machine": "the same 2-core x86_64 CPU, as issue 13 reports",
            "date": "before 2026-12-01; reported in issue 13 (9b5a910)",
            "iteration": None,
            "iteration_note": "not recorded, nor whether compilation was included: "
            "compared with both iteration 1 and the later iterations",
            "includes": "the trainer's timing fields of that version",
            "variant": f"{backend}+optax",
        },
    )
    for backend, figures in (
        (
            "jax",
            {
                "iteration_seconds": 89.3,
                "traversal_seconds": 12.7,
                "advantage_train_seconds": 47.6,
                "strategy_train_seconds": 26.0,
                "peak_rss_gb": 7.26,
            },
        ),
        (
            "interleaved",
            {
                "iteration_seconds": 81.8,
                "traversal_seconds": 10.7,
                "advantage_train_seconds": 45.7,
                "strategy_train_seconds": 22.2,
                "peak_rss_gb": 7.15,
            },
        ),
    )
}
EXTERNAL_REFERENCES = {"predecessor": PREDECESSOR, **BEFORE}
# the figures compared with a reference: the five timings, per-update costs, peak RSS
COMPARED = (*TIMINGS[:5], "advantage_ms_per_update", "strategy_ms_per_update", "peak_rss_gb")
GB = 1024**3


# ----- variants ---------------------------------------------------------------------


def parse_variant(text: str) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    """(backend, learner, extras, settings) of
    `BACKEND+LEARNER[+amp][+compile][+preset=NAME][+block.field=value]...`: `settings`
    are the `=` parts in their order (a preset, or a config override applied after
    --set), so one run can hold two configs side by side."""
    parts = [part.strip() for part in text.split("+")]
    if len(parts) < 2:
        raise ValueError(f"variant {text!r}: want BACKEND+LEARNER, e.g. jax+optax")
    backend, learner, *rest = parts
    extras = [part for part in rest if "=" not in part]
    settings = tuple(part for part in rest if "=" in part)
    if backend not in BACKENDS:
        raise ValueError(f"variant {text!r}: backend must be one of {sorted(BACKENDS)}")
    if learner not in LEARNERS:
        raise ValueError(f"variant {text!r}: learner must be one of {list(LEARNERS)}")
    unknown = sorted(set(extras) - set(EXTRAS))
    if unknown:
        raise ValueError(
            f"variant {text!r}: unknown options {unknown}; valid: {list(EXTRAS)}, "
            f"{PRESET}=NAME or block.field=value"
        )
    return backend, learner, tuple(extras), settings


def variant_config(config_arg: str, overrides: list[str], variant: str):
    """The config a variant trains with: the file with its presets and the variant's
    (`+preset=NAME`, after the file's), the --set overrides, the variant's own
    (`+block.field=value`), its backend and learner, evaluation and the progress bar off."""
    backend, learner, extras, settings = parse_variant(variant)
    presets = [v for k, _, v in (item.partition("=") for item in settings) if k == PRESET]
    if presets:
        joiner = "," if ":" in config_arg else ":"
        config_arg = config_arg + joiner + ",".join(presets)
    config = bench_common.load_config(config_arg)
    apply_overrides(config, overrides)
    apply_overrides(config, [item for item in settings if item.partition("=")[0] != PRESET])
    config.traversal.backend = backend
    config.optimization.learner = learner
    config.run.use_amp = "amp" in extras
    config.run.torch_compile = "compile" in extras
    # what is timed is training: no bot games, no exploitability, nothing on the terminal
    config.evaluation.eval_every = 0
    config.evaluation.extended_eval_every = 0
    config.evaluation.exploitability_every = 0
    config.run.progress_bar = False
    config.logging.tensorboard = False
    return config


# ----- memory ----------------------------------------------------------------------


def _status_kb(field: str) -> int | None:
    """A `Vm...` field of /proc/self/status (e.g. VmRSS) in kB; None off Linux."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_gb() -> float:
    """This process's resident memory now."""
    kb = _status_kb("VmRSS")
    return kb * 1024 / GB if kb is not None else psutil.Process().memory_info().rss / GB


def peak_rss_gb() -> float:
    """This process's peak resident memory so far (VmHWM; ru_maxrss where absent)."""
    kb = _status_kb("VmHWM")
    if kb is None:
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if sys.platform == "darwin":  # bytes there, kB on Linux
            kb //= 1024
    return kb * 1024 / GB


def descendants_rss_gb() -> float:
    """The summed RSS of this process's descendants (the torch backends' workers and
    inference server); shared pages count once per process."""
    total = 0
    for child in psutil.Process().children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:  # a worker that just exited
            continue
    return total / GB


def device_peak_gb() -> float | None:
    """The first JAX device's peak memory in use, where the backend reports it (GPUs)."""
    try:
        stats = jax.local_devices()[0].memory_stats()
    except Exception:  # noqa: BLE001 - CPU backends raise or return None: no figure
        return None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return stats["peak_bytes_in_use"] / GB


# ----- the child: one variant ------------------------------------------------------


def iteration_figures(row: dict, config) -> dict:
    """The bench's figures of one metrics row of `Trainer.iteration`."""
    figures = {"iteration": row["iteration"]}
    for key in TIMINGS:
        figures[key] = float(row.get(key, 0.0))
    for key in OTHER_TIMINGS:
        if key in row:
            figures[key] = float(row[key])
    parts = sum(figures[key] for key in TIMINGS[1:]) + sum(
        figures.get(key, 0.0) for key in OTHER_TIMINGS
    )
    # what no timing field covers: target anatomy, finiteness checks, league snapshots
    figures["other_seconds"] = figures["iteration_seconds"] - parts
    figures["nodes"] = int(row["traversal/nodes"])
    figures["nodes_per_second"] = float(row["traversal/nodes_per_second"])
    # issue 23's currency: the traversal's advantage samples (both players) per second
    # of traversal; None where a backend does not count them
    samples = row.get("traversal/advantage_samples")
    figures["advantage_samples"] = None if samples is None else int(samples)
    figures["advantage_samples_per_second"] = (
        None if samples is None else float(samples) / figures["traversal_seconds"]
    )
    updates = int(row["optimization/advantage_updates_p0"]) + int(
        row["optimization/advantage_updates_p1"]
    )
    figures["advantage_updates"] = updates
    figures["advantage_ms_per_update"] = 1000 * figures["advantage_train_seconds"] / updates
    trained = "loss/strategy" in row  # strategy_train_when='read' skips the unread fits
    figures["strategy_updates"] = config.optimization.strategy_updates if trained else 0
    figures["strategy_ms_per_update"] = (
        1000 * figures["strategy_train_seconds"] / config.optimization.strategy_updates
        if trained
        else None
    )
    return figures


def fill_memories(trainer, state, seed: int = 0):
    """`state` with every memory filled to its capacity with random rows
    (`bench_learner.random_memory`), as in a long run: what peak memory and the learner's
    gathers cost with full memories."""
    actions = trainer.rules.num_actions

    def full(memory, codec):
        capacity = reservoir.capacity_of(memory)
        return random_memory(capacity, capacity, codec, actions, seed)

    codec = trainer.codec
    adv = tuple(full(m, codec) for m in state.advantage_memory)
    filled = state._replace(
        advantage_memory=adv, strategy_memory=full(state.strategy_memory, codec)
    )
    if state.value_memory is not None:
        filled = filled._replace(value_memory=full(state.value_memory, trainer.value_codec))
    return jax.block_until_ready(filled)


def reset_peak_rss() -> None:
    """Starts VmHWM afresh (Linux: clear_refs 5), so a peak excludes the set-up."""
    try:
        pathlib.Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def run_variant(args) -> dict:
    """Trains `args.iterations` iterations of `args.child` and returns its figures."""
    compile_cache.enable(args.jax_cache)  # as lc_cfr.main: through the persistent cache
    config = variant_config(args.config, args.set, args.child)
    config.checkpoint.save_latest = bool(args.checkpoint)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench_iteration_"))
    started = time.perf_counter()
    result: dict = {"devices": [str(device) for device in jax.devices()]}
    trainer = None
    try:
        trainer = Trainer(config, workdir)
        state = jax.block_until_ready(trainer.initial_state())
        if args.fill_memories:
            state = fill_memories(trainer, state)
            gc.collect()
            reset_peak_rss()
        result["set_up_seconds"] = time.perf_counter() - started
        result["rss_after_set_up_gb"] = rss_gb()
        iterations = []
        for _ in range(args.iterations):
            start = time.perf_counter()
            state, row = trainer.iteration(state)
            # the same two fields as Trainer.run: the save's blocking part counts
            row["checkpoint_seconds"] = 0.0
            if args.checkpoint:
                save_start = time.perf_counter()
                trainer.save(state, row)
                row["checkpoint_seconds"] = time.perf_counter() - save_start
            row["iteration_seconds"] = time.perf_counter() - start
            figures = iteration_figures(row, config)
            figures["rss_gb"] = rss_gb()
            iterations.append(figures)
            if len(iterations) == 1:
                result["rss_after_iteration_1_gb"] = figures["rss_gb"]
                result["workers_rss_after_iteration_1_gb"] = descendants_rss_gb()
            print(
                f"  iteration {figures['iteration']}: {figures['iteration_seconds']:.2f} s "
                f"(traversal {figures['traversal_seconds']:.2f}, advantage "
                f"{figures['advantage_train_seconds']:.2f}, strategy "
                f"{figures['strategy_train_seconds']:.2f}), {figures['nodes']:,} nodes, "
                f"RSS {figures['rss_gb']:.2f} GB",
                flush=True,
            )
        result["iterations"] = iterations
    finally:
        if trainer is not None:
            # Trainer.run's clean-up: the store that save() opened (its last write lands
            # here) and the backend's worker processes
            store = trainer._checkpoints
            if store is not None:
                wait_start = time.perf_counter()
                store.close()
                result["final_checkpoint_wait_seconds"] = time.perf_counter() - wait_start
            trainer.backend.close()
        shutil.rmtree(workdir, ignore_errors=True)
    result["peak_rss_gb"] = peak_rss_gb()
    # ru_maxrss of the reaped workers: the largest single one, not their sum
    children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result["workers_peak_rss_gb"] = children_kb * 1024 / GB if children_kb else 0.0
    result["device_peak_gb"] = device_peak_gb()
    result["wall_seconds"] = time.perf_counter() - started
    return result


# ----- the parent: every variant in its own process --------------------------------


def summarize(iterations: list[dict]) -> tuple[dict, dict | None]:
    """(iteration 1's figures, the mean of the later iterations' or None)."""
    first = {key: iterations[0].get(key) for key in FIGURES}
    later = iterations[1:]
    if not later:
        return first, None
    steady = {}
    for key in FIGURES:
        values = [row[key] for row in later if row.get(key) is not None]
        steady[key] = statistics.fmean(values) if values else None
    return first, steady


def kill_tree(process: subprocess.Popen, grace: float = 15.0) -> None:
    """Stops a variant's process and every process it started (its workers).

    SIGTERM first: the child then runs its clean-up (Trainer.run's), which stops the
    workers and unlinks the backend's shared memory. What is still alive after `grace`
    seconds is killed, except multiprocessing's resource trackers: they ignore SIGTERM,
    exit once the processes they serve are gone, and unlink what those left behind.
    """
    try:  # listed now: the workers of a child that exits are re-parented, out of reach
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        children = []
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    for child in children:
        try:
            if "resource_tracker" not in " ".join(child.cmdline()):
                child.kill()
        except psutil.Error:
            continue
    process.kill()
    process.wait()


def spawn_variant(variant: str, args) -> dict:
    """Runs one variant in a fresh interpreter; its figures, or the error it ended with."""
    handle, result_path = tempfile.mkstemp(prefix="bench_iteration_", suffix=".json")
    os.close(handle)
    command = [
        sys.executable,
        str(pathlib.Path(__file__).resolve()),
        f"--child={variant}",
        f"--config={args.config}",
        f"--iterations={args.iterations}",
        f"--jax-cache={args.jax_cache}",
        f"--result={result_path}",
        *(f"--set={item}" for item in args.set),
        *(["--checkpoint"] if args.checkpoint else []),
        *(["--fill-memories"] if args.fill_memories else []),
    ]
    backend, learner, extras, settings = parse_variant(variant)
    entry = {
        "variant": variant,
        "backend": backend,
        "learner": learner,
        "extras": list(extras),
        "settings": list(settings),
    }
    started = time.perf_counter()
    # stderr is kept (tail) for the error message; stdout streams through
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(command, stderr=stderr, text=True)
        try:
            code = process.wait(timeout=args.variant_timeout or None)
        except subprocess.TimeoutExpired:
            kill_tree(process)
            code = None
        except BaseException:  # Ctrl-C or the shell's timeout: no orphaned workers
            kill_tree(process)
            raise
        stderr.seek(0)
        tail = stderr.read()[-3000:]
    entry["process_seconds"] = time.perf_counter() - started
    text = pathlib.Path(result_path).read_text() if code == 0 else ""
    pathlib.Path(result_path).unlink(missing_ok=True)
    if code is None:
        entry["error"] = f"timed out after {args.variant_timeout} s"
    elif code != 0 or not text:
        lines = [line for line in tail.splitlines() if line.strip()]
        entry["error"] = lines[-1] if lines else f"exit status {code}"
        entry["stderr_tail"] = tail
    else:
        entry.update(json.loads(text))
        entry["iteration_1"], entry["steady"] = summarize(entry["iterations"])
        # the spread of the later iterations behind `it 2+`'s means (min, median, max)
        later = entry["iterations"][1:]
        entry["steady_spread"] = {
            key: bench_common.spread([row[key] for row in later])
            for key in FIGURES
            if later and all(row.get(key) is not None for row in later)
        }
    return entry


def headline(entry: dict) -> dict | None:
    """The figures compared across variants: `it 2+` where measured, else iteration 1."""
    if "error" in entry:
        return None
    return entry["steady"] or entry["iteration_1"]


def compared(figures: dict | None) -> dict | None:
    """`figures` for comparisons: without the strategy training time where no iteration
    fitted the strategy network (strategy_train_when='read' skips the unread fits), whose
    near-0 seconds no ratio should divide by."""
    if figures is None or figures.get("strategy_ms_per_update") is not None:
        return figures
    return {**figures, "strategy_train_seconds": None}


def add_ratios(results: list[dict]) -> None:
    """Measured ratios against the first variant that ran (`against_first_variant`: its
    seconds over this variant's, with both parts) and the comparisons with the external
    references (`against_external_reference`: reference / measured, like with like)."""
    first = next((e for e in results if headline(e)), None)
    for entry in results:
        figures = compared(headline(entry))
        if figures is None:
            continue
        base = compared(headline(first))
        phase = "it 2+" if entry["steady"] else "iteration 1"
        entry["against_first_variant"] = {
            key: {
                "value": base[key] / figures[key],
                "numerator": base[key],
                "denominator": figures[key],
                "numerator_is": f"{first['variant']} {key} ({phase})",
                "denominator_is": f"{entry['variant']} {key} ({phase})",
            }
            for key in TIMINGS[:5]
            if base.get(key) and figures.get(key)
        }
        rate = "advantage_samples_per_second"  # a rate: this variant's over the first's
        if base.get(rate) and figures.get(rate):
            entry["against_first_variant"][rate] = {
                "value": figures[rate] / base[rate],
                "numerator": figures[rate],
                "denominator": base[rate],
                "numerator_is": f"{entry['variant']} {rate} ({phase})",
                "denominator_is": f"{first['variant']} {rate} ({phase})",
            }
        peak = {"peak_rss_gb": entry["peak_rss_gb"]}
        measured = {
            "iteration_1": {**compared(entry["iteration_1"]), **peak},
            "steady": entry["steady"] and {**compared(entry["steady"]), **peak},
        }
        comparisons = {}
        for name, reference in EXTERNAL_REFERENCES.items():
            provenance = reference["provenance"]
            if provenance.get("variant") not in (None, entry["variant"]):
                continue  # a before-figure is compared with its own backend and learner
            phases = ["iteration_1"] if provenance["iteration"] == 1 else ["iteration_1", "steady"]
            for phase_name in phases:
                if measured[phase_name] is None:
                    continue
                key = name if len(phases) == 1 else f"{name} / {phase_name}"
                comparisons[key] = bench_common.against_reference(
                    reference, measured[phase_name], COMPARED, compared_with=phase_name
                )
        entry["against_external_reference"] = comparisons


def _cell(value, key: str) -> str:
    if value is None:
        return "-"
    if key == "nodes_per_second":
        return f"{value:,.0f}"
    if key == "advantage_samples_per_second":
        return f"{value:.1f}"
    if key.endswith("_gb"):
        return f"{value:.2f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


LABELS = {
    "iteration_seconds": "iteration s",
    "traversal_seconds": "traversal s",
    "memory_add_seconds": "memory add s",
    "advantage_train_seconds": "advantage train s",
    "strategy_train_seconds": "strategy train s",
    "checkpoint_seconds": "checkpoint s",
    "other_seconds": "other s",
    "nodes_per_second": "nodes/s",
    "advantage_samples_per_second": "adv. samples/s",
    "advantage_ms_per_update": "advantage ms/update",
    "strategy_ms_per_update": "strategy ms/update",
    "peak_rss_gb": "peak RSS GB",
    "rss_after_iteration_1_gb": "RSS after it 1 GB",
    "workers_rss_after_iteration_1_gb": "workers RSS it 1 GB",
    "device_peak_gb": "device peak GB",
}


def print_tables(results: list[dict], iterations: int) -> None:
    """The measured figures side by side, the measured ratios, then apart the external
    references and the comparisons with them."""
    label_width, width = 22, 11
    ran = [e for e in results if "error" not in e]
    phases = ["it 1"] + (["it 2+"] if iterations > 1 else [])
    top = "".join(f"{e['variant']:>{width * len(phases)}}" for e in ran)
    print(f"\nmeasured by this run\n{'':<{label_width}}{top}")
    print(f"{'':<{label_width}}" + "".join(f"{p:>{width}}" for _ in ran for p in phases))
    for key in (*FIGURES, *PROCESS_FIGURES):
        cells = []
        for entry in ran:
            if key in FIGURES:
                cells.append(_cell(entry["iteration_1"][key], key))
                if iterations > 1:
                    cells.append(_cell(entry["steady"][key], key))
            else:  # one figure per process, printed under `it 1`
                cells.append(_cell(entry.get(key), key))
                cells.extend([""] * (len(phases) - 1))
        print(f"{LABELS[key]:<{label_width}}" + "".join(f"{c:>{width}}" for c in cells))
    for entry in results:
        if "error" in entry:
            print(f"{entry['variant']}: FAILED: {entry['error']}")
    if not ran:
        return
    print(
        f"\nmeasured ratio = {ran[0]['variant']} seconds / variant seconds ({phases[-1]}), "
        "both of this run (separate processes, one after the other)"
    )
    print(f"{'':<{label_width}}" + "".join(f"{e['variant']:>{2 * width}}" for e in ran))
    for key in TIMINGS[:5]:
        cells = []
        for e in ran:
            record = e["against_first_variant"].get(key)
            cells.append("-" if record is None else f"{record['value']:.4f}")
        print(f"{LABELS[key]:<{label_width}}" + "".join(f"{c:>{2 * width}}" for c in cells))
    cells = []
    for e in ran:
        record = e["against_first_variant"].get("advantage_samples_per_second")
        cells.append("-" if record is None else f"{record['value']:.4f}")
    print(f"{'adv. samples/s (x)':<{label_width}}" + "".join(f"{c:>{2 * width}}" for c in cells))
    print(f"  (x: the variant's advantage samples a traversal second over {ran[0]['variant']}'s)")
    print(
        "\nEXTERNAL REFERENCES (not measured by this run): reference / measured, the "
        "measured phase matched to the reference's iteration; like with like only where "
        "this run's config is the reference's"
    )
    for name, reference in EXTERNAL_REFERENCES.items():
        provenance = reference["provenance"]
        print(
            f"  {name}: {provenance['what']}; machine: {provenance['machine']}; date: "
            f"{provenance['date']}; iteration: {provenance['iteration_note']}; "
            f"includes: {provenance['includes']}"
        )
    for entry in ran:
        for name, comparison in entry["against_external_reference"].items():
            cells = ", ".join(
                f"{LABELS[key]} {row['reference']:.4g} / {row['measured']:.4g} = "
                f"{row['reference_over_measured']:.4g}"
                for key, row in comparison["figures"].items()
            )
            print(f"  {entry['variant']} ({comparison['compared_with']}) against {name}: {cells}")


def write_json(path: str, args, results: list[dict]) -> None:
    document = {
        "schema": 2,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "jax": jax.__version__,
            "jax_backend": jax.default_backend(),
        },
        "config": args.config,
        "overrides": args.set,
        "iterations": args.iterations,
        "checkpoint": bool(args.checkpoint),
        "fill_memories": bool(args.fill_memories),
        "jax_cache": args.jax_cache or None,
        "external_references": EXTERNAL_REFERENCES,
        "results": results,
    }
    pathlib.Path(path).write_text(json.dumps(document, indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="path[:preset,...]")
    parser.add_argument(
        "--variants",
        default=DEFAULT_VARIANTS,
        help="comma list of BACKEND+LEARNER[+amp][+compile][+preset=NAME][+block.field=value]",
    )
    parser.add_argument("--iterations", type=int, default=2, help="per variant (>= 1)")
    parser.add_argument("--set", action="append", default=[], help="block.field=value")
    parser.add_argument("--checkpoint", action="store_true", help="save after every iteration")
    parser.add_argument(
        "--fill-memories",
        action="store_true",
        help="fill every memory to its capacity with random rows first (a long run's state); "
        "the peak then counts from the filled state",
    )
    parser.add_argument(
        "--jax-cache",
        default=os.environ.get("LC_CFR_JAX_CACHE", os.path.expanduser("~/.cache/lc_cfr/jax")),
        help="persistent compilation cache ('' = compile cold)",
    )
    parser.add_argument(
        "--variant-timeout", type=float, default=0, help="seconds per variant; 0 = none"
    )
    parser.add_argument("--json", help="write the figures here (after every variant)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the variant a child runs
    parser.add_argument("--result", help=argparse.SUPPRESS)  # where the child writes
    args = parser.parse_args()
    if args.iterations < 1:
        parser.error("--iterations must be >= 1")

    if args.child:
        # a timeout's SIGTERM unwinds through run_variant's clean-up (workers, shared memory)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        result = run_variant(args)
        pathlib.Path(args.result).write_text(json.dumps(result))
        return 0

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    try:
        for variant in variants:
            variant_config(args.config, args.set, variant)  # fail here, not per child
    except ValueError as error:
        parser.error(str(error))
    print(
        f"{args.config}: {args.iterations} iteration(s) per variant, evaluation off, "
        f"checkpoints {'on' if args.checkpoint else 'off'}, overrides {args.set or 'none'}; "
        f"jax {jax.__version__} ({jax.default_backend()}), {os.cpu_count()} CPUs",
        flush=True,
    )
    results = []
    for variant in variants:
        print(f"{variant} (fresh process):", flush=True)
        results.append(spawn_variant(variant, args))
        entry = results[-1]
        if "error" in entry:
            print(f"  FAILED: {entry['error']}", flush=True)
        add_ratios(results)
        if args.json:  # after every variant: a run cut short keeps what it measured
            write_json(args.json, args, results)
    print_tables(results, args.iterations)
    return 1 if any("error" in entry for entry in results) else 0


if __name__ == "__main__":
    sys.exit(main())
