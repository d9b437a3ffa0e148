"""Evaluation games in lockstep: an agent against an opponent bot, every deal mirrored.

Games. `games` (even) games are played: deal g = 0 .. games/2 - 1 is
`engine.init(rules, seed, g, iteration=0)`, the shared generator's deal (docs/design.md
section 2.2). Training traversals deal with iterations >= 1, so an evaluation deal never
coincides with a training deal, and every checkpoint and backend meets the same deals.
Each deal is played twice, the agent seated as player 0 and then as player 1 (seat s).
The game of (deal g, seat s) has the game id `2 * g + s`.

Randomness. Every draw is a pure function of counters, never of the order games run in:

- the agent's `sampled` mode draws action `policy.sample_action(probs, mask, bits)` with
  `bits = random_bits(seed, 0, 2 * g + s, d, Purpose.SAMPLE)`, d = the decision index in
  the game (0-based, both players' decisions counted);
- a bot draws its noise with `jax_bots.bot_action(rules, name, state, seed, 0, g, d)`:
  the bot's game index is the deal g, not the game id, so a bot meets the same noise in
  both seats of a deal. A bot mirrored against itself therefore replays the very same
  game with the seats exchanged, and its mean margin is exactly 0 (the test of the
  mirroring).

The agent. A network agent plays one policy view: `average_strategy` (the strategy
network, `mlp.masked_policy` of its raw outputs) or `current` (regret matching on the
advantage networks, `policy.regret_matching` with the given fallback; the agent seated as
player s uses advantage network s). In `greedy` mode it takes the most probable legal
action, the lowest action index among ties, except that at a draw decision it weighs the
piles together against the deck first (`policy.greedy_action`); in `sampled` mode it
samples as above. A bot agent (bot against bot) is played by the same loop.

Lockstep. `lanes` games are in flight at once: half of the lanes (H) always hold seat-0
games, the other half seat-1 games, and every game starts on a loop step divisible by 4.
So at step t every live game is at a decision of player p = (t // 2) % 2: the agent moves
in all seat-p lanes and the opponent in all the others. Each step runs exactly one
batched forward over the H agent lanes and one vmapped bot call over the H others, then
one vmapped engine step over all lanes. A finished lane takes the next deal of its seat's
queue at the next step divisible by 4. Once every deal has started, the last games would
leave most lanes idle while the longest ones finish, so the loop narrows: when at most
H/2 (then H/8) games per seat are still running, they are compacted into a loop of that
width (H -> H/4 when 8 <= H < 64). The whole evaluation against one opponent is one
jitted program; it is compiled once per (rules, network shape, agent, opponent, games,
lanes) and cached here, so later calls with new parameters reuse it.

Devices. With D > 1 devices (every device of every process by default, `devices`), the
deals are split into D contiguous blocks of ceil(deals / D), one per device of a
`lc_cfr.traversal.sharding` mesh; each device plays its block with lanes / D lanes (H/D
per seat) in its own loop (`jax.shard_map`), and the per-game records are gathered on
every device (deals past the last requested one, when D does not divide them, are played
and dropped). Every draw is keyed by the deal and the decision, never by the lane or the
device, so a game is the single-device game; `steps` is the longest device's loop and
`rows` the sum over devices.

Floating point. A network agent's choices come from a batched forward; XLA may round a
row differently at another batch width, so a greedy near-tie (or a sampled draw at a
bucket edge) can resolve differently with another `lanes` (or another device count,
which narrows each device's batch). Results are exactly reproducible for a given (rules,
network shape, agent, opponent, games, lanes, devices, seed); bots, and networks whose
forward is exact (tests/traversal_helpers.py: dyadic weights), give the same records
whatever the lanes and devices.
"""

from __future__ import annotations

import functools
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from lc_cfr import search as search_lib
from lc_cfr.bots import check_bot_name, jax_bots
from lc_cfr.game import engine, moves, rng
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import policy as pol
from lc_cfr.traversal import sharding

VIEWS = ("average_strategy", "current")
MODES = ("greedy", "sampled")
# Which draws a network agent may take (`policy.DRAWS`: the run's `draws`, or another,
# the counterfactual that prices its stalling in scripts/stalling.py).
DRAWS = pol.DRAWS
# Games in flight: 256 agent rows per forward, the knee of a 512x3 forward's cost per row
# on a 2-core CPU; an accelerator wants more (pass `lanes`).
DEFAULT_LANES = 512

# Agent action kinds, the columns of the per-game action counts.
PLAY, DISCARD, DRAW_DECK, DRAW_PILE = 0, 1, 2, 3


class Agent(NamedTuple):
    """Who plays the evaluated seat (static and hashable).

    kind: `average_strategy`, `current` (network views) or `bot`.
    mode: `greedy` or `sampled` (network views only).
    fallback: regret matching's all-negative fallback (`current` only).
    bot: the bot name (`bot` only).
    draws: DRAWS (network views only; `policy.restrict_draws`): the policy is
      renormalised over the draws kept; the deck draw is always kept.
    search: when set, the agent plays `lc_cfr.search` over the view or bot above (its
      blueprint) instead of the blueprint itself; `mode` is then unused.
    """

    kind: str
    mode: str = "greedy"
    fallback: str = "argmax_tiebreak"
    bot: str = ""
    draws: str = "any"
    search: search_lib.SearchOptions | None = None


def network_agent(
    view: str,
    mode: str = "greedy",
    fallback: str = "argmax_tiebreak",
    draws: str = "any",
    search: search_lib.SearchOptions | None = None,
) -> Agent:
    """A network agent (searching over the view with `search`); raises ValueError naming
    the bad argument."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {list(VIEWS)}, got {view!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if fallback not in pol.FALLBACKS:
        raise ValueError(f"fallback must be one of {list(pol.FALLBACKS)}, got {fallback!r}")
    pol.check_draws(draws)
    if view == "average_strategy":
        fallback = "argmax_tiebreak"  # unused: keep one cache entry per (view, mode)
    if search is not None:
        mode = "greedy"  # unused by a search
    return Agent(view, mode, fallback, draws=draws, search=search)


def bot_agent(
    name: str, field: str = "agent", search: search_lib.SearchOptions | None = None
) -> Agent:
    """A bot playing the evaluated seat (searching over the bot with `search`)."""
    return Agent("bot", bot=check_bot_name(name, field), search=search)


class GameRecords(NamedTuple):
    """Per-game results, every field [2, D]: entry [s, g] is deal g with the agent as s."""

    margin: np.ndarray  # agent's `engine.returns` in points: its score minus the opponent's
    agent_score: np.ndarray
    opponent_score: np.ndarray
    decisions: np.ndarray  # decisions of both players
    truncated: np.ndarray  # bool: cut at max_turns
    illegal: np.ndarray  # bool: ended by an illegal action (never, for these players)
    plays: np.ndarray  # the agent's CARD decisions that played a card
    discards: np.ndarray  # ... that discarded
    deck_draws: np.ndarray  # the agent's DRAW decisions from the deck
    pile_draws: np.ndarray  # ... from a discard pile
    opened: np.ndarray  # the agent's expeditions holding at least one card
    negative: np.ndarray  # ... of them scoring below 0
    bonus: np.ndarray  # ... of them earning the bonus


class PlayResult(NamedTuple):
    records: GameRecords
    steps: int  # lockstep steps run (one forward per step); the longest device's
    rows: int  # agent rows those forwards ran over (H per step, fewer in the tail phase),
    # summed over devices
    half_lanes: int  # H: lanes per seat on all devices, the rows of every step before the tail
    compile_seconds: float  # tracing and compiling in this call (0 when cached)
    run_seconds: float  # running the compiled evaluation, results on the host
    device_rows: tuple[int, ...] = ()  # each device's share of `rows`, in mesh order


# ----- the jitted loop ---------------------------------------------------------------

_TRACES = 0  # times the loop was traced (tests check that it compiles once)
_COMPILED: dict = {}


def trace_count() -> int:
    """How many times an evaluation loop was traced in this process."""
    return _TRACES


class _Lanes(NamedTuple):
    states: engine.State  # fields [2, H, ...]: row s holds the seat-s lanes
    deal: jax.Array  # [2, H] int32, the deal a lane plays; D when idle or recorded
    decision: jax.Array  # [2, H] int32, decision index within the lane's game
    counts: jax.Array  # [2, H, 4] int32, the agent's PLAY/DISCARD/DRAW_DECK/DRAW_PILE
    history: jax.Array  # [2, H, T] int32, the lane's public moves (T = 0: not kept)
    next_deal: jax.Array  # [2] int32, the next deal of each seat's queue
    step: jax.Array  # [] int32
    records: dict  # name -> [2, D] int32 (the GameRecords fields)


def _bot_actions(rules: Rules, name: str, states, seed, deals, decisions):
    act = functools.partial(jax_bots.bot_action, rules, name)
    return jax.vmap(act, in_axes=(0, None, None, 0, 0))(states, seed, 0, deals, decisions)


def _network_actions(rules, spec, agent: Agent, params, player, states, seed, ids, decisions):
    """The agent's actions [H] in states [H] where it is `player` (traced) and moves."""
    obs = jax.vmap(engine.observe, in_axes=(None, 0, None))(rules, states, player)
    mask = pol.agent_masks(rules, states, agent.draws)
    if agent.kind == "average_strategy":
        probs = mlp.masked_policy(mlp.apply(spec, params, obs), mask)
    else:
        # the agent seated as player s plays advantage network s: run only that one
        raw = jax.lax.cond(
            player == 0,
            lambda: mlp.apply(spec, params[0], obs),
            lambda: mlp.apply(spec, params[1], obs),
        )
        rm = functools.partial(pol.regret_matching, fallback=agent.fallback)
        probs = jax.vmap(rm)(mlp.masked_advantages(raw, mask), mask)
    if agent.mode == "greedy":
        return jax.vmap(pol.greedy_action, in_axes=(0, 0, None))(probs, mask, rules.n_colors)
    bits = rng.random_bits(seed, 0, ids, decisions, rng.Purpose.SAMPLE)
    return jax.vmap(pol.sample_action)(probs, mask, bits)


def _seat_actions(
    rules, spec, agent: Agent, params, player, states, seed, deals, ids, decisions, history
):
    """The actions [H] of `agent` (a view, a bot or a search) moving as `player` in states
    [H]: a bot keys its noise by the deal, a network view and a search by the game id;
    `history` [H, T] holds the games' public moves (T = 0 when no search models its
    opponent)."""
    if agent.search is not None:
        return _search_actions(rules, spec, agent, params, states, seed, ids, decisions, history)
    if agent.kind == "bot":
        return _bot_actions(rules, agent.bot, states, seed, deals, decisions)
    return _network_actions(rules, spec, agent, params, player, states, seed, ids, decisions)


def _search_actions(rules, spec, agent: Agent, params, states, seed, ids, decisions, history):
    """The searching agent's actions [H] in states [H] (one search per lane)."""
    blueprint = agent.bot if agent.kind == "bot" else agent.kind
    one = functools.partial(
        search_lib.search_named,
        rules,
        agent.search,
        blueprint,
        params,
        spec=spec,
        fallback=agent.fallback,
        draws=agent.draws,
    )
    # without an opponent model the history is [H, 0] and the search never reads it
    found = jax.vmap(one, in_axes=(0, None, 0, 0, 0))(states, seed, ids, decisions, history)
    return found.action


def _history_length(rules: Rules, *players) -> int:
    """T of the lanes' public-move histories: the full length where a searching player
    models its opponent (which replays the game), else 0 (nothing kept)."""
    for player in players:
        if isinstance(player, Agent) and player.search is not None:
            if player.search.opponent_model != "none":
                return moves.history_length(rules)
    return 0


def _record(rules: Rules, records: dict, seat: int, states, deal, done, decision, counts):
    """Writes the finished lanes of one seat (states [H]) into the per-game records."""
    opponent = 1 - seat
    scores = states.scores
    returns = jax.vmap(engine.returns, in_axes=(None, 0))(rules, states)
    per_color = jax.vmap(engine.expedition_scores, in_axes=(None, 0))(rules, states)[:, seat]
    cards = (states.expedition_wagers + states.expedition_numbered)[:, seat]
    opened = cards > 0
    values = {
        "margin": returns[:, seat].astype(jnp.int32),
        "agent_score": scores[:, seat],
        "opponent_score": scores[:, opponent],
        "decisions": decision,
        "truncated": states.truncated.astype(jnp.int32),
        "illegal": (states.illegal_player >= 0).astype(jnp.int32),
        "plays": counts[:, PLAY],
        "discards": counts[:, DISCARD],
        "deck_draws": counts[:, DRAW_DECK],
        "pile_draws": counts[:, DRAW_PILE],
        "opened": jnp.sum(opened, axis=1, dtype=jnp.int32),
        "negative": jnp.sum(opened & (per_color < 0), axis=1, dtype=jnp.int32),
        "bonus": jnp.sum(cards >= rules.bonus_threshold, axis=1, dtype=jnp.int32),
    }
    num_deals = next(iter(records.values())).shape[1]
    index = jnp.where(done, deal, num_deals)  # out of range: dropped
    return {
        name: records[name].at[seat, index].set(values[name].astype(jnp.int32), mode="drop")
        for name in records
    }


def _run(rules, spec, agent, opponent, num_deals, half, params, seed, first_deal):
    global _TRACES
    _TRACES += 1
    agent_params, opponent_params = params
    h = rules.hand_size
    # lanes count deals 0..D-1 of this call; the deal they play is first_deal + that
    decks = jax.vmap(engine.deal_order, in_axes=(None, None, 0, None))(
        rules, seed, first_deal + jnp.arange(num_deals, dtype=jnp.int32), 0
    ).astype(jnp.int8)  # [D, N]
    idle = engine.init_from_deck(rules, decks[0]).replace(terminal=jnp.bool_(True))
    span = _history_length(rules, agent, opponent)
    lanes = _Lanes(
        states=jax.tree.map(lambda x: jnp.broadcast_to(x, (2, half) + x.shape), idle),
        deal=jnp.full((2, half), num_deals, jnp.int32),
        decision=jnp.zeros((2, half), jnp.int32),
        counts=jnp.zeros((2, half, 4), jnp.int32),
        history=jnp.full((2, half, span), moves.NO_MOVE, jnp.int32),
        next_deal=jnp.zeros((2,), jnp.int32),
        step=jnp.int32(0),
        records={name: jnp.zeros((2, num_deals), jnp.int32) for name in GameRecords._fields},
    )
    flat = lambda tree: jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)  # noqa: E731
    split = lambda tree: jax.tree.map(lambda x: x.reshape((2, -1) + x.shape[1:]), tree)  # noqa: E731
    row = lambda tree, i: jax.tree.map(lambda x: x[i], tree)  # noqa: E731

    def collect(lanes: _Lanes) -> _Lanes:
        """Records every finished, unrecorded lane and marks it idle."""
        done = lanes.states.terminal & (lanes.deal < num_deals)  # [2, H]
        records = lanes.records
        for s in (0, 1):
            records = _record(
                rules,
                records,
                s,
                row(lanes.states, s),
                lanes.deal[s],
                done[s],
                lanes.decision[s],
                lanes.counts[s],
            )
        return lanes._replace(records=records, deal=jnp.where(done, num_deals, lanes.deal))

    def refill(lanes: _Lanes) -> _Lanes:
        """Records finished games, then deals each seat's next games into its free lanes."""
        lanes = collect(lanes)
        free = lanes.states.terminal  # [2, H]
        new_deal = lanes.next_deal[:, None] + jnp.cumsum(free, axis=1, dtype=jnp.int32) - 1
        take = free & (new_deal < num_deals)
        fresh = jax.vmap(engine.init_from_deck, in_axes=(None, 0))(
            rules, decks[jnp.clip(new_deal, 0, num_deals - 1).reshape(-1)]
        )
        return lanes._replace(
            states=engine.tree_where(take, split(fresh), lanes.states),
            deal=jnp.where(take, new_deal, lanes.deal),
            decision=jnp.where(take, 0, lanes.decision),
            counts=jnp.where(take[..., None], 0, lanes.counts),
            history=jnp.where(take[..., None], moves.NO_MOVE, lanes.history),
            next_deal=lanes.next_deal + jnp.sum(take, axis=1, dtype=jnp.int32),
        )

    def decide(_, lanes: _Lanes) -> _Lanes:
        """One decision: every live game is at player p, the agent moves in the row-0 lanes.

        Within a round, rows are in seat order at the first turn (p = 0) and swapped for
        the second (p = 1), so row 0 always holds the lanes where the agent moves: the
        agent and the bot each read one contiguous block (static slices, no gathers).
        """
        p = (lanes.step // 2) % 2
        mine, theirs = row(lanes.states, 0), row(lanes.states, 1)
        deals = first_deal + lanes.deal
        # game ids 2g + s, s the agent's seat: p in row 0, 1 - p in row 1
        mine_actions = _seat_actions(
            rules,
            spec,
            agent,
            agent_params,
            p,
            mine,
            seed,
            deals[0],
            2 * deals[0] + p,
            lanes.decision[0],
            lanes.history[0],
        )
        if isinstance(opponent, Agent):
            their_actions = _seat_actions(
                rules,
                spec,
                opponent,
                opponent_params,
                p,
                theirs,
                seed,
                deals[1],
                2 * deals[1] + 1 - p,
                lanes.decision[1],
                lanes.history[1],
            )
        else:
            their_actions = _bot_actions(rules, opponent, theirs, seed, deals[1], lanes.decision[1])
        kind = jnp.where(
            mine_actions < h,
            PLAY,
            jnp.where(
                mine_actions < 2 * h,
                DISCARD,
                jnp.where(mine_actions == 2 * h, DRAW_DECK, DRAW_PILE),
            ),
        )
        tally = ((kind[:, None] == jnp.arange(4)) & ~mine.terminal[:, None]).astype(jnp.int32)
        live = ~lanes.states.terminal
        actions = jnp.concatenate([mine_actions, their_actions])
        stepped = jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, flat(lanes.states), actions)
        history = lanes.history
        if span:  # static: the loop without an opponent model records nothing
            history = split(
                jax.vmap(moves.record, in_axes=(None, 0, 0, 0))(
                    rules, flat(lanes.history), flat(lanes.states), actions
                )
            )
        return lanes._replace(
            states=split(stepped),
            history=history,
            decision=lanes.decision + live,
            counts=lanes.counts.at[0].add(tally),
            step=lanes.step + 1,
        )

    def swap(lanes: _Lanes) -> _Lanes:
        """Exchanges the two rows of lanes: the other seat's agent moves next turn."""
        rows = lambda x: x[::-1]  # noqa: E731
        return lanes._replace(
            states=jax.tree.map(rows, lanes.states),
            deal=rows(lanes.deal),
            decision=rows(lanes.decision),
            counts=rows(lanes.counts),
            history=rows(lanes.history),
        )

    def turn(_, lanes: _Lanes) -> _Lanes:
        """A turn of every live game (two decisions of its player p), then the swap."""
        return swap(jax.lax.fori_loop(0, 2, decide, lanes))

    def one_round(lanes: _Lanes) -> _Lanes:
        """Refill (the step is divisible by 4, rows in seat order), then two turns."""
        terminal = lanes.states.terminal
        waiting = jnp.any(terminal, axis=1) & (lanes.next_deal < num_deals)
        needs = jnp.any(waiting) | jnp.any(terminal & (lanes.deal < num_deals))
        lanes = jax.lax.cond(needs, refill, lambda x: x, lanes)
        return jax.lax.fori_loop(0, 2, turn, lanes)

    def compact(lanes: _Lanes, size: int) -> _Lanes:
        """Keeps `size` lanes per seat, the live ones first (all of them, by `busy`)."""
        lanes = collect(lanes)
        keep = jnp.argsort(lanes.states.terminal, axis=1, stable=True)[:, :size]  # [2, size]

        def gather(x):
            index = keep.reshape(keep.shape + (1,) * (x.ndim - 2))
            return jnp.take_along_axis(x, index, axis=1)

        return lanes._replace(
            states=jax.tree.map(gather, lanes.states),
            deal=gather(lanes.deal),
            decision=gather(lanes.decision),
            counts=gather(lanes.counts),
            history=gather(lanes.history),
        )

    # Phases of shrinking width: once every deal has started and at most `next` games per
    # seat are still running, the rest finish in a narrower loop instead of idling lanes.
    rows = jnp.int32(0)
    sizes = _phase_sizes(half)
    for k, size in enumerate(sizes):
        narrower = sizes[k + 1] if k + 1 < len(sizes) else 0

        def busy(lanes: _Lanes, narrower=narrower):
            running = jnp.sum(~lanes.states.terminal, axis=1)
            return jnp.any(lanes.next_deal < num_deals) | jnp.any(running > narrower)

        if k:
            lanes = compact(lanes, size)
        start = lanes.step
        lanes = jax.lax.while_loop(busy, one_round, lanes)
        rows = rows + (lanes.step - start) * size
    lanes = collect(lanes)
    return lanes.records, lanes.step, rows


def _run_blocks(rules, spec, agent, opponent, block, half, mesh, params, seed, first_deal):
    """`_run` on every device of `mesh`, device d playing deals first_deal + d * block ...;
    the records [2, D * block] (device blocks in mesh order), the longest loop's steps,
    the total rows and every device's rows [D], replicated on every device."""

    def one(params, seed, first_deal):
        index = jax.lax.axis_index(sharding.AXIS)
        records, steps, rows = _run(
            rules, spec, agent, opponent, block, half, params, seed, first_deal + index * block
        )
        records = {
            name: jax.lax.all_gather(x, sharding.AXIS, axis=1, tiled=True)
            for name, x in records.items()
        }
        steps, rows, device_rows = (
            jax.lax.pmax(steps, sharding.AXIS),
            jax.lax.psum(rows, sharding.AXIS),
            sharding.per_device(rows),
        )
        return records, steps, rows, device_rows

    # The gather and the reductions replicate the outputs, which the replication check
    # does not infer (it counts all_gather's as varying).
    return jax.shard_map(one, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False)(
        params, seed, first_deal
    )


def _phase_sizes(half: int) -> tuple[int, ...]:
    """Lanes per seat of each phase: H, then narrower ones for the tail.

    Simulated on recorded game lengths, H -> H/4 uses 85-92% of the forward rows where
    one phase uses 72-85% (games/lanes = 1..4); H -> H/2 -> H/8 adds another 2-4%.
    """
    if half >= 64:
        return (half, half // 2, half // 8)
    if half >= 8:
        return (half, half // 4)
    return (half,)


def _signature(tree) -> tuple:
    leaves, treedef = jax.tree.flatten(tree)

    def describe(x):
        dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
        return np.shape(x), np.dtype(dtype).name, bool(getattr(x, "weak_type", False))

    return treedef, tuple(describe(x) for x in leaves)


def check_games(games, lanes=None, *, games_field="games", lanes_field="lanes") -> tuple[int, int]:
    """(deals, lanes per seat) for `games` games; raises ValueError naming the field."""
    if not isinstance(games, int | np.integer) or isinstance(games, bool) or games < 2:
        raise ValueError(f"{games_field} must be an even int >= 2, got {games!r}")
    if games % 2:
        raise ValueError(
            f"{games_field} must be even (every deal is played twice, seats swapped), got {games}"
        )
    if lanes is None:
        lanes = DEFAULT_LANES
    if not isinstance(lanes, int | np.integer) or isinstance(lanes, bool) or lanes < 2:
        raise ValueError(f"{lanes_field} must be an even int >= 2, got {lanes!r}")
    if lanes % 2:
        raise ValueError(f"{lanes_field} must be even (half of the lanes per seat), got {lanes}")
    deals = int(games) // 2
    return deals, min(int(lanes) // 2, deals)


def _checked_params(rules: Rules, spec, agent: Agent, params):
    """The parameters `agent` plays with, checked: () for a bot."""
    if agent.search is not None:
        search_lib.check_options(agent.search, rules)
    if agent.kind == "bot":
        return ()
    if spec is None:
        raise ValueError("a network agent needs the network spec")
    if agent.kind == "current":
        if not isinstance(params, tuple | list) or len(params) != 2:
            raise ValueError("the `current` view takes the pair of advantage networks' params")
        return tuple(params)
    return params


def play(
    rules: Rules,
    spec: mlp.NetworkSpec | None,
    agent: Agent,
    opponent: str | Agent,
    params: Any,
    *,
    games: int,
    seed: int = 0,
    lanes: int | None = None,
    first_deal: int = 0,
    devices: int | None = None,
    opponent_params: Any = None,
) -> PlayResult:
    """Plays `games` mirrored games of `agent` against `opponent`, a bot or (head to head)
    another agent.

    Args:
      rules: the game variant.
      spec: the network shape (None for a bot agent).
      agent: from `network_agent` or `bot_agent`.
      opponent: a bot name, or an Agent (head to head: a view of the same network shape,
        a bot or a search; `opponent_params` its parameters as `params` are the agent's).
      params: the agent's parameters: the strategy network's for `average_strategy`, the
        pair (player 0's, player 1's) advantage networks' for `current`, None for a bot.
      games: even number of games (games / 2 deals, each played in both seats).
      seed: the evaluation seed (deals and sampled actions).
      lanes: games in flight at once (even; DEFAULT_LANES when None, capped at `games`).
      first_deal: the deals played are first_deal .. first_deal + games/2 - 1 (the records
        count them from 0); a block of deals, so that views made of several networks can
        give each one its own deals with one compiled loop.
      devices: devices the deals are split over (default: every device of every
        process; with several processes, every process must make the same call).

    Returns:
      PlayResult with per-game records (numpy) and timings.
    """
    deals, half = check_games(games, lanes)
    params = _checked_params(rules, spec, agent, params)
    if isinstance(opponent, Agent):
        opponent_params = _checked_params(rules, spec, opponent, opponent_params)
    else:
        check_bot_name(opponent, "opponent")
        opponent_params = ()
    if agent.kind == "bot" and not (isinstance(opponent, Agent) and opponent.kind != "bot"):
        spec = None  # no network plays: one compiled loop whatever the spec
    params = (params, opponent_params)
    devices = sharding.device_count(devices)
    seed_word = jnp.asarray(rng.as_word(seed), jnp.uint32)
    if sharding.sharded(devices):
        block = -(-deals // devices)
        half = max(1, min((DEFAULT_LANES if lanes is None else lanes) // 2 // devices, block))
        mesh = sharding.lanes_mesh(devices)
        fn = functools.partial(_run_blocks, rules, spec, agent, opponent, block, half, mesh)
        args = sharding.replicate((params, seed_word, jnp.int32(first_deal)), mesh)
    else:
        mesh = None
        fn = functools.partial(_run, rules, spec, agent, opponent, deals, half)
        args = (params, seed_word, jnp.int32(first_deal))
    key = (rules, spec, agent, opponent, deals, half, mesh, _signature(params))
    compiled, compile_seconds = _COMPILED.get(key), 0.0
    if compiled is None:
        start = time.perf_counter()
        compiled = jax.jit(fn).lower(*args).compile()
        _COMPILED[key] = compiled
        compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    if mesh is not None:
        records, steps, rows, device_rows = sharding.local_copy(compiled(*args))
    else:
        records, steps, rows = compiled(*args)
        device_rows = rows[None]
    records = jax.device_get(records)
    run_seconds = time.perf_counter() - start
    out = {name: np.asarray(records[name])[:, :deals] for name in GameRecords._fields}
    for name in ("truncated", "illegal"):
        out[name] = out[name].astype(bool)
    return PlayResult(
        GameRecords(**out),
        int(steps),
        int(rows),
        half * devices,
        compile_seconds,
        run_seconds,
        tuple(int(x) for x in jax.device_get(device_rows)),
    )
