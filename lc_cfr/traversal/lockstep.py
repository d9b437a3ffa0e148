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
RETURN (external sampling: handing a value up to the top stack frame) and ROLLOUT
(playing out a cut-off position). In outcome sampling all busy lanes start their
traversals on steps divisible by 4 and advance one decision per step, so all lanes at a
decision share the player to move and one network serves the whole batch. With several
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
    Networks,
    Samples,
    TraversalOptions,
    TraversalStats,
    expansion_start,
    is_sampled_expansion,
    slots_per_traversal,
    stats_to_metrics,
    uses_value_network,
    utility_factor,
    validate_options,
    value_spec,
)

IDLE, DECIDE, RETURN, ROLLOUT = 0, 1, 2, 3
# Statistics the backend also reports per device (`<name>_device<d>`, docs/scaling.md):
# decisions and forwarded states sum to the single-device run's, loop steps to the run's.
DEVICE_STATS = ("nodes", "policy_calls", "steps")


class _Lanes(NamedTuple):
    """Loop state. L lanes, D frames, T traversals, S/S2 sample slots."""

    game: engine.State  # fields [L, ...], the lane's current position
    mode: jax.Array  # [L] int32 IDLE | DECIDE | RETURN | ROLLOUT
    traversal: jax.Array  # [L] int32 traversal of the quota, -1 if none
    draws: jax.Array  # [L] int32 random draws taken by the traversal (counter word)
    advantage_nodes: jax.Array  # [L] int32 advantage slots used by the traversal
    strategy_nodes: jax.Array  # [L] int32 strategy slots used
    value: jax.Array  # [L] float32 value being returned (RETURN)
    expand_from: jax.Array  # [L] int32 sampled expansion: first decision index it may take
    snapshot: jax.Array  # [L] int32 league snapshot the opponent plays
    rollout_base: engine.State  # fields [L, ...], position a playout restarts from
    rollout_done: jax.Array  # [L] int32 playouts finished
    rollout_sum: jax.Array  # [L] float32 sum of their utilities
    frame_game: engine.State  # fields [L, D, ...] expanded traverser nodes (external)
    frame_policy: jax.Array  # [L, D, A] float32
    frame_mask: jax.Array  # [L, D, A] bool
    frame_values: jax.Array  # [L, D, A] float32 child values
    frame_action: jax.Array  # [L, D] int32 child being explored
    frame_slot: jax.Array  # [L, D] int32 advantage slot of the node
    frame_draws: jax.Array  # [L, D] int32 draw counter at the node (sampled: each child
    # restarts from it, so all children meet the same random numbers)
    # sampled: the child sigma would have played at each frame, and whether the frame's
    # node lies on that on-policy trajectory; strategy samples are taken along it only
    frame_follow: jax.Array  # [L, D] int32
    frame_on: jax.Array  # [L, D] bool
    on_trajectory: jax.Array  # [L] bool, the lane's position lies on the trajectory
    top: jax.Array  # [L] int32 frames in use
    next_traversal: jax.Array  # [] int32 next traversal of the quota to start
    step: jax.Array  # [] int32
    samples: Samples
    path_action: jax.Array  # [S] int32 outcome: sampled action at each advantage slot
    path_prob: jax.Array  # [S] float32 outcome: its sampling probability sigma'(a*)
    path_baseline: jax.Array  # [S, A] float32 value estimates b(h, a) at the slot's node
    utility: jax.Array  # [T] float32 outcome: utility at the end of each traversal
    stats: TraversalStats


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


def _utility(rules: Rules, game: engine.State, traverser, scale: float):
    """[L] traverser utility of (terminal or cut-off) positions: score difference / scale."""
    returns = jax.vmap(engine.returns, in_axes=(None, 0))(rules, game)
    return jnp.where(traverser == 0, returns[:, 0], returns[:, 1]) * utility_factor(scale)


def check_lanes(options: TraversalOptions, lanes: int, devices: int) -> None:
    """Lanes must be positive, and the quota and the lanes must split evenly over the
    devices they are sharded over."""
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
) -> tuple[Samples, TraversalStats] | tuple[Samples, TraversalStats, TraversalStats]:
    """Runs the iteration's `options.traversals_per_player` traversals for `traverser`, `lanes`
    of them in flight at once (how many never changes the samples).

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
    check_lanes(options, lanes, devices)
    words = (rng.as_word(seed), rng.as_word(iteration, "iteration"), jnp.int32(traverser))
    if not sharding.sharded(devices):
        samples, stats = _run(rules, spec, options, lanes, networks, *words, jnp.int32(0))
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


def _traverse(rules, spec, options, lanes, total, networks, seed, iteration, traverser, offset):
    machine = _Machine(
        rules, spec, options, lanes, networks, seed, iteration, traverser, total, offset
    )
    lanes = machine.initial()
    lanes = jax.lax.while_loop(machine.busy, machine.advance, lanes)
    return machine.finish(lanes)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _run(rules, spec, options, lanes, networks, seed, iteration, traverser, offset):
    total = options.traversals_per_player
    return _traverse(
        rules, spec, options, lanes, total, networks, seed, iteration, traverser, offset
    )


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4, 5))
def _run_sharded(rules, spec, options, lanes, total, mesh, networks, seed, iteration, traverser):
    """One block of `options.traversals_per_player` traversals per device of `mesh`; the samples
    [S, ...] (device blocks in mesh order are consecutive traversal blocks), the summed
    statistics and every device's own (leaves [D]), replicated on every device."""

    def block(networks, seed, iteration, traverser):
        offset = jax.lax.axis_index(sharding.AXIS) * options.traversals_per_player
        samples, stats = _traverse(
            rules, spec, options, lanes, total, networks, seed, iteration, traverser, offset
        )
        samples = jax.lax.all_gather(samples, sharding.AXIS, tiled=True)
        return samples, jax.lax.psum(stats, sharding.AXIS), sharding.per_device(stats)

    # Each block runs its own while_loop: blocks finish at different steps and never
    # wait for each other until the gather. The gather and the sum replicate the outputs,
    # which the replication check does not infer (it counts all_gather's as varying).
    return jax.shard_map(block, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False)(
        networks, seed, iteration, traverser
    )


class _Machine:
    """The step function of the lockstep loop, closed over one call's arguments."""

    def __init__(
        self, rules, spec, options, lanes, networks, seed, iteration, traverser, total, offset
    ):
        self.rules, self.spec, self.o, self.lanes = rules, spec, options, lanes
        self.networks, self.seed, self.iteration = networks, seed, iteration
        self.traverser = traverser
        # traversal j of this machine is traversal offset + j of the player's quota `total`
        self.game_base = traverser * total + offset
        self.outcome = options.sampling_mode == "outcome"
        self.sampled = is_sampled_expansion(options)
        self.value = uses_value_network(options)
        if self.value:
            self.value_spec = value_spec(rules, spec)
        self.adv_slots, self.strat_slots = slots_per_traversal(rules, options)
        pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(traverser == 0, x, y), a, b)  # noqa: E731
        self.own_params = pick(networks.advantage[0], networks.advantage[1])
        self.opponent_params = pick(networks.advantage[1], networks.advantage[0])

    # ----- set-up and bookkeeping -------------------------------------------------

    def initial(self) -> _Lanes:
        r, o = self.rules, self.o
        L, T, D = self.lanes, o.traversals_per_player, max(o.max_depth, 1)
        n, e, a = r.n_cards, r.encoding_size, r.num_actions
        S, S2 = T * self.adv_slots, T * self.strat_slots
        blank = jax.vmap(lambda i: engine.init_from_deck(r, jnp.arange(n)))(jnp.arange(L))
        blank = blank.replace(terminal=jnp.ones((L,), jnp.bool_))
        frames = jax.tree.map(lambda x: jnp.repeat(x[:, None], D, axis=1), blank)
        zeros_l = jnp.zeros((L,), jnp.int32)
        zero = jnp.int32(0)
        return _Lanes(
            game=blank,
            mode=zeros_l,
            traversal=zeros_l - 1,
            draws=zeros_l,
            advantage_nodes=zeros_l,
            strategy_nodes=zeros_l,
            value=jnp.zeros((L,), jnp.float32),
            expand_from=zeros_l,
            snapshot=zeros_l,
            rollout_base=blank,
            rollout_done=zeros_l,
            rollout_sum=jnp.zeros((L,), jnp.float32),
            frame_game=frames,
            frame_policy=jnp.zeros((L, D, a), jnp.float32),
            frame_mask=jnp.zeros((L, D, a), jnp.bool_),
            frame_values=jnp.zeros((L, D, a), jnp.float32),
            frame_action=jnp.zeros((L, D), jnp.int32),
            frame_slot=jnp.zeros((L, D), jnp.int32),
            frame_draws=jnp.zeros((L, D), jnp.int32),
            frame_follow=jnp.zeros((L, D), jnp.int32),
            frame_on=jnp.zeros((L, D), jnp.bool_),
            on_trajectory=jnp.zeros((L,), jnp.bool_),
            top=zeros_l,
            next_traversal=zero,
            step=zero,
            samples=Samples(
                advantage_info=jnp.zeros((S, e), jnp.float32),
                advantage_mask=jnp.zeros((S, a), jnp.bool_),
                advantage_target=jnp.zeros((S, a), jnp.float32),
                advantage_valid=jnp.zeros((S,), jnp.bool_),
                strategy_info=jnp.zeros((S2, e), jnp.float32),
                strategy_mask=jnp.zeros((S2, a), jnp.bool_),
                strategy_policy=jnp.zeros((S2, a), jnp.float32),
                strategy_valid=jnp.zeros((S2,), jnp.bool_),
                **(
                    dict(
                        value_info=jnp.zeros((S, engine.history_size(r)), jnp.float32),
                        value_mask=jnp.zeros((S, a), jnp.bool_),
                        value_target=jnp.zeros((S, a), jnp.float32),
                        value_valid=jnp.zeros((S,), jnp.bool_),
                    )
                    if self.value
                    else {}
                ),
            ),
            path_action=jnp.zeros((S if self.outcome else 1,), jnp.int32),
            path_prob=jnp.ones((S if self.outcome else 1,), jnp.float32),
            path_baseline=jnp.zeros((S if self.value else 1, a), jnp.float32),
            utility=jnp.zeros((T,), jnp.float32),
            stats=TraversalStats(*([zero] * len(TraversalStats._fields))),
        )

    def busy(self, lanes: _Lanes):
        return jnp.any(lanes.mode != IDLE) | (lanes.next_traversal < self.o.traversals_per_player)

    def game_index(self, traversal):
        return self.game_base + traversal

    def bits(self, lanes: _Lanes, purpose):
        return rng.random_bits(
            self.seed, self.iteration, self.game_index(lanes.traversal), lanes.draws, purpose
        )

    def refill(self, lanes: _Lanes) -> _Lanes:
        """Idle lanes take the next traversals of the quota, in lane order."""
        idle = lanes.mode == IDLE
        if self.outcome:  # keep every busy lane on the same player to move
            idle = idle & (lanes.step % 4 == 0)
        rank = jnp.cumsum(idle) - 1
        new = lanes.next_traversal + rank
        start = idle & (new < self.o.traversals_per_player)
        # Dealing sorts a whole deck per lane: do it only on steps where a lane starts.
        games = jax.lax.cond(
            jnp.any(start),
            lambda: jax.vmap(engine.init, in_axes=(None, None, 0, None))(
                self.rules, self.seed, self.game_index(new), self.iteration
            ),
            lambda: lanes.game,
        )
        count = jnp.maximum(self.networks.league_count, 1)
        snapshot_bits = rng.random_bits(
            self.seed, self.iteration, self.game_index(new), 0, rng.Purpose.OPPONENT
        )
        expand_from = expansion_start(self.rules, self.seed, self.iteration, self.game_index(new))
        return lanes._replace(
            game=engine.tree_where(start, games, lanes.game),
            mode=jnp.where(start, DECIDE, lanes.mode),
            traversal=jnp.where(start, new, lanes.traversal),
            draws=jnp.where(start, 0, lanes.draws),
            advantage_nodes=jnp.where(start, 0, lanes.advantage_nodes),
            strategy_nodes=jnp.where(start, 0, lanes.strategy_nodes),
            snapshot=jnp.where(start, rng.below(snapshot_bits, count), lanes.snapshot),
            expand_from=jnp.where(start, expand_from, lanes.expand_from),
            on_trajectory=lanes.on_trajectory | start,
            top=jnp.where(start, 0, lanes.top),
            next_traversal=lanes.next_traversal + jnp.sum(start),
        )

    # ----- policies --------------------------------------------------------------

    def _regret_policy(self, params, obs, mask):
        raw = mlp.apply(self.spec, params, obs)
        advantages = mlp.masked_advantages(raw, mask)
        rm = functools.partial(
            pol.regret_matching, fallback=self.o.all_negative_fallback, floor=self.o.floor
        )
        return jax.vmap(rm)(advantages, mask)

    def _strategy_policy(self, params, obs, mask):
        return mlp.masked_policy(mlp.apply(self.spec, params, obs), mask)

    def _opponent_policy(self, lanes, obs, mask, snapshot):
        """(policy played, policy stored as a strategy sample, forwards run)."""
        mode = self.o.opponent_policy
        current = self._regret_policy(self.opponent_params, obs, mask)
        if mode == "network":
            return current, current, 1
        if mode in BOT_NAMES:  # a bot's choice, as a one-hot policy
            choice = self._bot(mode, lanes)
            return jax.nn.one_hot(choice, mask.shape[-1], dtype=jnp.float32), current, 1
        if mode == "average_strategy":
            return self._strategy_policy(self.networks.strategy, obs, mask), current, 2
        league = jax.vmap(lambda p: self._strategy_policy(p, obs, mask))(self.networks.league)
        played = jax.vmap(lambda probs, k: probs[k], in_axes=(1, 0))(league, snapshot)
        return played, current, 1 + jax.tree.leaves(self.networks.league)[0].shape[0]

    def policies(self, lanes: _Lanes, obs, mask, is_traverser):
        """(played policy, strategy-sample policy, forwards run) for every lane [L, A]."""
        if self.outcome:
            # all lanes at a decision share the mover: evaluate only what it needs
            mover = (lanes.step // 2) % 2

            def own(_):
                played = self._regret_policy(self.own_params, obs, mask)
                return played, played, jnp.int32(1)

            def other(_):
                played, sample, calls = self._opponent_policy(lanes, obs, mask, lanes.snapshot)
                return played, sample, jnp.int32(calls)

            return jax.lax.cond(mover == self.traverser, own, other, None)
        own_policy = self._regret_policy(self.own_params, obs, mask)
        played, sample, calls = self._opponent_policy(lanes, obs, mask, lanes.snapshot)
        chosen = jnp.where(is_traverser[:, None], own_policy, played)
        stored = jnp.where(is_traverser[:, None], own_policy, sample)
        return chosen, stored, jnp.int32(calls + 1)

    # ----- one lockstep step -----------------------------------------------------

    def advance(self, lanes: _Lanes) -> _Lanes:
        lanes = self.refill(lanes)
        lanes = self.decide(lanes)
        if not self.outcome:
            lanes = self.give_back(lanes)
        if self.o.cutoff_value_mode == "rollouts":
            lanes = self.play_out(lanes)
        stats = lanes.stats._replace(steps=lanes.stats.steps + 1)
        return lanes._replace(step=lanes.step + 1, stats=stats)

    def decide(self, lanes: _Lanes) -> _Lanes:
        r, o = self.rules, self.o
        deciding = lanes.mode == DECIDE
        game = lanes.game
        mover = game.current_player
        is_traverser = mover == self.traverser
        obs = jax.vmap(engine.observe, in_axes=(None, 0, 0))(r, game, mover)
        mask = jax.vmap(engine.legal_action_mask, in_axes=(None, 0))(r, game)
        played, stored, forwards = self.policies(lanes, obs, mask, is_traverser)

        expand = jnp.zeros_like(deciding)
        if self.outcome:
            explored = jax.vmap(pol.explore, in_axes=(0, 0, None))(
                played, mask, o.outcome_sampling_epsilon
            )
            behaviour = jnp.where(is_traverser[:, None], explored, played)
        elif self.sampled:
            # on the path (no frame yet) the traverser plays its policy mixed with
            # path_epsilon of uniform, and expands its first decision at or past the
            # drawn index that has a real choice; below it, max_depth levels as at the root
            on_path = lanes.top == 0
            decision = 2 * game.turn + game.phase
            choice = jnp.sum(mask, axis=1) >= 2
            armed = ~on_path | ((decision >= lanes.expand_from) & choice)
            expand = deciding & is_traverser & (lanes.top < o.max_depth) & armed
            explored = jax.vmap(pol.explore, in_axes=(0, 0, None))(played, mask, o.path_epsilon)
            behaviour = jnp.where((is_traverser & on_path)[:, None], explored, played)
        else:
            expand = deciding & is_traverser & (lanes.top < o.max_depth)
            behaviour = played
        sampled = jax.vmap(pol.sample_action)(behaviour, mask, self.bits(lanes, rng.Purpose.SAMPLE))
        first_legal = jnp.argmax(mask, axis=1).astype(jnp.int32)
        action = jnp.where(expand, first_legal, sampled)
        draws = lanes.draws + (deciding & ~expand)

        samples = lanes.samples
        base = lanes.traversal * self.adv_slots
        # advantage samples: outcome at every traverser decision, external at expansions
        write_adv = deciding & (is_traverser if self.outcome else expand)
        overflow = write_adv & (lanes.advantage_nodes >= self.adv_slots)
        write_adv = write_adv & ~overflow
        adv_slot = base + lanes.advantage_nodes
        samples = samples._replace(
            advantage_info=_write_rows(samples.advantage_info, adv_slot, obs, write_adv),
            advantage_mask=_write_rows(samples.advantage_mask, adv_slot, mask, write_adv),
            advantage_valid=_write_rows(samples.advantage_valid, adv_slot, write_adv, write_adv),
        )
        path_action, path_prob = lanes.path_action, lanes.path_prob
        if self.outcome:
            chosen_prob = jnp.take_along_axis(behaviour, action[:, None], axis=1)[:, 0]
            samples = samples._replace(
                advantage_target=_write_rows(samples.advantage_target, adv_slot, played, write_adv)
            )  # holds sigma until the path ends; finish() turns it into targets
            path_action = _write_rows(path_action, adv_slot, action, write_adv)
            path_prob = _write_rows(path_prob, adv_slot, chosen_prob, write_adv)
        path_baseline = lanes.path_baseline
        if self.value:
            # the traverser's history value at its decisions (skipped on opponent steps:
            # all lanes share the mover)
            history = jax.vmap(engine.observe_history, in_axes=(None, 0, None))(
                r, game, self.traverser
            )

            def estimate(_):
                raw = mlp.apply(self.value_spec, self.networks.value, history)
                return mlp.masked_advantages(raw, mask)

            at_traverser = ((lanes.step // 2) % 2) == self.traverser
            baseline = jax.lax.cond(at_traverser, estimate, jnp.zeros_like, played)
            forwards = forwards + at_traverser.astype(jnp.int32)
            path_baseline = _write_rows(path_baseline, adv_slot, baseline, write_adv)
            samples = samples._replace(
                value_info=_write_rows(samples.value_info, adv_slot, history, write_adv),
                value_mask=_write_rows(
                    samples.value_mask,
                    adv_slot,
                    jax.nn.one_hot(action, r.num_actions) > 0,
                    write_adv,
                ),
                value_valid=_write_rows(samples.value_valid, adv_slot, write_adv, write_adv),
            )  # value_target is set by finish()
        # strategy samples
        if self.sampled:
            # the on-policy trajectory: the path down to the expansion, then the child sigma
            # picks at every expanded node (the others are played for their values only)
            in_tree = lanes.on_trajectory
        else:
            in_tree = self.outcome | (lanes.top < o.max_depth)
        store_here = {
            "opponent": ~is_traverser,
            "traverser": is_traverser,
            "both": jnp.ones_like(is_traverser),
        }[o.strategy_samples]
        write_strat = deciding & store_here & in_tree
        overflow = overflow | (write_strat & (lanes.strategy_nodes >= self.strat_slots))
        write_strat = write_strat & (lanes.strategy_nodes < self.strat_slots)
        strat_slot = lanes.traversal * self.strat_slots + lanes.strategy_nodes
        samples = samples._replace(
            strategy_info=_write_rows(samples.strategy_info, strat_slot, obs, write_strat),
            strategy_mask=_write_rows(samples.strategy_mask, strat_slot, mask, write_strat),
            strategy_policy=_write_rows(samples.strategy_policy, strat_slot, stored, write_strat),
            strategy_valid=_write_rows(
                samples.strategy_valid, strat_slot, write_strat, write_strat
            ),
        )

        # external: push a frame for an expanded node
        frame_game, frame_policy = lanes.frame_game, lanes.frame_policy
        frame_mask, frame_values = lanes.frame_mask, lanes.frame_values
        frame_action, frame_slot, top = lanes.frame_action, lanes.frame_slot, lanes.top
        frame_draws = lanes.frame_draws
        frame_follow, frame_on = lanes.frame_follow, lanes.frame_on
        on_trajectory = lanes.on_trajectory
        if self.sampled:
            # drawn apart from the children's streams (which restart at this counter)
            follow_bits = rng.random_bits(
                self.seed,
                self.iteration,
                self.game_index(lanes.traversal),
                lanes.draws + 1,
                rng.Purpose.EXPLORE,
            )
            follow = jax.vmap(pol.sample_action)(played, mask, follow_bits)
            frame_follow = _tree_set(frame_follow, top, follow, expand)
            frame_on = _tree_set(frame_on, top, on_trajectory, expand)
            on_trajectory = jnp.where(expand, on_trajectory & (action == follow), on_trajectory)
        if not self.outcome:
            frame_game = _tree_set(frame_game, top, game, expand)
            frame_policy = _tree_set(frame_policy, top, played, expand)
            frame_mask = _tree_set(frame_mask, top, mask, expand)
            frame_values = _tree_set(frame_values, top, jnp.zeros_like(played), expand)
            frame_action = _tree_set(frame_action, top, action, expand)
            frame_slot = _tree_set(frame_slot, top, adv_slot, expand)
            frame_draws = _tree_set(frame_draws, top, lanes.draws, expand)
            top = top + expand

        next_game = jax.vmap(engine.step, in_axes=(None, 0, 0))(r, game, action)
        game = engine.tree_where(deciding, next_game, game)
        stats = lanes.stats
        stats = stats._replace(
            nodes=stats.nodes + jnp.sum(deciding),
            policy_calls=stats.policy_calls + forwards * jnp.sum(deciding),
            forward_batches=stats.forward_batches + forwards * jnp.any(deciding),
            dropped_samples=stats.dropped_samples + jnp.sum(overflow),
        )
        lanes = lanes._replace(
            game=game,
            draws=draws,
            advantage_nodes=lanes.advantage_nodes + write_adv,
            strategy_nodes=lanes.strategy_nodes + write_strat,
            samples=samples,
            path_action=path_action,
            path_prob=path_prob,
            path_baseline=path_baseline,
            frame_game=frame_game,
            frame_policy=frame_policy,
            frame_mask=frame_mask,
            frame_values=frame_values,
            frame_action=frame_action,
            frame_slot=frame_slot,
            frame_draws=frame_draws,
            frame_follow=frame_follow,
            frame_on=frame_on,
            on_trajectory=on_trajectory,
            top=top,
            stats=stats,
        )
        return self.arrive(lanes, deciding)

    def arrive(self, lanes: _Lanes, moved) -> _Lanes:
        """Handles lanes whose move reached a terminal or cut-off position."""
        game = lanes.game
        cut = jnp.zeros_like(moved)
        if self.o.cutoff_turns > 0:
            cut = ~game.terminal & (game.turn >= self.o.cutoff_turns)
        ended = moved & (game.terminal | cut)
        stats = lanes.stats._replace(
            terminals=lanes.stats.terminals + jnp.sum(ended & game.terminal & ~game.truncated),
            truncations=lanes.stats.truncations + jnp.sum(ended & game.truncated),
            cutoffs=lanes.stats.cutoffs + jnp.sum(ended & cut),
            endpoint_depth_sum=lanes.stats.endpoint_depth_sum
            + jnp.sum(jnp.where(ended, 2 * game.turn + game.phase, 0)),
        )
        lanes = lanes._replace(stats=stats)
        value = _utility(self.rules, game, self.traverser, self.o.utility_scale)
        if self.o.cutoff_value_mode == "rollouts":
            to_roll = ended & cut
            lanes = lanes._replace(
                mode=jnp.where(to_roll, ROLLOUT, lanes.mode),
                rollout_base=engine.tree_where(to_roll, game, lanes.rollout_base),
                rollout_done=jnp.where(to_roll, 0, lanes.rollout_done),
                rollout_sum=jnp.where(to_roll, 0.0, lanes.rollout_sum),
            )
            ended = ended & ~cut
        return self.path_value(lanes, ended, value)

    def path_value(self, lanes: _Lanes, ended, value) -> _Lanes:
        """A path ended with `value`: finish the traversal or hand the value up."""
        if self.outcome:
            utility = _write_rows(lanes.utility, lanes.traversal, value, ended)
            return lanes._replace(
                utility=utility,
                mode=jnp.where(ended, IDLE, lanes.mode),
                traversal=jnp.where(ended, -1, lanes.traversal),
            )
        return lanes._replace(
            mode=jnp.where(ended, RETURN, lanes.mode),
            value=jnp.where(ended, value, lanes.value),
        )

    def give_back(self, lanes: _Lanes) -> _Lanes:
        """External sampling: one RETURN move per lane (record, next child, or pop)."""
        r = self.rules
        returning = lanes.mode == RETURN
        done = returning & (lanes.top == 0)
        has_frame = returning & (lanes.top > 0)
        index = jnp.maximum(lanes.top - 1, 0)
        policy = _tree_index(lanes.frame_policy, index)
        mask = _tree_index(lanes.frame_mask, index)
        values = _tree_index(lanes.frame_values, index)
        action = _tree_index(lanes.frame_action, index)
        values = jnp.where(
            jnp.arange(r.num_actions) == action[:, None], lanes.value[:, None], values
        )
        later = mask & (jnp.arange(r.num_actions) > action[:, None])
        has_next = jnp.any(later, axis=1)
        next_action = jnp.argmax(later, axis=1).astype(jnp.int32)
        node_value, regrets = jax.vmap(pol.node_regrets)(policy, values, mask)
        pop = has_frame & ~has_next
        go_on = has_frame & has_next
        slot = _tree_index(lanes.frame_slot, index)
        samples = lanes.samples._replace(
            advantage_target=_write_rows(lanes.samples.advantage_target, slot, regrets, pop)
        )
        node_game = _tree_index(lanes.frame_game, index)
        child = jax.vmap(engine.step, in_axes=(None, 0, 0))(r, node_game, next_action)
        draws, on_trajectory = lanes.draws, lanes.on_trajectory
        if self.sampled:  # common random numbers: every child replays the node's stream
            draws = jnp.where(go_on, _tree_index(lanes.frame_draws, index), draws)
            follows = _tree_index(lanes.frame_on, index) & (
                next_action == _tree_index(lanes.frame_follow, index)
            )
            on_trajectory = jnp.where(go_on, follows, on_trajectory)
        lanes = lanes._replace(
            draws=draws,
            on_trajectory=on_trajectory,
            samples=samples,
            frame_values=_tree_set(lanes.frame_values, index, values, has_frame),
            frame_action=_tree_set(lanes.frame_action, index, next_action, go_on),
            top=lanes.top - pop,
            value=jnp.where(pop, node_value, lanes.value),
            game=engine.tree_where(go_on, child, lanes.game),
            mode=jnp.where(go_on, DECIDE, jnp.where(done, IDLE, lanes.mode)),
            traversal=jnp.where(done, -1, lanes.traversal),
        )
        return self.arrive(lanes, go_on)

    def _bot(self, name: str, lanes: _Lanes):
        """[L] the bot's action in every lane's position (keyed by the draw counter)."""
        return jax.vmap(bot_action, in_axes=(None, None, 0, None, None, 0, 0))(
            self.rules,
            name,
            lanes.game,
            self.seed,
            self.iteration,
            self.game_index(lanes.traversal),
            lanes.draws,
        )

    def play_out(self, lanes: _Lanes) -> _Lanes:
        """One decision of every lane's cut-off playout: both players play the bot."""
        r = self.rules
        rolling = lanes.mode == ROLLOUT
        action = self._bot(self.o.cutoff_rollout_policy, lanes)
        game = jax.vmap(engine.step, in_axes=(None, 0, 0))(r, lanes.game, action)
        game = engine.tree_where(rolling, game, lanes.game)
        finished = rolling & game.terminal
        total = lanes.rollout_sum + jnp.where(
            finished, _utility(r, game, self.traverser, self.o.utility_scale), 0.0
        )
        done = lanes.rollout_done + finished
        complete = finished & (done >= self.o.cutoff_rollouts)
        restart = finished & ~complete
        stats = lanes.stats._replace(
            rollout_decisions=lanes.stats.rollout_decisions + jnp.sum(rolling)
        )
        lanes = lanes._replace(
            game=engine.tree_where(restart, lanes.rollout_base, game),
            draws=lanes.draws + rolling,
            rollout_sum=total,
            rollout_done=done,
            mode=jnp.where(complete, DECIDE, lanes.mode),  # path_value sets the next mode
            stats=stats,
        )
        value = total * jnp.float32(1.0 / self.o.cutoff_rollouts)
        return self.path_value(lanes, complete, value)

    # ----- after the loop --------------------------------------------------------

    def finish(self, lanes: _Lanes) -> tuple[Samples, TraversalStats]:
        samples = lanes.samples
        if self.outcome:
            T, D = self.o.traversals_per_player, self.adv_slots
            policy = samples.advantage_target.reshape(T, D, -1)
            mask = samples.advantage_mask.reshape(T, D, -1)
            action = lanes.path_action.reshape(T, D)
            prob = lanes.path_prob.reshape(T, D)
            count = jnp.sum(samples.advantage_valid.reshape(T, D), axis=1)
            if self.value:
                return self._finish_with_values(lanes, policy, mask, action, prob, count)
            chosen = jnp.take_along_axis(policy, action[..., None], axis=2)[..., 0]
            ratios = jnp.where(samples.advantage_valid.reshape(T, D), chosen / prob, 1.0)
            after = jax.vmap(pol.weights_after)(ratios, count)
            targets = functools.partial(
                pol.outcome_targets,
                value_clip=self.o.outcome_sampling_value_clip,
                unsampled_regret=self.o.outcome_unsampled_regret,
            )
            utility = jnp.broadcast_to(lanes.utility[:, None], (T, D))
            target = jax.vmap(jax.vmap(targets))(policy, mask, action, prob, after, utility)
            valid = samples.advantage_valid.reshape(T, D)
            target = jnp.where(valid[..., None], target, 0.0)
            samples = samples._replace(advantage_target=target.reshape(T * D, -1))
            if self.o.outcome_sampling_value_clip > 0:
                clipped = valid & (
                    jnp.abs(pol.sampled_value(after, utility, prob))
                    > self.o.outcome_sampling_value_clip
                )
                stats = lanes.stats._replace(clipped_values=jnp.sum(clipped, dtype=jnp.int32))
                return samples, stats
        return samples, lanes.stats

    def _finish_with_values(self, lanes, policy, mask, action, prob, count):
        """Outcome targets of the estimators that read the value network."""
        T, D = self.o.traversals_per_player, self.adv_slots
        targets = functools.partial(
            pol.baseline_path_targets,
            estimator=self.o.outcome_estimator,
            value_clip=self.o.outcome_sampling_value_clip,
            value_lambda=self.o.value_lambda,
        )
        baseline = lanes.path_baseline.reshape(T, D, -1)
        regrets, value_targets = jax.vmap(targets)(
            policy, mask, action, prob, baseline, count, lanes.utility
        )
        samples = lanes.samples
        value_mask = samples.value_mask
        samples = samples._replace(
            advantage_target=regrets.reshape(T * D, -1),
            value_target=jnp.where(value_mask, value_targets.reshape(T * D, 1), 0.0),
        )
        return samples, lanes.stats


class JaxBackend:
    """Option C: the lockstep traversal above, `lanes` traversals in flight in all (lanes/D
    on each of the D devices of every process)."""

    def __init__(self, *, rules: Rules, spec: mlp.NetworkSpec, options: TraversalOptions, lanes):
        validate_options(options, rules)
        check_lanes(options, lanes, sharding.device_count(None))  # checked at start-up
        self.rules, self.spec, self.options, self.lanes = rules, spec, options, lanes

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
