"""The Deep CFR traversal as plain recursion, one traversal at a time (the reference).

This states docs/design.md section 3 the way the paper writes it, with no lanes,
stacks or batches: every node is encoded and evaluated alone (batch 1). It is slow on
purpose and exists so that the tests can hold the lockstep backend (`lockstep.py`), and
later the Cython backends, to exactly the same samples, draw for draw: the random draws
come from the same counters, the per-node arithmetic from the same functions of
`policy.py`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr.bots import BOT_NAMES
from lc_cfr.bots.jax_bots import bot_action
from lc_cfr.game import engine, rng
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import policy as pol
from lc_cfr.traversal.api import (
    LEAF_CHECK_PHASES,
    LEAF_CHECK_SUMS,
    PATH_END_NAMES,
    Networks,
    TraversalOptions,
    expansion_start,
    has_leaves,
    is_sampled_expansion,
    leaf_check,
    leaf_check_phase,
    leaf_check_sums,
    leaf_point,
    path_choices,
    path_end_bin,
    uses_value_network,
    utility_factor,
    validate_options,
    value_spec,
)


@dataclasses.dataclass
class Record:
    """One sample: its identity (traversal, node) and contents."""

    traversal: int
    node: int
    info: np.ndarray  # [E] float32
    mask: np.ndarray  # [A] bool
    target: np.ndarray  # [A] float32: regret targets or a policy


@dataclasses.dataclass
class Result:
    advantage: list
    strategy: list
    stats: dict
    value: list = dataclasses.field(default_factory=list)  # value network samples


def _select(params_pair, index):
    return params_pair[0] if index == 0 else params_pair[1]


class ReferenceTraversal:
    """Runs traversals one by one with per-node calls; see `run`."""

    def __init__(self, rules: Rules, spec: mlp.NetworkSpec, options: TraversalOptions):
        validate_options(options, rules)
        self.rules, self.spec, self.o = rules, spec, options
        r = rules
        self._observe = jax.jit(functools.partial(engine.observe, r))
        draws = options.draws
        self._mask = jax.jit(lambda state: pol.agent_mask(r, state, draws))
        self._step = jax.jit(functools.partial(engine.step, r))
        self._init = jax.jit(functools.partial(engine.init, r))
        fallback, floor = options.all_negative_fallback, options.floor

        @jax.jit
        def regret_policy(params, obs, mask):
            raw = mlp.apply(spec, params, obs[None])
            advantages = mlp.masked_advantages(raw, mask[None])[0]
            return pol.regret_matching(advantages, mask, fallback=fallback, floor=floor)

        @jax.jit
        def strategy_policy(params, obs, mask):
            return mlp.masked_policy(mlp.apply(spec, params, obs[None]), mask[None])[0]

        self._regret_policy = regret_policy
        if uses_value_network(options):
            vspec = value_spec(rules, spec)

            @jax.jit
            def baseline(params, history, mask):
                raw = mlp.apply(vspec, params, history[None])
                return mlp.masked_advantages(raw, mask[None])[0]

            self._baseline = baseline
            self._leaf_sums = jax.jit(leaf_check_sums)
            self._history = jax.jit(functools.partial(engine.observe_history, r))
            self._path_targets = jax.jit(
                functools.partial(
                    pol.baseline_path_targets,
                    estimator=options.outcome_estimator,
                    value_clip=options.outcome_sampling_value_clip,
                    value_lambda=options.value_lambda,
                )
            )
        self._strategy_policy = strategy_policy
        self._explore = jax.jit(pol.explore, static_argnums=2)
        self._sample = jax.jit(pol.sample_action)
        self._bits = jax.jit(rng.random_bits)
        self._bot = jax.jit(functools.partial(bot_action, r), static_argnums=0)
        self._weights_after = jax.jit(pol.weights_after)
        self._node_regrets = jax.jit(pol.node_regrets)
        self._targets = jax.jit(
            functools.partial(
                pol.outcome_targets,
                value_clip=options.outcome_sampling_value_clip,
                unsampled_regret=options.outcome_unsampled_regret,
            )
        )

    def run(self, networks: Networks, *, seed: int, iteration: int, traverser: int) -> Result:
        """All `traversals_per_player` traversals of one call, in order."""
        self.networks, self.seed, self.iteration = networks, seed, iteration
        self.traverser = traverser
        self.stats = dict.fromkeys(
            [
                "nodes",
                "terminals",
                "truncations",
                "cutoffs",
                "endpoint_depth_sum",
                "rollouts",
                "clipped_values",
                *PATH_END_NAMES,
            ],
            0,
        )
        if has_leaves(self.o):
            self.stats["leaves"] = 0
            self.stats["leaf_checks"] = np.zeros(
                (LEAF_CHECK_PHASES, len(LEAF_CHECK_SUMS)), np.float32
            )
        self.advantage, self.strategy, self.value = [], [], []
        for j in range(self.o.traversals_per_player):
            self._traversal(j)
        return Result(self.advantage, self.strategy, self.stats, self.value)

    # ----- shared pieces --------------------------------------------------------

    def _draw(self, purpose):
        bits = self._bits(self.seed, self.iteration, self.game, self.draws, int(purpose))
        self.draws += 1
        return bits

    def _policies(self, state, obs, mask):
        """(played, stored as a strategy sample) for the player to move."""
        mover = int(state.current_player)
        current = self._regret_policy(_select(self.networks.advantage, mover), obs, mask)
        if mover == self.traverser or self.o.opponent_policy == "network":
            return current, current
        if self.o.opponent_policy in BOT_NAMES:
            action = self._bot_action(self.o.opponent_policy, state)
            return jax.nn.one_hot(action, self.rules.num_actions, dtype=jnp.float32), current
        if self.o.opponent_policy == "average_strategy":
            return self._strategy_policy(self.networks.strategy, obs, mask), current
        league = jax.tree.map(lambda x: x[self.snapshot], self.networks.league)
        return self._strategy_policy(league, obs, mask), current

    def _bot_action(self, name: str, state) -> int:
        """The bot's move, keyed by the traversal's draw counter (no draw is taken)."""
        return int(self._bot(name, state, self.seed, self.iteration, self.game, self.draws))

    def _store_strategy(self, is_traverser: bool) -> bool:
        where = self.o.strategy_samples
        return where == "both" or (where == "traverser") == is_traverser

    def _ended(self, state, count: bool = True):
        """(ended, cut) for a position reached by a move; `count` adds a path's end to the
        statistics (a scouting pass is not a path of the traversal's tree)."""
        cut = (
            self.o.cutoff_turns > 0
            and not bool(state.terminal)
            and int(state.turn) >= self.o.cutoff_turns
        )
        ended = bool(state.terminal) or cut
        if ended and count:
            self.stats["terminals"] += int(bool(state.terminal) and not bool(state.truncated))
            self.stats["truncations"] += int(bool(state.truncated))
            self.stats["cutoffs"] += int(cut)
            self.stats["endpoint_depth_sum"] += int(engine.decision_index(state))
            self.stats[PATH_END_NAMES[int(path_end_bin(self.rules, int(state.turn)))]] += 1
        return ended, cut

    def _utility(self, state) -> jax.Array:
        returns = engine.returns(self.rules, state)
        return returns[self.traverser] * utility_factor(self.o.utility_scale)

    def _value_at_end(self, state, cut):
        if not (cut and self.o.cutoff_value_mode == "rollouts"):
            return self._utility(state)
        total = jnp.float32(0.0)
        for _ in range(self.o.cutoff_rollouts):
            game = state
            while not bool(game.terminal):
                action = self._bot_action(self.o.cutoff_rollout_policy, game)
                self.draws += 1
                game = self._step(game, action)
                self.stats["rollouts"] += 1
            total = total + self._utility(game)
        return total * jnp.float32(1.0 / self.o.cutoff_rollouts)

    def _traversal(self, j: int) -> None:
        self.game = self.traverser * self.o.traversals_per_player + j
        self.traversal, self.draws = j, 0
        self.adv_nodes, self.strat_nodes = 0, 0
        count = max(int(self.networks.league_count), 1)
        self.snapshot = int(
            rng.below(
                rng.random_bits(self.seed, self.iteration, self.game, 0, rng.Purpose.OPPONENT),
                count,
            )
        )
        state = self._init(rng.as_word(self.seed), self.game, rng.as_word(self.iteration))
        self.value_nodes = 0
        self.resumed = False  # expand_at='path': the path goes on past an expanded choice
        if has_leaves(self.o):
            share = self.o.leaf_check_share
            self.checked = bool(leaf_check(self.seed, self.iteration, self.game, share))
        if self.o.sampling_mode == "outcome":
            self._outcome(state)
        elif is_sampled_expansion(self.o):
            self._sampled_path(state)
        else:
            self._external(state, 0)

    def _record_strategy(self, obs, mask, stored):
        self.strategy.append(
            Record(
                self.traversal,
                self.strat_nodes,
                np.asarray(obs),
                np.asarray(mask),
                np.asarray(stored),
            )
        )
        self.strat_nodes += 1

    # ----- outcome sampling: one path, targets when it ends -----------------------

    def _outcome(self, state) -> None:
        path = []  # (obs, mask, sigma, action, q) at the traverser's decisions
        baselines = []  # (history features, b(h, .)) at the same decisions
        while True:
            mover = int(state.current_player)
            obs, mask = self._observe(state, mover), self._mask(state)
            played, stored = self._policies(state, obs, mask)
            is_traverser = mover == self.traverser
            epsilon = self.o.outcome_sampling_epsilon
            behaviour = self._explore(played, mask, epsilon) if is_traverser else played
            action = self._sample(behaviour, mask, self._draw(rng.Purpose.SAMPLE))
            if is_traverser:
                path.append((obs, mask, played, action, behaviour[action]))
                if uses_value_network(self.o):
                    history = self._history(state, self.traverser)
                    baselines.append((history, self._baseline(self.networks.value, history, mask)))
            if self._store_strategy(is_traverser):
                self._record_strategy(obs, mask, stored)
            self.stats["nodes"] += 1
            state = self._step(state, action)
            ended, cut = self._ended(state)
            if ended:
                utility = self._value_at_end(state, cut)
                break
        slots = self.rules.max_turns + 1
        if uses_value_network(self.o):
            self._value_targets(path, baselines, utility, slots)
            return
        ratios = np.ones((slots,), np.float32)
        for k, (_, _, sigma, action, q) in enumerate(path):
            ratios[k] = np.asarray(sigma[action] / q)
        after = self._weights_after(jnp.asarray(ratios), len(path))
        for k, (obs, mask, sigma, action, q) in enumerate(path):
            target = self._targets(sigma, mask, action, q, after[k], utility)
            value = pol.sampled_value(after[k], utility, q)
            clip = self.o.outcome_sampling_value_clip
            self.stats["clipped_values"] += int(clip > 0 and bool(jnp.abs(value) > clip))
            self.advantage.append(
                Record(self.traversal, k, np.asarray(obs), np.asarray(mask), np.asarray(target))
            )
        self.adv_nodes = len(path)

    # ----- external sampling: recursion down to max_depth -------------------------

    def _external(self, state, expanded: int, node_decision: int = 0):
        """(value, estimate) of `state` for the traverser, `expanded` traverser nodes
        above it, the deepest at decision `node_decision`; the estimate reads the value
        network at leaf points (`leaf_point`) and is the value without leaves."""
        past_leaf, estimate, leaf_sample = False, None, None
        while True:
            mover = int(state.current_player)
            obs, mask = self._observe(state, mover), self._mask(state)
            played, stored = self._policies(state, obs, mask)
            is_traverser = mover == self.traverser
            in_tree = expanded < self.o.max_depth
            # sampled expansions store strategy samples on the on-policy trajectory only
            if is_sampled_expansion(self.o):
                store = self.on_trajectory and not self.resumed
            else:
                store = in_tree
            if store and self._store_strategy(is_traverser):
                self._record_strategy(obs, mask, stored)
            self.stats["nodes"] += 1
            if is_traverser and in_tree:
                return self._expand(state, obs, mask, played, expanded)
            at_leaf = (
                has_leaves(self.o)
                and is_traverser
                and expanded == self.o.max_depth
                and not past_leaf
                and leaf_point(self.o, int(engine.decision_index(state)) - node_decision)
            )
            if at_leaf:
                history = self._history(state, self.traverser)
                q = self._baseline(self.networks.value, history, mask)
                estimate = self._node_regrets(played, q, mask)[0]
                if not (self.checked or self.on_trajectory):
                    self.stats["leaves"] += 1
                    return estimate, estimate
                past_leaf = True
            action = self._sample(played, mask, self._draw(rng.Purpose.SAMPLE))
            if at_leaf and not self.resumed:  # the first expansion's trajectory holds them
                chosen = np.arange(self.rules.num_actions) == int(action)
                leaf_sample = Record(
                    self.traversal, self.value_nodes, np.asarray(history), chosen, None
                )
                self.value.append(leaf_sample)
                self.value_nodes += 1
            state = self._step(state, action)
            ended, cut = self._ended(state)
            if ended:
                value = self._value_at_end(state, cut)
                if leaf_sample is not None:
                    target = np.where(leaf_sample.mask, np.asarray(value), 0.0)
                    leaf_sample.target = target.astype(np.float32)
                return value, estimate if past_leaf else value

    def _path_choices(self, state) -> list[int]:
        """expand_at='path': plays the traversal's path to its end without recording
        anything (same draws as the path itself) and returns which of the traverser's
        choices on it to expand (`api.path_choices`: increasing, none if it has none)."""
        choices = 0
        while True:
            mover = int(state.current_player)
            obs, mask = self._observe(state, mover), self._mask(state)
            played, _ = self._policies(state, obs, mask)
            is_traverser = mover == self.traverser
            self.stats["nodes"] += 1
            behaviour = played
            if is_traverser:
                choices += int(np.sum(np.asarray(mask))) >= 2
                behaviour = self._explore(played, mask, self.o.path_epsilon)
            action = self._sample(behaviour, mask, self._draw(rng.Purpose.SAMPLE))
            state = self._step(state, action)
            if self._ended(state, count=False)[0]:
                break
        self.draws = 0  # the path replays the same draws
        drawn = path_choices(self.seed, self.iteration, self.game, choices, self.o.path_expansions)
        return [int(c) for c in np.asarray(drawn) if c >= 0]

    def _sampled_path(self, state) -> None:
        """expand_at='sampled' or 'path': one on-policy path down to the drawn decision
        (a decision index, or one of the path's choices), expanded."""
        if self.o.expand_at == "path":
            start, planned = 0, self._path_choices(state)
        else:
            start = int(expansion_start(self.rules, self.seed, self.iteration, self.game))
            planned = None  # the first choice at or past `start`
        choices = 0  # the traverser's decisions on the path with two or more actions
        self.on_trajectory = True  # strategy samples lie on the on-policy trajectory
        while True:
            mover = int(state.current_player)
            obs, mask = self._observe(state, mover), self._mask(state)
            played, stored = self._policies(state, obs, mask)
            is_traverser = mover == self.traverser
            if self._store_strategy(is_traverser) and not self.resumed:
                self._record_strategy(obs, mask, stored)
            self.stats["nodes"] += 1
            decision = int(engine.decision_index(state))
            if is_traverser and int(np.sum(np.asarray(mask))) >= 2:
                if planned is None and decision >= start or planned and choices == planned[0]:
                    node_draws = self.draws
                    self._expand(state, obs, mask, played, 0)
                    if not planned or len(planned) == 1:
                        return
                    # The next choice lies further down the path: from this node again,
                    # as the scouting pass played it (decided anew, now not expanded).
                    planned = planned[1:]
                    self.draws, self.on_trajectory, self.resumed = node_draws, True, True
                    continue
                choices += 1
            behaviour = played
            if is_traverser:
                behaviour = self._explore(played, mask, self.o.path_epsilon)
            action = self._sample(behaviour, mask, self._draw(rng.Purpose.SAMPLE))
            state = self._step(state, action)
            ended, cut = self._ended(state)
            if ended:
                self._value_at_end(state, cut)  # the rollouts count in the statistics
                return

    def _expand(self, state, obs, mask, sigma, expanded: int):
        node = self.adv_nodes
        self.adv_nodes += 1
        record = Record(self.traversal, node, np.asarray(obs), np.asarray(mask), None)
        self.advantage.append(record)
        values = jnp.zeros((self.rules.num_actions,), jnp.float32)
        estimates = values
        decision = int(engine.decision_index(state))
        draws = self.draws
        sampled = is_sampled_expansion(self.o)
        if sampled:  # the child sigma would play continues the on-policy trajectory
            bits = self._bits(self.seed, self.iteration, self.game, draws + 1, rng.Purpose.EXPLORE)
            follow, on_trajectory = int(self._sample(sigma, mask, bits)), self.on_trajectory
        for action in np.flatnonzero(np.asarray(mask)):
            if sampled:
                self.draws = draws  # common random numbers: every child replays the stream
                self.on_trajectory = on_trajectory and int(action) == follow
            child = self._step(state, int(action))
            ended, cut = self._ended(child)
            if ended:
                value = estimate = self._value_at_end(child, cut)
            else:
                value, estimate = self._external(child, expanded + 1, decision)
            values = values.at[action].set(value)
            estimates = estimates.at[action].set(estimate)
        node_value, regrets = self._node_regrets(sigma, values, mask)
        node_estimate, leaf_regrets = self._node_regrets(sigma, estimates, mask)
        leaf_targets = has_leaves(self.o) and self.o.leaf_targets == "leaves"
        record.target = np.asarray(leaf_regrets if leaf_targets and not self.checked else regrets)
        if has_leaves(self.o) and self.checked:
            phase = int(leaf_check_phase(self.rules, int(state.turn)))
            self.stats["leaf_checks"][phase] += np.asarray(
                self._leaf_sums(leaf_regrets, regrets, mask)
            )
        return node_value, node_estimate

    def _value_targets(self, path, baselines, utility, slots) -> None:
        """Targets of the estimators that read the value network (one path)."""
        a = self.rules.num_actions
        sigma, mask = np.zeros((slots, a), np.float32), np.zeros((slots, a), bool)
        action, prob = np.zeros((slots,), np.int32), np.ones((slots,), np.float32)
        baseline = np.zeros((slots, a), np.float32)
        for k, (_, m, s, act, q) in enumerate(path):
            sigma[k], mask[k], action[k], prob[k] = s, m, int(act), np.asarray(q)
            baseline[k] = np.asarray(baselines[k][1])
        regrets, value_targets = self._path_targets(
            sigma, mask, action, prob, baseline, len(path), utility
        )
        for k, (obs, m, _, act, _) in enumerate(path):
            self.advantage.append(
                Record(self.traversal, k, np.asarray(obs), np.asarray(m), np.asarray(regrets[k]))
            )
            chosen = np.arange(a) == int(act)
            target = np.where(chosen, np.asarray(value_targets[k]), 0.0).astype(np.float32)
            self.value.append(
                Record(self.traversal, k, np.asarray(baselines[k][0]), chosen, target)
            )
        self.adv_nodes = len(path)
