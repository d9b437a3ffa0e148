"""Option C: the lockstep Deep CFR traversal of the `jax` backend.

`lanes` traversals are in flight at once, each with an explicit stack. Every
step, every lane at a decision is encoded, all of them are evaluated in one batched
forward, regret-matched and advanced; a lane whose traversal ends takes the next one of
the iteration's quota. The whole iteration is one jitted `lax.while_loop`.

Semantics are docs/design.md section 3 (Deep CFR, Brown et al. 2019, arXiv:1811.00164;
outcome sampling after Lanctot et al. 2009). `reference.py` states the same traversal as
plain recursion, one traversal at a time, and the tests hold the two to the same samples.

Beyond Brown et al.'s modes, two families of estimators reach past the first turns
(docs/design.md sections 3.3 and 3.4; docs/experiments.md measures why that matters):
external sampling expanded at a sampled decision (`expand_at='sampled'`: one on-policy
path to a decision index drawn per traversal, the node's children each played out
on-policy from the same random numbers), and outcome sampling that reads a learned
history value network (`outcome_estimator`: the VR-MCCFR baseline or ESCHER-style value
regrets, `policy.baseline_path_targets`).

Lane modes: IDLE (waiting for a traversal), DECIDE (at a decision that needs a policy),
RETURN (external sampling: handing a value up to the top stack frame), ROLLOUT
(playing out a cut-off position) and SCOUT (`expand_at='path'`: playing the path once
without recording, to count the traverser's choices on it, before it is played again).
In outcome sampling all busy lanes start their traversals on a round's first step
(`_round_starts`) and advance one decision per step, so all lanes at a decision share the
player to move and one network serves the whole batch. A step (`_Traversals.advance`)
chains `refill`, `decide` (`look`: the forwards; `choose`: the estimator's `_plan_*`;
the recorders; `move`), `backward` and `play_out`, after the loop body of mctx's
`search.py`. With several
JAX devices (of one process or of several, `jax.distributed`) the quota and the lanes are
split into equal contiguous blocks, one per device of a `sharding.lanes_mesh`: each
device runs its block's loop inside `jax.shard_map` and the blocks' samples are gathered
on every device; the samples are the single-device ones (docs/scaling.md).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from lc_cfr.bots import BOT_NAMES
from lc_cfr.bots.jax_bots import bot_action
from lc_cfr.game import engine, rng
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import policy as pol
from lc_cfr.traversal import sharding
from lc_cfr.traversal.api import (
    LEAF_CHECK_PHASES,
    LEAF_CHECK_SUMS,
    LOCKSTEP_SCHEDULES,
    PATH_END_BINS,
    Networks,
    Samples,
    TraversalOptions,
    TraversalStats,
    expansion_start,
    has_leaves,
    is_sampled_expansion,
    leaf_check,
    leaf_check_phase,
    leaf_check_sums,
    leaf_point,
    path_choices,
    path_end_bin,
    slots_per_traversal,
    stats_to_metrics,
    uses_value_network,
    utility_factor,
    validate_options,
    value_slots_per_traversal,
    value_spec,
)

IDLE, DECIDE, RETURN, ROLLOUT, SCOUT = 0, 1, 2, 3, 4
# Statistics the backend also reports per device (`<name>_device<d>`, docs/scaling.md):
# decisions and forwarded states sum to the single-device run's, loop steps to the run's.
DEVICE_STATS = ("nodes", "policy_calls", "steps")

# A turn is two decisions of one player (its card, then its draw) and a round is a turn of
# each of the two players: outcome sampling starts traversals on round starts only.
STEPS_PER_TURN = 2
STEPS_PER_ROUND = 2 * STEPS_PER_TURN


def _round_starts(step) -> jax.Array:
    """Whether outcome sampling may start traversals at `step`: lanes start together at a
    round's first step and take one decision a step, so all lanes at a decision share the
    player to move and one network serves the whole batch."""
    return step % STEPS_PER_ROUND == 0


def _synchronised_mover(step) -> jax.Array:
    """[] int32 the player to move at `step` in every outcome-sampling lane at a decision
    (the first player at a round's start, see `_round_starts`)."""
    return (step // STEPS_PER_TURN) % 2


class _Position(NamedTuple):
    """Where each of the L lanes' traversals stands."""

    game: engine.State  # fields [L, ...], the lane's current position
    mode: jax.Array  # [L] int32 IDLE | DECIDE | RETURN | ROLLOUT | SCOUT
    traversal: jax.Array  # [L] int32 traversal of the quota, -1 if none
    draws: jax.Array  # [L] int32 random draws taken by the traversal (counter word)
    advantage_nodes: jax.Array  # [L] int32 advantage slots used by the traversal
    strategy_nodes: jax.Array  # [L] int32 strategy slots used
    snapshot: jax.Array  # [L] int32 league snapshot the opponent plays
    expand_from: jax.Array  # [L] int32 sampled expansion: first decision index it may take
    on_trajectory: jax.Array  # [L] bool sampled expansion: the position lies on the
    # on-policy trajectory (the path, then the child sigma picks at each expanded node)
    value: jax.Array  # [L] float32 value being returned (RETURN)
    # expand_at='path' only (None otherwise):
    deal: engine.State | None  # fields [L, ...] the traversal's first position (SCOUT
    # plays the path from it once, then the lane restarts there in DECIDE)
    choices: jax.Array | None  # [L] int32 traverser choices (two or more legal actions)
    # met on the path so far
    expand_choice: jax.Array | None  # [L, E] int32 the choices to expand, increasing, -1
    # past them (E = path_expansions; all -1 if the path has none)
    expansion: jax.Array | None  # [L] int32 how many of them the lane has expanded
    resumed: jax.Array | None  # [L] bool the path goes on past an expanded choice: no
    # strategy or value samples (the first expansion's trajectory holds them)
    # leaf_decisions > 0 only (None otherwise):
    checked: jax.Array | None = None  # [L] bool every child of the traversal plays out
    past_leaf: jax.Array | None = None  # [L] bool the current child passed its leaf point
    estimate: jax.Array | None = None  # [L] float32 the value handed up, leaves read by
    # the value network (a child that passed its leaf point: its leaf value)
    leaf_slot: jax.Array | None = None  # [L] int32 value slot awaiting the child's return
    value_nodes: jax.Array | None = None  # [L] int32 value slots used by the traversal


class _Frames(NamedTuple):
    """External sampling's stack of expanded traverser nodes, D frames per lane."""

    game: engine.State  # fields [L, D, ...] the node's position
    policy: jax.Array  # [L, D, A] float32 sigma at the node
    mask: jax.Array  # [L, D, A] bool legal actions
    values: jax.Array  # [L, D, A] float32 child values found so far
    action: jax.Array  # [L, D] int32 child being explored
    slot: jax.Array  # [L, D] int32 advantage slot of the node
    draws: jax.Array  # [L, D] int32 draw counter at the node (sampled: each child
    # restarts from it, so all children meet the same random numbers)
    follow: jax.Array  # [L, D] int32 sampled: the child sigma would have played
    on: jax.Array  # [L, D] bool sampled: the node lies on the on-policy trajectory
    top: jax.Array  # [L] int32 frames in use
    # leaf_decisions > 0 only (None otherwise):
    decision: jax.Array | None = None  # [L, D] int32 the node's decision index
    estimates: jax.Array | None = None  # [L, D, A] float32 child values, leaves valued


class _Rollouts(NamedTuple):
    """Playouts of cut-off positions (`cutoff_value_mode='rollouts'`)."""

    base: engine.State  # fields [L, ...], the position a playout restarts from
    done: jax.Array  # [L] int32 playouts finished
    total: jax.Array  # [L] float32 sum of their utilities


class _OutcomePath(NamedTuple):
    """Outcome sampling's record of each path, made into targets by `finish`. S advantage
    slots (1 where the estimator keeps none), T traversals."""

    action: jax.Array  # [S] int32 sampled action at each advantage slot
    prob: jax.Array  # [S] float32 its sampling probability sigma'(a*)
    baseline: jax.Array  # [S, A] float32 value estimates b(h, a) at the slot's node
    utility: jax.Array  # [T] float32 utility at the end of each traversal


class _Lanes(NamedTuple):
    """Loop state."""

    position: _Position
    frames: _Frames
    rollouts: _Rollouts
    path: _OutcomePath
    samples: Samples  # the iteration's samples, in slots per traversal
    next_traversal: jax.Array  # [] int32 next traversal of the quota to start
    step: jax.Array  # [] int32
    stats: TraversalStats  # leaves [] int32


class _Node(NamedTuple):
    """What every lane sees at its position in one step, the network forwards included."""

    deciding: jax.Array  # [L] bool the lane is at a decision (the others carry junk)
    is_traverser: jax.Array  # [L] bool the traverser is to move
    obs: jax.Array  # [L, E] float32 the mover's information state
    mask: jax.Array  # [L, A] bool legal actions
    played: jax.Array  # [L, A] float32 the mover's policy
    stored: jax.Array  # [L, A] float32 the policy a strategy sample stores
    history: jax.Array | None  # [L, E + N] float32 the traverser's history features
    baseline: jax.Array | None  # [L, A] float32 its history values (0 off its turns)
    forwards: jax.Array  # [] int32 network forwards run per lane
    leaf: jax.Array | None = None  # [L] bool a child's leaf point (`leaf_point`)
    leaf_value: jax.Array | None = None  # [L] float32 sum_a sigma(a) Q(h, a) there


class _Plan(NamedTuple):
    """An estimator's answer at every lane's node (see `_Traversals.__init__`)."""

    behaviour: jax.Array  # [L, A] float32 the policy the move is sampled from
    expand: jax.Array  # [L] bool every child is explored (external sampling)
    advantage: jax.Array  # [L] bool the node takes an advantage sample
    in_tree: jax.Array  # [L] bool the node may take a strategy sample


class _Slots(NamedTuple):
    """Sample slots one kind of sample takes at every lane's node."""

    slot: jax.Array  # [L] int32 the slot the lane writes
    write: jax.Array  # [L] bool the lane writes a sample
    overflow: jax.Array  # [L] bool it wanted one past its traversal's slots (a bug)


class _Choice(NamedTuple):
    """The move every lane makes and the samples it takes."""

    action: jax.Array  # [L] int32 (the first legal action at an expanded node)
    behaviour: jax.Array  # [L, A] float32 the policy it was sampled from
    expand: jax.Array  # [L] bool
    advantage: _Slots
    strategy: _Slots
    stop: jax.Array  # [L] bool the path ends here, at a leaf valued by the value network


# leaf_decisions: the value network's batch at leaf points, as a share of the rows a step
# decides (see `_Traversals.leaf_values`)
LEAF_BATCH_SHARE = 1 / 8


def _count_bins(bins, where) -> jax.Array:
    """[PATH_END_BINS] int32 how many lanes `where` holds in each bin of `bins` [L]."""
    hits = jax.nn.one_hot(bins, PATH_END_BINS, dtype=jnp.int32) * where[:, None]
    return jnp.sum(hits, axis=0, dtype=jnp.int32)


def _tree_index(tree, index):
    """tree[lane, index[lane]] for every leaf [L, D, ...]."""
    return jax.tree.map(lambda x: jax.vmap(lambda row, i: row[i])(x, index), tree)


def _tree_set(tree, index, value, condition):
    """tree[lane, index[lane]] = value[lane] where condition[lane]."""

    def put(x, v):
        def one(row, i, item, c):
            i = jnp.minimum(i, row.shape[0] - 1)
            return row.at[i].set(jnp.where(c, item, row[i]))

        return jax.vmap(one)(x, index, v, condition)

    return jax.tree.map(put, tree, value)


def _write_rows(buffer, slots, rows, condition):
    """buffer[slots[l]] = rows[l] where condition[l] (others dropped)."""
    target = jnp.where(condition, slots, buffer.shape[0])
    return buffer.at[target].set(rows, mode="drop")


def _write_samples(samples: Samples, slot, write, **columns) -> Samples:
    """samples.<name>[slot[l]] = rows[l] where write[l], for every `name=rows`."""
    return samples._replace(
        **{
            name: _write_rows(getattr(samples, name), slot, rows, write)
            for name, rows in columns.items()
        }
    )


def _take_slots(traversal, used, per_traversal: int, wanted) -> _Slots:
    """The next of a traversal's `per_traversal` slots for every lane that wants one."""
    overflow = wanted & (used >= per_traversal)
    return _Slots(traversal * per_traversal + used, wanted & ~overflow, overflow)


def _utility(rules: Rules, game: engine.State, traverser, scale: float):
    """[L] traverser utility of (terminal or cut-off) positions: score difference / scale."""
    returns = jax.vmap(engine.returns, in_axes=(None, 0))(rules, game)
    return jnp.where(traverser == 0, returns[:, 0], returns[:, 1]) * utility_factor(scale)


def check_lanes(options: TraversalOptions, lanes: int, devices: int, schedule: str) -> None:
    """Lanes must be positive, the quota and the lanes must split evenly over the
    devices they are sharded over, and the schedule must be one of LOCKSTEP_SCHEDULES."""
    if schedule not in LOCKSTEP_SCHEDULES:
        raise ValueError(
            f"traversal.lockstep_schedule must be one of {LOCKSTEP_SCHEDULES}, got {schedule!r}"
        )
    if lanes < 1:
        raise ValueError(f"traversal.lanes must be >= 1, got {lanes}")
    if options.traversals_per_player % devices or lanes % devices:
        raise ValueError(
            f"traversal.traversals_per_player={options.traversals_per_player} and traversal.lanes="
            f"{lanes} must be multiples of the {devices} JAX devices the lanes are "
            "sharded over"
        )


def run_traversals(
    rules: Rules,
    spec: mlp.NetworkSpec,
    options: TraversalOptions,
    networks: Networks,
    *,
    lanes: int,
    seed,
    iteration,
    traverser,
    devices: int | None = None,
    per_device: bool = False,
    schedule: str = "all_lanes",
) -> tuple[Samples, TraversalStats] | tuple[Samples, TraversalStats, TraversalStats]:
    """Runs the iteration's `options.traversals_per_player` traversals for `traverser`, `lanes`
    of them in flight at once, stepped by `schedule` (LOCKSTEP_SCHEDULES; neither
    changes the samples).

    Traversal j deals game `traverser * traversals_per_player + j` of (seed, iteration) and takes
    its random draws from random_bits(seed, iteration, that game, draw, purpose).

    With several devices (`devices`, default: every JAX device of every process), device
    d of the mesh runs the contiguous block of traversals d * T/D ... with lanes/D lanes;
    since every traversal owns its random stream and its sample slots, the result is the
    single-device one. It comes back on this process's first device, the same on every
    process. With `per_device`, a third result holds every device's own statistics
    (leaves [D], in mesh order; they sum to the second).
    """
    validate_options(options, rules)
    devices = sharding.device_count(devices)
    check_lanes(options, lanes, devices, schedule)
    words = (rng.as_word(seed), rng.as_word(iteration, "iteration"), jnp.int32(traverser))
    if not sharding.sharded(devices):
        samples, stats = _run(rules, spec, options, lanes, schedule, networks, *words, jnp.int32(0))
        device_stats = jax.tree.map(lambda x: x[None], stats)
    else:
        total = options.traversals_per_player
        shard = options._replace(traversals_per_player=total // devices)
        mesh = sharding.lanes_mesh(devices)
        samples, stats, device_stats = sharding.local_copy(
            _run_sharded(
                rules,
                spec,
                shard,
                lanes // devices,
                schedule,
                total,
                mesh,
                *sharding.replicate((networks, *words), mesh),
            )
        )
    if int(stats.dropped_samples):  # slot bounds are proofs; a failure here is a bug
        raise RuntimeError(f"traversal dropped {int(stats.dropped_samples)} samples")
    if per_device:
        return samples, stats, device_stats
    return samples, stats


def _traverse(
    rules, spec, options, lanes, schedule, total, networks, seed, iteration, traverser, offset
):
    loop = _Traversals(
        rules, spec, options, lanes, schedule, networks, seed, iteration, traverser, total, offset
    )
    lanes = loop.initial()
    lanes = jax.lax.while_loop(loop.busy, loop.advance, lanes)
    return loop.finish(lanes)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _run(rules, spec, options, lanes, schedule, networks, seed, iteration, traverser, offset):
    total = options.traversals_per_player
    return _traverse(
        rules, spec, options, lanes, schedule, total, networks, seed, iteration, traverser, offset
    )


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4, 5, 6))
def _run_sharded(
    rules, spec, options, lanes, schedule, total, mesh, networks, seed, iteration, traverser
):
    """One block of `options.traversals_per_player` traversals per device of `mesh`; the samples
    [S, ...] (device blocks in mesh order are consecutive traversal blocks), the summed
    statistics and every device's own (leaves [D]), replicated on every device."""

    def block(networks, seed, iteration, traverser):
        offset = jax.lax.axis_index(sharding.AXIS) * options.traversals_per_player
        samples, stats = _traverse(
            rules,
            spec,
            options,
            lanes,
            schedule,
            total,
            networks,
            seed,
            iteration,
            traverser,
            offset,
        )
        samples = jax.lax.all_gather(samples, sharding.AXIS, tiled=True)
        return samples, jax.lax.psum(stats, sharding.AXIS), sharding.per_device(stats)

    # Each block runs its own while_loop: blocks finish at different steps and never
    # wait for each other until the gather. The gather and the sum replicate the outputs,
    # which the replication check does not infer (it counts all_gather's as varying).
    return jax.shard_map(block, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False)(
        networks, seed, iteration, traverser
    )


class _Traversals:
    """The step function of the lockstep loop, closed over one call's arguments.

    The estimators differ in one place, `plan` (which move, which node is expanded and
    which takes samples), and in the recorders they chain after it; the rest of a step is
    shared. A variant is a function chosen here, never a flag tested inside a step.
    """

    def __init__(
        self,
        rules,
        spec,
        options,
        lanes,
        schedule,
        networks,
        seed,
        iteration,
        traverser,
        total,
        offset,
    ):
        self.rules, self.spec, self.options, self.lanes = rules, spec, options, lanes
        self.networks, self.seed, self.iteration = networks, seed, iteration
        self.traverser = traverser
        # traversal j of this loop is traversal offset + j of the player's quota `total`
        self.game_base = traverser * total + offset
        self.outcome = options.sampling_mode == "outcome"
        self.sampled = is_sampled_expansion(options)
        self.scouts = not self.outcome and options.expand_at == "path"
        self.reads_values = uses_value_network(options)
        self.baselines = self.reads_values and self.outcome  # the outcome estimators'
        self.leaves = has_leaves(options)
        if self.reads_values:
            self.value_spec = value_spec(rules, spec)
            self.value_slots = value_slots_per_traversal(rules, options)
        self.adv_slots, self.strat_slots = slots_per_traversal(rules, options)
        pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(traverser == 0, x, y), a, b)  # noqa: E731
        self.own_params = pick(networks.advantage[0], networks.advantage[1])
        self.opponent_params = pick(networks.advantage[1], networks.advantage[0])
        if self.outcome:
            self.plan = self._plan_outcome
            recorders = [self._record_outcome_path]
        elif self.scouts:
            self.plan = self._plan_path
            recorders = [self._count_choice, self._record_trajectory, self._push_frame]
        elif self.sampled:
            self.plan = self._plan_sampled
            recorders = [self._record_trajectory, self._push_frame]
        else:
            self.plan = self._plan_at_root
            recorders = [self._push_frame]
        if self.baselines:
            recorders.append(self._record_value)
        if self.leaves:
            recorders.append(self._record_leaf)
        self.recorders = (self._record_advantage, self._record_strategy, *recorders)
        if self.leaves:
            self.order = self.start_order()  # once a call, outside the loop
        self.decide = self.decide_all
        if not self.outcome and schedule == "one_mover":
            self.decide = self.decide_one_mover
            self.batch = -(-lanes // 2)  # the mover with most deciding lanes has this many

    # ----- set-up and bookkeeping -------------------------------------------------

    def initial(self) -> _Lanes:
        rules, options = self.rules, self.options
        L, T, D = self.lanes, options.traversals_per_player, max(options.max_depth, 1)
        e, a = rules.encoding_size, rules.num_actions
        S, S_strategy = T * self.adv_slots, T * self.strat_slots
        blank = jax.vmap(lambda i: engine.init_from_deck(rules, jnp.arange(rules.n_cards)))(
            jnp.arange(L)
        )
        blank = blank.replace(terminal=jnp.ones((L,), jnp.bool_))
        ints, floats = jnp.zeros((L,), jnp.int32), jnp.zeros((L,), jnp.float32)
        zero = jnp.int32(0)
        value_columns, leaf_fields, leaf_frames, leaf_stats = {}, {}, {}, {}
        if self.reads_values:
            S_value = T * self.value_slots
            value_columns = dict(
                value_info=jnp.zeros((S_value, engine.history_size(rules)), jnp.float32),
                value_mask=jnp.zeros((S_value, a), jnp.bool_),
                value_target=jnp.zeros((S_value, a), jnp.float32),
                value_valid=jnp.zeros((S_value,), jnp.bool_),
            )
        if self.leaves:
            no = jnp.zeros((L,), jnp.bool_)
            leaf_fields = dict(
                checked=no, past_leaf=no, estimate=floats, leaf_slot=ints - 1, value_nodes=ints
            )
            leaf_frames = dict(
                decision=jnp.zeros((L, D), jnp.int32), estimates=jnp.zeros((L, D, a), jnp.float32)
            )
            sums = jnp.zeros((LEAF_CHECK_PHASES, len(LEAF_CHECK_SUMS)), jnp.float32)
            leaf_stats = dict(leaves=zero, leaf_checks=sums)
        path_slots = S if self.outcome else 1
        return _Lanes(
            position=_Position(
                game=blank,
                mode=ints,
                traversal=ints - 1,
                draws=ints,
                advantage_nodes=ints,
                strategy_nodes=ints,
                snapshot=ints,
                expand_from=ints,
                on_trajectory=jnp.zeros((L,), jnp.bool_),
                value=floats,
                deal=blank if self.scouts else None,
                choices=ints if self.scouts else None,
                expand_choice=(
                    jnp.zeros((L, options.path_expansions), jnp.int32) if self.scouts else None
                ),
                expansion=ints if self.scouts else None,
                resumed=jnp.zeros((L,), jnp.bool_) if self.scouts else None,
                **leaf_fields,
            ),
            frames=_Frames(
                game=jax.tree.map(lambda x: jnp.repeat(x[:, None], D, axis=1), blank),
                policy=jnp.zeros((L, D, a), jnp.float32),
                mask=jnp.zeros((L, D, a), jnp.bool_),
                values=jnp.zeros((L, D, a), jnp.float32),
                action=jnp.zeros((L, D), jnp.int32),
                slot=jnp.zeros((L, D), jnp.int32),
                draws=jnp.zeros((L, D), jnp.int32),
                follow=jnp.zeros((L, D), jnp.int32),
                on=jnp.zeros((L, D), jnp.bool_),
                top=ints,
                **leaf_frames,
            ),
            rollouts=_Rollouts(base=blank, done=ints, total=floats),
            path=_OutcomePath(
                action=jnp.zeros((path_slots,), jnp.int32),
                prob=jnp.ones((path_slots,), jnp.float32),
                baseline=jnp.zeros((S if self.baselines else 1, a), jnp.float32),
                utility=jnp.zeros((T,), jnp.float32),
            ),
            samples=Samples(
                advantage_info=jnp.zeros((S, e), jnp.float32),
                advantage_mask=jnp.zeros((S, a), jnp.bool_),
                advantage_target=jnp.zeros((S, a), jnp.float32),
                advantage_valid=jnp.zeros((S,), jnp.bool_),
                strategy_info=jnp.zeros((S_strategy, e), jnp.float32),
                strategy_mask=jnp.zeros((S_strategy, a), jnp.bool_),
                strategy_policy=jnp.zeros((S_strategy, a), jnp.float32),
                strategy_valid=jnp.zeros((S_strategy,), jnp.bool_),
                **value_columns,
            ),
            next_traversal=zero,
            step=zero,
            stats=TraversalStats(
                **dict.fromkeys(TraversalStats._fields, zero),
            )._replace(
                path_ends=jnp.zeros((PATH_END_BINS,), jnp.int32),
                **{"leaves": None, "leaf_checks": None, **leaf_stats},
            ),
        )

    def busy(self, lanes: _Lanes):
        quota_left = lanes.next_traversal < self.options.traversals_per_player
        return jnp.any(lanes.position.mode != IDLE) | quota_left

    def start_order(self):
        """leaf_decisions: the quota's traversals in the order lanes start them, checked
        ones (about ten times the work of the others) first, so that they do not run
        alone at the end of the call with the other lanes idle (longest job first). The
        order changes no sample: each traversal owns its random stream and its slots."""
        traversals = jnp.arange(self.options.traversals_per_player)
        share = self.options.leaf_check_share
        checked = leaf_check(self.seed, self.iteration, self.game_index(traversals), share)
        return jnp.argsort(jnp.where(checked, 0, 1), stable=True).astype(jnp.int32)

    def game_index(self, traversal):
        return self.game_base + traversal

    def bits(self, position: _Position, purpose, offset=0):
        return rng.random_bits(
            self.seed,
            self.iteration,
            self.game_index(position.traversal),
            position.draws + offset,
            purpose,
        )

    def refill(self, lanes: _Lanes) -> _Lanes:
        """Idle lanes take the next traversals of the queue (`start_order`), in lane order."""
        position = lanes.position
        idle = position.mode == IDLE
        if self.outcome:  # keep every busy lane on the same player to move
            idle = idle & _round_starts(lanes.step)
        rank = jnp.cumsum(idle) - 1
        queued = lanes.next_traversal + rank
        total = self.options.traversals_per_player
        start = idle & (queued < total)
        new = queued
        if self.leaves:
            new = self.order[jnp.minimum(queued, total - 1)]
        # Dealing sorts a whole deck per lane: do it only on steps where a lane starts.
        games = jax.lax.cond(
            jnp.any(start),
            lambda: jax.vmap(engine.init, in_axes=(None, None, 0, None))(
                self.rules, self.seed, self.game_index(new), self.iteration
            ),
            lambda: position.game,
        )
        count = jnp.maximum(self.networks.league_count, 1)
        snapshot_bits = rng.random_bits(
            self.seed, self.iteration, self.game_index(new), 0, rng.Purpose.OPPONENT
        )
        expand_from = expansion_start(self.rules, self.seed, self.iteration, self.game_index(new))
        if self.scouts:  # the path is scouted first, from the deal it restarts at
            position = position._replace(
                deal=engine.tree_where(start, games, position.deal),
                choices=jnp.where(start, 0, position.choices),
            )
        if self.leaves:
            checked = leaf_check(
                self.seed, self.iteration, self.game_index(new), self.options.leaf_check_share
            )
            position = position._replace(
                checked=jnp.where(start, checked, position.checked),
                past_leaf=position.past_leaf & ~start,
                leaf_slot=jnp.where(start, -1, position.leaf_slot),
                value_nodes=jnp.where(start, 0, position.value_nodes),
            )
        position = position._replace(
            game=engine.tree_where(start, games, position.game),
            mode=jnp.where(start, SCOUT if self.scouts else DECIDE, position.mode),
            traversal=jnp.where(start, new, position.traversal),
            draws=jnp.where(start, 0, position.draws),
            advantage_nodes=jnp.where(start, 0, position.advantage_nodes),
            strategy_nodes=jnp.where(start, 0, position.strategy_nodes),
            snapshot=jnp.where(start, rng.below(snapshot_bits, count), position.snapshot),
            expand_from=jnp.where(start, expand_from, position.expand_from),
            on_trajectory=position.on_trajectory | start,
        )
        frames = lanes.frames._replace(top=jnp.where(start, 0, lanes.frames.top))
        return lanes._replace(
            position=position, frames=frames, next_traversal=lanes.next_traversal + jnp.sum(start)
        )

    # ----- policies --------------------------------------------------------------

    def _regret_policy(self, params, obs, mask):
        raw = mlp.apply(self.spec, params, obs)
        advantages = mlp.masked_advantages(raw, mask)
        regret_matching = functools.partial(
            pol.regret_matching,
            fallback=self.options.all_negative_fallback,
            floor=self.options.floor,
        )
        return jax.vmap(regret_matching)(advantages, mask)

    def _strategy_policy(self, params, obs, mask):
        return mlp.masked_policy(mlp.apply(self.spec, params, obs), mask)

    def _opponent_policy(self, lanes, obs, mask):
        """(policy played, policy stored as a strategy sample, forwards run)."""
        mode = self.options.opponent_policy
        current = self._regret_policy(self.opponent_params, obs, mask)
        if mode == "network":
            return current, current, 1
        if mode in BOT_NAMES:  # a bot's choice, as a one-hot policy
            choice = self._bot(mode, lanes)
            return jax.nn.one_hot(choice, mask.shape[-1], dtype=jnp.float32), current, 1
        if mode == "average_strategy":
            return self._strategy_policy(self.networks.strategy, obs, mask), current, 2
        league = jax.vmap(lambda p: self._strategy_policy(p, obs, mask))(self.networks.league)
        played = jax.vmap(lambda probs, k: probs[k], in_axes=(1, 0))(
            league, lanes.position.snapshot
        )
        return played, current, 1 + jax.tree.leaves(self.networks.league)[0].shape[0]

    def policies(self, lanes: _Lanes, obs, mask, is_traverser, mover=None):
        """(played policy, strategy-sample policy, forwards run) for every lane [L, A];
        `mover`, if known, is the player to move in every lane at a decision."""
        if self.outcome:
            mover = _synchronised_mover(lanes.step)
        if mover is not None:
            # all lanes at a decision share the mover: evaluate only what it needs

            def own(_):
                played = self._regret_policy(self.own_params, obs, mask)
                return played, played, jnp.int32(1)

            def other(_):
                played, sample, calls = self._opponent_policy(lanes, obs, mask)
                return played, sample, jnp.int32(calls)

            return jax.lax.cond(mover == self.traverser, own, other, None)
        own_policy = self._regret_policy(self.own_params, obs, mask)
        played, sample, calls = self._opponent_policy(lanes, obs, mask)
        chosen = jnp.where(is_traverser[:, None], own_policy, played)
        stored = jnp.where(is_traverser[:, None], own_policy, sample)
        return chosen, stored, jnp.int32(calls + 1)

    def history_values(self, step, game, mask, like):
        """(history features, value estimates b(h, .), forwards run): the traverser's
        history value at its decisions, skipped on the opponent's steps (outcome sampling:
        all lanes share the mover)."""
        history = jax.vmap(engine.observe_history, in_axes=(None, 0, None))(
            self.rules, game, self.traverser
        )

        def estimate(_):
            raw = mlp.apply(self.value_spec, self.networks.value, history)
            return mlp.masked_advantages(raw, mask)

        at_traverser = _synchronised_mover(step) == self.traverser
        baseline = jax.lax.cond(at_traverser, estimate, jnp.zeros_like, like)
        return history, baseline, at_traverser.astype(jnp.int32)

    # ----- one lockstep step -----------------------------------------------------

    def advance(self, lanes: _Lanes) -> _Lanes:
        """The loop body: start traversals, decide, hand values up, play out."""
        lanes = self.refill(lanes)
        lanes = self.decide(lanes)
        if not self.outcome:
            lanes = self.backward(lanes)
        if self.options.cutoff_value_mode == "rollouts":
            lanes = self.play_out(lanes)
        stats = lanes.stats._replace(steps=lanes.stats.steps + 1)
        return lanes._replace(step=lanes.step + 1, stats=stats)

    def decide_all(self, lanes: _Lanes, mover=None) -> _Lanes:
        """One decision in every lane at one (all of `mover`'s, when given): look (the
        forwards), choose (the estimator's plan), record the samples and frames, move."""
        node = self.look(lanes, mover)
        choice = self.choose(lanes, node)
        for record in self.recorders:
            lanes = record(lanes, node, choice)
        lanes = self.arrive(self.move(lanes, node, choice), node.deciding & ~choice.stop)
        if self.leaves:
            stats = lanes.stats._replace(leaves=lanes.stats.leaves + jnp.sum(choice.stop))
            lanes = self.path_value(lanes._replace(stats=stats), choice.stop, node.leaf_value)
        return lanes

    def decide_one_mover(self, lanes: _Lanes) -> _Lanes:
        """lockstep_schedule='one_mover': `decide_all` on `batch` lanes gathered from the
        L, the first ones (in lane order) at a decision of the player who moves in most
        lanes; the others wait a step. By pigeonhole that player has at least `batch`
        when every lane decides, so a forward of `batch` rows of one network does the
        work of two of L rows; lanes that are gathered only to fill the batch do nothing.
        """
        position = lanes.position
        mover_of = position.game.current_player
        deciding = (position.mode == DECIDE) | (position.mode == SCOUT)
        mover = (jnp.sum(deciding & (mover_of == 1)) > jnp.sum(deciding & (mover_of == 0))).astype(
            jnp.int32
        )
        eligible = deciding & (mover_of == mover)
        picked = jnp.argsort(jnp.where(eligible, 0, 1), stable=True)[: self.batch]
        chosen = eligible[picked]
        per_lane = (lanes.position, lanes.frames, lanes.rollouts)
        gathered = jax.tree.map(lambda x: x[picked], per_lane)
        position, frames, rollouts = gathered
        position = position._replace(mode=jnp.where(chosen, position.mode, IDLE))
        sub = lanes._replace(position=position, frames=frames, rollouts=rollouts)
        sub = self.decide_all(sub, mover)

        def put(x, y):
            keep = chosen.reshape(chosen.shape + (1,) * (y.ndim - 1))
            return x.at[picked].set(jnp.where(keep, y, x[picked]))

        position, frames, rollouts = jax.tree.map(
            put, per_lane, (sub.position, sub.frames, sub.rollouts)
        )
        return sub._replace(position=position, frames=frames, rollouts=rollouts)

    def look(self, lanes: _Lanes, mover=None) -> _Node:
        """Every lane's node; `mover`: the player to move in every lane at a decision."""
        game = lanes.position.game
        is_traverser = game.current_player == self.traverser
        obs = jax.vmap(engine.observe, in_axes=(None, 0, 0))(self.rules, game, game.current_player)
        # the agent's draws, on both sides of self-play
        mask = pol.agent_masks(self.rules, game, self.options.draws)
        played, stored, forwards = self.policies(lanes, obs, mask, is_traverser, mover)
        history = baseline = leaf = leaf_value = None
        mode = lanes.position.mode
        deciding = (mode == DECIDE) | (mode == SCOUT)
        if self.baselines:
            history, baseline, value_forwards = self.history_values(lanes.step, game, mask, played)
            forwards = forwards + value_forwards
        if self.leaves:
            at_leaf = deciding & is_traverser & self._at_leaf_point(lanes)
            leaf, history, leaf_value = self.leaf_values(game, mask, played, at_leaf)
            deciding = deciding & ~(at_leaf & ~leaf)  # beyond the value batch: wait a step
        return _Node(
            deciding=deciding,
            is_traverser=is_traverser,
            obs=obs,
            mask=mask,
            played=played,
            stored=stored,
            history=history,
            baseline=baseline,
            forwards=forwards,
            leaf=leaf,
            leaf_value=leaf_value,
        )

    def _at_leaf_point(self, lanes: _Lanes):
        """[L] bool the lane's current child has reached its leaf point and not yet passed
        it: below the deepest expanded node (where no traverser decision is expanded),
        `leaf_point` decisions past it."""
        position, frames = lanes.position, lanes.frames
        node = jax.vmap(lambda row, i: row[i])(frames.decision, jnp.maximum(frames.top - 1, 0))
        past = engine.decision_index(position.game) - node
        deepest = frames.top == self.options.max_depth
        return (
            deepest
            & (position.mode == DECIDE)
            & leaf_point(self.options, past)
            & ~position.past_leaf
        )

    def leaf_values(self, game, mask, played, at_leaf):
        """(served, history features, sum_a sigma(a) Q(h, a)) [L]: the value network read
        for the first `LEAF_BATCH_SHARE` of the rows' lanes at a leaf point (in lane
        order), on steps where some lane is at one; the others wait a step, which changes
        no sample (a traversal owns its random stream). A leaf point comes once a child,
        so a small batch serves them and the forward costs a fraction of the policies'."""
        rows = at_leaf.shape[0]
        batch = max(1, int(rows * LEAF_BATCH_SHARE))
        picked = jnp.argsort(jnp.where(at_leaf, 0, 1), stable=True)[:batch]
        served = jnp.zeros_like(at_leaf).at[picked].set(at_leaf[picked])
        width = engine.history_size(self.rules)

        def estimate(_):
            picked_game = jax.tree.map(lambda x: x[picked], game)
            history = jax.vmap(engine.observe_history, in_axes=(None, 0, None))(
                self.rules, picked_game, self.traverser
            )
            raw = mlp.apply(self.value_spec, self.networks.value, history)
            q = mlp.masked_advantages(raw, mask[picked])
            value = jax.vmap(pol.node_regrets)(played[picked], q, mask[picked])[0]
            return (
                jnp.zeros((rows, width), jnp.float32).at[picked].set(history),
                jnp.zeros((rows,), jnp.float32).at[picked].set(value),
            )

        def skip(_):
            return jnp.zeros((rows, width), jnp.float32), jnp.zeros((rows,), jnp.float32)

        history, value = jax.lax.cond(jnp.any(at_leaf), estimate, skip, None)
        return served, history, value

    def choose(self, lanes: _Lanes, node: _Node) -> _Choice:
        plan = self.plan(lanes, node)
        position = lanes.position
        bits = self.bits(position, rng.Purpose.SAMPLE)
        sampled = jax.vmap(pol.sample_action)(plan.behaviour, node.mask, bits)
        first_legal = jnp.argmax(node.mask, axis=1).astype(jnp.int32)
        stores = {
            "opponent": ~node.is_traverser,
            "traverser": node.is_traverser,
            "both": jnp.ones_like(node.is_traverser),
        }[self.options.strategy_samples]
        stop = jnp.zeros_like(node.deciding)
        if self.leaves:  # the on-policy child and checked traversals' children go on
            stop = node.leaf & ~(position.checked | position.on_trajectory)
        return _Choice(
            action=jnp.where(plan.expand, first_legal, sampled),
            behaviour=plan.behaviour,
            expand=plan.expand,
            stop=stop,
            advantage=_take_slots(
                position.traversal,
                position.advantage_nodes,
                self.adv_slots,
                node.deciding & plan.advantage,
            ),
            strategy=_take_slots(
                position.traversal,
                position.strategy_nodes,
                self.strat_slots,
                node.deciding & stores & plan.in_tree,
            ),
        )

    def _explore(self, node: _Node, epsilon: float):
        return jax.vmap(pol.explore, in_axes=(0, 0, None))(node.played, node.mask, epsilon)

    def _plan_outcome(self, lanes: _Lanes, node: _Node) -> _Plan:
        """Outcome sampling: the traverser samples from sigma mixed with epsilon of uniform
        and takes an advantage sample at each of its decisions; nothing is expanded."""
        del lanes
        explored = self._explore(node, self.options.outcome_sampling_epsilon)
        never = jnp.zeros_like(node.deciding)
        return _Plan(
            behaviour=jnp.where(node.is_traverser[:, None], explored, node.played),
            expand=never,
            advantage=node.is_traverser,
            in_tree=~never,
        )

    def _plan_at_root(self, lanes: _Lanes, node: _Node) -> _Plan:
        """External sampling from the root: every traverser node of the top `max_depth`
        levels is expanded (and takes an advantage sample); below, sigma is played."""
        shallow = lanes.frames.top < self.options.max_depth
        expand = node.deciding & node.is_traverser & shallow
        return _Plan(behaviour=node.played, expand=expand, advantage=expand, in_tree=shallow)

    def _plan_sampled(self, lanes: _Lanes, node: _Node) -> _Plan:
        """External sampling expanded at a sampled decision: on the path (no frame yet) the
        traverser plays sigma mixed with `path_epsilon` of uniform and expands its first
        decision at or past the drawn index that has a real choice; below it, `max_depth`
        levels as at the root. Strategy samples along the on-policy trajectory only."""
        top = lanes.frames.top
        on_path = top == 0
        reached = engine.decision_index(lanes.position.game) >= lanes.position.expand_from
        a_choice = jnp.sum(node.mask, axis=1) >= 2
        armed = ~on_path | (reached & a_choice)
        expand = node.deciding & node.is_traverser & (top < self.options.max_depth) & armed
        explored = self._explore(node, self.options.path_epsilon)
        return _Plan(
            behaviour=jnp.where((node.is_traverser & on_path)[:, None], explored, node.played),
            expand=expand,
            advantage=expand,
            in_tree=lanes.position.on_trajectory,
        )

    def _plan_path(self, lanes: _Lanes, node: _Node) -> _Plan:
        """External sampling expanded at one of the path's choices: as `_plan_sampled`,
        but the expanded node is the path's choice `expand_choice` (counted by
        `_count_choice`), drawn once a SCOUT pass of the same path has counted them; a
        scouting lane records nothing."""
        position, top = lanes.position, lanes.frames.top
        deciding = position.mode == DECIDE
        on_path = top == 0
        a_choice = jnp.sum(node.mask, axis=1) >= 2
        drawn = a_choice & (position.choices == self._next_choice(position))
        armed = ~on_path | drawn
        expand = (
            node.deciding & deciding & node.is_traverser & (top < self.options.max_depth) & armed
        )
        explored = self._explore(node, self.options.path_epsilon)
        return _Plan(
            behaviour=jnp.where((node.is_traverser & on_path)[:, None], explored, node.played),
            expand=expand,
            advantage=expand,
            in_tree=position.on_trajectory & deciding & ~position.resumed,
        )

    def _next_choice(self, position: _Position):
        """[L] int32 expand_at='path': the next choice to expand, -1 once none is left."""
        count = self.options.path_expansions
        index = jnp.minimum(position.expansion, count - 1)[:, None]
        upcoming = jnp.take_along_axis(position.expand_choice, index, axis=1)[:, 0]
        return jnp.where(position.expansion < count, upcoming, -1)

    # ----- recorders: what a decision leaves behind, per kind -----------------------

    def _count_choice(self, lanes: _Lanes, node: _Node, choice: _Choice) -> _Lanes:
        """expand_at='path': a traverser decision with two or more legal actions on the
        path (scouted or played, not the expanded one) is one more choice."""
        position = lanes.position
        a_choice = jnp.sum(node.mask, axis=1) >= 2
        on_path = node.deciding & (lanes.frames.top == 0) & node.is_traverser
        counts = on_path & a_choice & ~choice.expand
        return lanes._replace(
            position=position._replace(
                choices=position.choices + counts,
                expansion=position.expansion + (on_path & choice.expand),
            )
        )

    def _record_advantage(self, lanes: _Lanes, node: _Node, choice: _Choice) -> _Lanes:
        """The information state of an advantage sample; its target comes once the node's
        value is known (`backward`, or `finish` for outcome sampling)."""
        return self._record_state(lanes, node, choice.advantage, "advantage")

    def _record_strategy(self, lanes: _Lanes, node: _Node, choice: _Choice) -> _Lanes:
        return self._record_state(
            lanes, node, choice.strategy, "strategy", strategy_policy=node.stored
        )

    def _record_state(self, lanes: _Lanes, node: _Node, slots: _Slots, kind, **columns):
        """The node's information state and legal actions as a `kind` sample."""
        columns = {f"{kind}_info": node.obs, f"{kind}_mask": node.mask, **columns}
        samples = _write_samples(
            lanes.samples, slots.slot, slots.write, **columns, **{f"{kind}_valid": slots.write}
        )
        return lanes._replace(samples=samples)

    def _record_outcome_path(self, lanes: _Lanes, node: _Node, choice: _Choice) -> _Lanes:
        """Outcome sampling: sigma (held in the target until the path ends), the sampled
        action and its sampling probability at the slot."""
        slot, write = choice.advantage.slot, choice.advantage.write
        prob = jnp.take_along_axis(choice.behaviour, choice.action[:, None], axis=1)[:, 0]
        path = lanes.path._replace(
            action=_write_rows(lanes.path.action, slot, choice.action, write),
            prob=_write_rows(lanes.path.prob, slot, prob, write),
        )
        samples = _write_samples(lanes.samples, slot, write, advantage_target=node.played)
        return lanes._replace(samples=samples, path=path)

    def _record_value(self, lanes: _Lanes, node: _Node, choice: _Choice) -> _Lanes:
        """The history value estimates at the slot and a value sample of the action taken
        (its target is set by `finish`)."""
        slot, write = choice.advantage.slot, choice.advantage.write
        taken = jax.nn.one_hot(choice.action, self.rules.num_actions) > 0
        samples = _write_samples(
            lanes.samples,
            slot,
            write,
            value_info=node.history,
            value_mask=taken,
            value_valid=write,
        )
        baseline = _write_rows(lanes.path.baseline, slot, node.baseline, write)
        return lanes._replace(samples=samples, path=lanes.path._replace(baseline=baseline))

    def _record_trajectory(self, lanes: _Lanes, node: _Node, choice: _Choice) -> _Lanes:
        """Sampled expansion: at an expanded node, the child sigma would play and whether
        the node lies on the on-policy trajectory (`backward` follows it to the children).
        Drawn one counter past the node's, apart from the children's streams, which all
        restart at the node's counter."""
        position, frames, expand = lanes.position, lanes.frames, choice.expand
        follow_bits = self.bits(position, rng.Purpose.EXPLORE, offset=1)
        follow = jax.vmap(pol.sample_action)(node.played, node.mask, follow_bits)
        on = position.on_trajectory
        frames = frames._replace(
            follow=_tree_set(frames.follow, frames.top, follow, expand),
            on=_tree_set(frames.on, frames.top, on, expand),
        )
        on = jnp.where(expand, on & (choice.action == follow), on)
        return lanes._replace(position=position._replace(on_trajectory=on), frames=frames)

    def _push_frame(self, lanes: _Lanes, node: _Node, choice: _Choice) -> _Lanes:
        """External sampling: an expanded node becomes the top frame; its first child is
        explored now and `backward` walks to the others."""
        frames, expand = lanes.frames, choice.expand

        def put(field, value):
            return _tree_set(field, frames.top, value, expand)

        frames = frames._replace(
            game=put(frames.game, lanes.position.game),
            policy=put(frames.policy, node.played),
            mask=put(frames.mask, node.mask),
            values=put(frames.values, jnp.zeros_like(node.played)),
            action=put(frames.action, choice.action),
            slot=put(frames.slot, choice.advantage.slot),
            draws=put(frames.draws, lanes.position.draws),
            top=frames.top + expand,
        )
        if not self.leaves:
            return lanes._replace(frames=frames)
        frames = frames._replace(
            decision=put(frames.decision, engine.decision_index(lanes.position.game)),
            estimates=put(frames.estimates, jnp.zeros_like(node.played)),
        )
        position = lanes.position._replace(past_leaf=lanes.position.past_leaf & ~expand)
        return lanes._replace(frames=frames, position=position)

    def _record_leaf(self, lanes: _Lanes, node: _Node, choice: _Choice) -> _Lanes:
        """leaf_decisions: at a child's leaf point, its leaf value; a child that goes on
        (`choose`: not `stop`) records a value sample there (history, the action sigma
        takes), whose target its return sets (`path_value`)."""
        position = lanes.position
        goes_on = node.leaf & ~choice.stop
        if self.scouts:  # the first expansion's trajectory holds the value samples
            goes_on = goes_on & ~position.resumed
        slots = _take_slots(position.traversal, position.value_nodes, self.value_slots, goes_on)
        taken = jax.nn.one_hot(choice.action, self.rules.num_actions) > 0
        samples = _write_samples(
            lanes.samples,
            slots.slot,
            slots.write,
            value_info=node.history,
            value_mask=taken,
            value_valid=slots.write,
        )
        position = position._replace(
            past_leaf=position.past_leaf | node.leaf,
            estimate=jnp.where(node.leaf, node.leaf_value, position.estimate),
            leaf_slot=jnp.where(slots.write, slots.slot, position.leaf_slot),
            value_nodes=position.value_nodes + slots.write,
        )
        stats = lanes.stats._replace(
            dropped_samples=lanes.stats.dropped_samples + jnp.sum(slots.overflow)
        )
        return lanes._replace(position=position, samples=samples, stats=stats)

    def move(self, lanes: _Lanes, node: _Node, choice: _Choice) -> _Lanes:
        position, deciding = lanes.position, node.deciding
        next_game = jax.vmap(engine.step, in_axes=(None, 0, 0))(
            self.rules, position.game, choice.action
        )
        moves = deciding & ~choice.stop
        position = position._replace(
            game=engine.tree_where(moves, next_game, position.game),
            draws=position.draws + (moves & ~choice.expand),
            advantage_nodes=position.advantage_nodes + choice.advantage.write,
            strategy_nodes=position.strategy_nodes + choice.strategy.write,
        )
        stats = lanes.stats
        overflow = choice.advantage.overflow | choice.strategy.overflow
        stats = stats._replace(
            nodes=stats.nodes + jnp.sum(deciding),
            policy_calls=stats.policy_calls + node.forwards * jnp.sum(deciding),
            forward_batches=stats.forward_batches + node.forwards * jnp.any(deciding),
            dropped_samples=stats.dropped_samples + jnp.sum(overflow),
        )
        return lanes._replace(position=position, stats=stats)

    def arrive(self, lanes: _Lanes, moved) -> _Lanes:
        """Handles lanes whose move reached a terminal or cut-off position."""
        game = lanes.position.game
        cut = jnp.zeros_like(moved)
        if self.options.cutoff_turns > 0:
            cut = ~game.terminal & (game.turn >= self.options.cutoff_turns)
        ended = moved & (game.terminal | cut)
        if self.scouts:
            scouted = ended & (lanes.position.mode == SCOUT)
            lanes = self.restart_scouted(lanes, scouted)
            ended = ended & ~scouted
            game = lanes.position.game
        stats = lanes.stats
        stats = stats._replace(
            terminals=stats.terminals + jnp.sum(ended & game.terminal & ~game.truncated),
            truncations=stats.truncations + jnp.sum(ended & game.truncated),
            cutoffs=stats.cutoffs + jnp.sum(ended & cut),
            endpoint_depth_sum=stats.endpoint_depth_sum
            + jnp.sum(jnp.where(ended, engine.decision_index(game), 0)),
            path_ends=stats.path_ends + _count_bins(path_end_bin(self.rules, game.turn), ended),
        )
        lanes = lanes._replace(stats=stats)
        value = _utility(self.rules, game, self.traverser, self.options.utility_scale)
        if self.options.cutoff_value_mode == "rollouts":
            to_roll = ended & cut
            rollouts = lanes.rollouts
            lanes = lanes._replace(
                position=lanes.position._replace(
                    mode=jnp.where(to_roll, ROLLOUT, lanes.position.mode)
                ),
                rollouts=_Rollouts(
                    base=engine.tree_where(to_roll, game, rollouts.base),
                    done=jnp.where(to_roll, 0, rollouts.done),
                    total=jnp.where(to_roll, 0.0, rollouts.total),
                ),
            )
            ended = ended & ~cut
        return self.path_value(lanes, ended, value)

    def restart_scouted(self, lanes: _Lanes, scouted) -> _Lanes:
        """expand_at='path': a scouted path ended (not a path of the tree: no statistics,
        no playout). The lane draws which of the path's choices to expand and plays the
        path again from the deal, with the same random numbers."""
        position = lanes.position
        choices = position.choices
        drawn = path_choices(
            self.seed,
            self.iteration,
            self.game_index(position.traversal),
            choices,
            self.options.path_expansions,
        )
        position = position._replace(
            game=engine.tree_where(scouted, position.deal, position.game),
            mode=jnp.where(scouted, DECIDE, position.mode),
            draws=jnp.where(scouted, 0, position.draws),
            choices=jnp.where(scouted, 0, choices),
            expand_choice=jnp.where(scouted[:, None], drawn, position.expand_choice),
            expansion=jnp.where(scouted, 0, position.expansion),
            resumed=position.resumed & ~scouted,
        )
        return lanes._replace(position=position)

    def resume_path(self, lanes: _Lanes, done):
        """expand_at='path': a lane whose expanded choice returned (`done`) and that has
        another choice to expand goes on down the path from that node, as the scouting pass
        played it (the node's draw counter again, the traverser's path policy, the node now
        one more choice); the others end their traversal. Returns (lanes, ended)."""
        position, frames = lanes.position, lanes.frames
        resume = done & (self._next_choice(position) >= 0)
        node = jax.tree.map(lambda x: x[:, 0], frames.game)  # the path's expanded node
        position = position._replace(
            game=engine.tree_where(resume, node, position.game),
            draws=jnp.where(resume, frames.draws[:, 0], position.draws),
            mode=jnp.where(resume, DECIDE, position.mode),
            on_trajectory=position.on_trajectory | resume,
            resumed=position.resumed | resume,
        )
        if self.leaves:
            position = position._replace(past_leaf=position.past_leaf & ~resume)
        return lanes._replace(position=position), done & ~resume

    def path_value(self, lanes: _Lanes, ended, value) -> _Lanes:
        """A path ended with `value`: finish the traversal or hand the value up."""
        position = lanes.position
        if self.outcome:
            utility = _write_rows(lanes.path.utility, position.traversal, value, ended)
            return lanes._replace(
                path=lanes.path._replace(utility=utility),
                position=position._replace(
                    mode=jnp.where(ended, IDLE, position.mode),
                    traversal=jnp.where(ended, -1, position.traversal),
                ),
            )
        if self.leaves:
            lanes = self._fill_value_target(lanes, ended, value)
            position = lanes.position
        return lanes._replace(
            position=position._replace(
                mode=jnp.where(ended, RETURN, position.mode),
                value=jnp.where(ended, value, position.value),
            )
        )

    def _fill_value_target(self, lanes: _Lanes, ended, value) -> _Lanes:
        """leaf_decisions: a child that ended past its leaf point sets its value sample's
        target (its return, at the action taken there); one that ended before it hands
        its own value up as its estimate."""
        position, samples = lanes.position, lanes.samples
        fill = ended & (position.leaf_slot >= 0)
        slot = jnp.maximum(position.leaf_slot, 0)
        target = jnp.where(samples.value_mask[slot], value[:, None], 0.0)
        samples = _write_samples(samples, slot, fill, value_target=target)
        position = position._replace(
            leaf_slot=jnp.where(ended, -1, position.leaf_slot),
            estimate=jnp.where(ended & ~position.past_leaf, value, position.estimate),
        )
        return lanes._replace(position=position, samples=samples)

    def backward(self, lanes: _Lanes) -> _Lanes:
        """External sampling: one RETURN move per lane. The returned value enters the top
        frame; then the frame's next child is explored, or the frame is popped with its
        regrets as the advantage target and its value returned; a lane without frames
        ends its traversal."""
        position, frames = lanes.position, lanes.frames
        returning = position.mode == RETURN
        done = returning & (frames.top == 0)
        if self.scouts and self.options.path_expansions > 1:  # static: E = 1 never resumes
            lanes, done = self.resume_path(lanes, done)
            position = lanes.position
        has_frame = returning & (frames.top > 0)
        index = jnp.maximum(frames.top - 1, 0)
        frame = _tree_index(frames._replace(top=None), index)
        actions = jnp.arange(self.rules.num_actions)
        values = jnp.where(actions == frame.action[:, None], position.value[:, None], frame.values)
        later = frame.mask & (actions > frame.action[:, None])
        has_next = jnp.any(later, axis=1)
        next_action = jnp.argmax(later, axis=1).astype(jnp.int32)
        node_value, regrets = jax.vmap(pol.node_regrets)(frame.policy, values, frame.mask)
        pop = has_frame & ~has_next
        go_on = has_frame & has_next
        target = regrets
        if self.leaves:
            lanes, leaf_regrets = self._compare_leaves(
                lanes, frame, index, has_frame, pop, go_on, regrets
            )
            position, frames = lanes.position, lanes.frames
            if self.options.leaf_targets == "leaves":  # checked traversals keep playouts
                target = jnp.where(position.checked[:, None], regrets, leaf_regrets)
        samples = _write_samples(lanes.samples, frame.slot, pop, advantage_target=target)
        child = jax.vmap(engine.step, in_axes=(None, 0, 0))(self.rules, frame.game, next_action)
        draws, on_trajectory = position.draws, position.on_trajectory
        if self.sampled:  # common random numbers: every child replays the node's stream
            draws = jnp.where(go_on, frame.draws, draws)
            follows = frame.on & (next_action == frame.follow)
            on_trajectory = jnp.where(go_on, follows, on_trajectory)
        position = position._replace(
            draws=draws,
            on_trajectory=on_trajectory,
            value=jnp.where(pop, node_value, position.value),
            game=engine.tree_where(go_on, child, position.game),
            mode=jnp.where(go_on, DECIDE, jnp.where(done, IDLE, position.mode)),
            traversal=jnp.where(done, -1, position.traversal),
        )
        frames = frames._replace(
            values=_tree_set(frames.values, index, values, has_frame),
            action=_tree_set(frames.action, index, next_action, go_on),
            top=frames.top - pop,
        )
        lanes = lanes._replace(position=position, frames=frames, samples=samples)
        return self.arrive(lanes, go_on)

    def _compare_leaves(self, lanes, frame, index, has_frame, pop, go_on, regrets):
        """leaf_decisions, in `backward`: the returned estimate enters the frame beside
        the value; a popped node hands up its value under the estimates, and a checked
        traversal's node adds its leaf regrets against its full regrets (`leaf_checks`,
        by the node's phase); the next child starts before its leaf point. Returns the
        lanes and the node's leaf regrets [L, A] (the regrets of the estimates)."""
        position, frames = lanes.position, lanes.frames
        actions = jnp.arange(self.rules.num_actions)
        returned = actions == frame.action[:, None]
        estimates = jnp.where(returned, position.estimate[:, None], frame.estimates)
        estimate, leaf_regrets = jax.vmap(pol.node_regrets)(frame.policy, estimates, frame.mask)
        sums = jax.vmap(leaf_check_sums)(leaf_regrets, regrets, frame.mask)
        phase = leaf_check_phase(self.rules, frame.game.turn)
        counted = jax.nn.one_hot(phase, LEAF_CHECK_PHASES) * (pop & position.checked)[:, None]
        stats = lanes.stats._replace(
            leaf_checks=lanes.stats.leaf_checks + jnp.einsum("lp,lk->pk", counted, sums)
        )
        position = position._replace(
            estimate=jnp.where(pop, estimate, position.estimate),
            past_leaf=position.past_leaf & ~go_on,
        )
        frames = frames._replace(estimates=_tree_set(frames.estimates, index, estimates, has_frame))
        return lanes._replace(position=position, frames=frames, stats=stats), leaf_regrets

    def _bot(self, name: str, lanes: _Lanes):
        """[L] the bot's action in every lane's position (keyed by the draw counter)."""
        position = lanes.position
        return jax.vmap(bot_action, in_axes=(None, None, 0, None, None, 0, 0))(
            self.rules,
            name,
            position.game,
            self.seed,
            self.iteration,
            self.game_index(position.traversal),
            position.draws,
        )

    def play_out(self, lanes: _Lanes) -> _Lanes:
        """One decision of every lane's cut-off playout: both players play the bot."""
        options, position, rollouts = self.options, lanes.position, lanes.rollouts
        rolling = position.mode == ROLLOUT
        action = self._bot(options.cutoff_rollout_policy, lanes)
        game = jax.vmap(engine.step, in_axes=(None, 0, 0))(self.rules, position.game, action)
        game = engine.tree_where(rolling, game, position.game)
        finished = rolling & game.terminal
        utility = _utility(self.rules, game, self.traverser, options.utility_scale)
        total = rollouts.total + jnp.where(finished, utility, 0.0)
        done = rollouts.done + finished
        complete = finished & (done >= options.cutoff_rollouts)
        restart = finished & ~complete
        stats = lanes.stats._replace(
            rollout_decisions=lanes.stats.rollout_decisions + jnp.sum(rolling)
        )
        lanes = lanes._replace(
            position=position._replace(
                game=engine.tree_where(restart, rollouts.base, game),
                draws=position.draws + rolling,
                mode=jnp.where(complete, DECIDE, position.mode),  # path_value sets the next
            ),
            rollouts=rollouts._replace(total=total, done=done),
            stats=stats,
        )
        value = total * jnp.float32(1.0 / options.cutoff_rollouts)
        return self.path_value(lanes, complete, value)

    # ----- after the loop --------------------------------------------------------

    def finish(self, lanes: _Lanes) -> tuple[Samples, TraversalStats]:
        if not self.outcome:
            return lanes.samples, lanes.stats
        if self.baselines:
            return self._finish_with_values(lanes)
        return self._finish_importance(lanes)

    def _outcome_slots(self, lanes: _Lanes):
        """(sigma [T, S/T, A], mask, sampled action [T, S/T], its probability, valid
        slots, their count [T]) of the paths, by traversal."""
        T, D = self.options.traversals_per_player, self.adv_slots
        samples = lanes.samples
        valid = samples.advantage_valid.reshape(T, D)
        return (
            samples.advantage_target.reshape(T, D, -1),
            samples.advantage_mask.reshape(T, D, -1),
            lanes.path.action.reshape(T, D),
            lanes.path.prob.reshape(T, D),
            valid,
            jnp.sum(valid, axis=1),
        )

    def _finish_importance(self, lanes: _Lanes) -> tuple[Samples, TraversalStats]:
        """Outcome sampling's importance-weighted regret targets (Lanctot et al. 2009)."""
        options = self.options
        T, D = options.traversals_per_player, self.adv_slots
        policy, mask, action, prob, valid, count = self._outcome_slots(lanes)
        chosen = jnp.take_along_axis(policy, action[..., None], axis=2)[..., 0]
        ratios = jnp.where(valid, chosen / prob, 1.0)
        after = jax.vmap(pol.weights_after)(ratios, count)
        targets = functools.partial(
            pol.outcome_targets,
            value_clip=options.outcome_sampling_value_clip,
            unsampled_regret=options.outcome_unsampled_regret,
        )
        utility = jnp.broadcast_to(lanes.path.utility[:, None], (T, D))
        target = jax.vmap(jax.vmap(targets))(policy, mask, action, prob, after, utility)
        target = jnp.where(valid[..., None], target, 0.0)
        samples = lanes.samples._replace(advantage_target=target.reshape(T * D, -1))
        if options.outcome_sampling_value_clip <= 0:
            return samples, lanes.stats
        clip = options.outcome_sampling_value_clip
        clipped = valid & (jnp.abs(pol.sampled_value(after, utility, prob)) > clip)
        return samples, lanes.stats._replace(clipped_values=jnp.sum(clipped, dtype=jnp.int32))

    def _finish_with_values(self, lanes: _Lanes) -> tuple[Samples, TraversalStats]:
        """Outcome targets of the estimators that read the value network."""
        options = self.options
        T, D = options.traversals_per_player, self.adv_slots
        policy, mask, action, prob, _, count = self._outcome_slots(lanes)
        targets = functools.partial(
            pol.baseline_path_targets,
            estimator=options.outcome_estimator,
            value_clip=options.outcome_sampling_value_clip,
            value_lambda=options.value_lambda,
        )
        baseline = lanes.path.baseline.reshape(T, D, -1)
        regrets, value_targets = jax.vmap(targets)(
            policy, mask, action, prob, baseline, count, lanes.path.utility
        )
        samples = lanes.samples
        samples = samples._replace(
            advantage_target=regrets.reshape(T * D, -1),
            value_target=jnp.where(samples.value_mask, value_targets.reshape(T * D, 1), 0.0),
        )
        return samples, lanes.stats


class JaxBackend:
    """Option C: the lockstep traversal above, `lanes` traversals in flight in all (lanes/D
    on each of the D devices of every process)."""

    def __init__(
        self,
        *,
        rules: Rules,
        spec: mlp.NetworkSpec,
        options: TraversalOptions,
        lanes,
        schedule: str = "all_lanes",
    ):
        validate_options(options, rules)
        check_lanes(options, lanes, sharding.device_count(None), schedule)  # at start-up
        self.rules, self.spec, self.options, self.lanes = rules, spec, options, lanes
        self.schedule = schedule

    def traverse(self, networks, *, seed, iteration, traverser, epsilon=None):
        options = self.options
        if epsilon is not None:  # one compiled loop per value: schedules take few values
            options = options._replace(outcome_sampling_epsilon=float(epsilon))
        samples, stats, device_stats = run_traversals(
            self.rules,
            self.spec,
            options,
            networks,
            lanes=self.lanes,
            seed=seed,
            iteration=iteration,
            traverser=traverser,
            per_device=True,
            schedule=self.schedule,
        )
        metrics = stats_to_metrics(stats)
        # every device's share of the work: its decisions, forwarded states and loop steps
        counts = jax.device_get(device_stats)
        metrics.update(
            sharding.device_metrics({name: getattr(counts, name) for name in DEVICE_STATS})
        )
        return samples, metrics

    def close(self) -> None:
        """Nothing to release (the torch backends stop processes here)."""
