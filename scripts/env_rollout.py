"""Random rollouts, and an mctx search, through the pgx-style environment.

Two examples of `lc_cfr.game.env.LostCitiesEnv`:

1. A jitted, vmapped rollout of `--games` games with uniformly random legal actions,
   timed after a first (compiling) call; prints games/s, decisions/s and the mean returns.
2. If `mctx` is importable, Gumbel MuZero search (`mctx.gumbel_muzero_policy`, Danihelka
   et al. 2022) playing `--search-games` games against a bot of `lc_cfr.bots.jax_bots`,
   seats alternating, next to a uniformly random agent on the same deals; prints the
   mean margins. Without mctx it says `pip install mctx` and exits 0.

The search is an example of the API, not a fair or strong agent. Search through the
environment is perfect-information search: stepping a state reveals the opponent's hand
and the deck order. To avoid reading the hidden cards outright, every decision searches
one determinised world (`LostCitiesEnv.resample_hidden`: the opponent's unseen cards and
the deck redrawn uniformly from what the agent saw). Within that world the tree still
sees everything, so it plans as if the sample were the truth (strategy fusion), and one
sample per decision is noisy. There is no network: the prior is uniform over legal
actions and a leaf is valued by one random playout (`--leaf-value rollout`) or 0.

    .venv/bin/python scripts/env_rollout.py [--games 4096] [--search-games 8]
        [--simulations 32] [--opponent safe_heuristic] [--rule hand_size=5 ...]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr import compile_cache
from lc_cfr.bots import BOT_NAMES, jax_bots
from lc_cfr.game.env import EnvState, LostCitiesEnv
from lc_cfr.game.rules import Rules

try:
    import mctx
except ImportError:  # the search example is optional; the rollout needs only lc_cfr
    mctx = None


def _over(states: EnvState) -> jax.Array:
    return states.terminated | states.truncated


def random_actions(key: jax.Array, mask: jax.Array) -> jax.Array:
    """A uniformly random legal action per row of `mask` [B, A]."""
    # Rows are never all false: the env's mask is all true once a game is over.
    return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)


def play_out(env: LostCitiesEnv, states: EnvState, key: jax.Array):
    """Plays a batch of games to the end with random legal actions.

    Args:
      env: the environment.
      states: [B] batched `EnvState`s, finished or not.
      key: a PRNG key.

    Returns:
      (final states, [B, 2] float32 rewards earned from `states` on).
    """

    def body(carry):
        states, key, total = carry
        key, pick = jax.random.split(key)
        states = jax.vmap(env.step)(states, random_actions(pick, states.legal_action_mask))
        return states, key, total + states.rewards

    total = jnp.zeros(states.rewards.shape, jnp.float32)
    # A finished game steps as a no-op, so the loop may run until the longest one ends.
    states, _, total = jax.lax.while_loop(
        lambda carry: ~jnp.all(_over(carry[0])), body, (states, key, total)
    )
    return states, total


def rollout_benchmark(env: LostCitiesEnv, games: int, seed: int) -> dict:
    """Times random play of `games` games from keyed deals, one jitted call."""

    @jax.jit
    def rollout(key):
        deal, play = jax.random.split(key)
        states = jax.vmap(env.init)(jax.random.split(deal, games))
        final, total = play_out(env, states, play)
        return total, final._step_count, final.truncated

    start = time.perf_counter()
    jax.block_until_ready(rollout(jax.random.key(seed + 1)))  # compiles
    first_call = time.perf_counter() - start
    start = time.perf_counter()
    total, steps, truncated = jax.block_until_ready(rollout(jax.random.key(seed)))
    seconds = time.perf_counter() - start
    decisions = int(np.sum(steps))
    return {
        "games": games,
        "seconds": seconds,
        "first_call_seconds": first_call,
        "games_per_second": games / seconds,
        "decisions": decisions,
        "decisions_per_second": decisions / seconds,
        "mean_returns": np.asarray(total).mean(axis=0).tolist(),
        "truncated_fraction": float(np.mean(truncated)),
    }


def _search_action(env: LostCitiesEnv, states: EnvState, key, simulations: int, leaf_value: str):
    """Gumbel MuZero's action for the player to move in each of a batch of games."""
    batch = states.current_player.shape[0]
    rows = jnp.arange(batch)

    def value(states: EnvState, key) -> jax.Array:
        """The leaf value for the player to move: a random playout's reward, or 0."""
        if leaf_value == "zero":
            return jnp.zeros((batch,), jnp.float32)
        _, total = play_out(env, states, key)
        return total[rows, states.current_player]  # 0 for a finished game

    def recurrent_fn(params, key, action, embedding: EnvState):
        del params
        mover = embedding.current_player
        after = jax.vmap(env.step)(embedding, action)
        # mctx adds reward + discount * child value; values are the mover's at each node,
        # so the discount flips the sign when the turn passes, and 0 ends the game. A card
        # action keeps the same player on move (the draw follows).
        same = after.current_player == mover
        discount = jnp.where(_over(after), 0.0, jnp.where(same, 1.0, -1.0))
        output = mctx.RecurrentFnOutput(
            reward=after.rewards[rows, mover],
            discount=discount.astype(jnp.float32),
            prior_logits=jnp.where(after.legal_action_mask, 0.0, -1e9),
            value=value(after, key),
        )
        return output, after

    world_key, value_key, search_key = jax.random.split(key, 3)
    worlds = jax.vmap(env.resample_hidden)(states, jax.random.split(world_key, batch))
    root = mctx.RootFnOutput(
        prior_logits=jnp.zeros(states.legal_action_mask.shape, jnp.float32),
        value=value(worlds, value_key),
        embedding=worlds,
    )
    policy = mctx.gumbel_muzero_policy(
        params=None,
        rng_key=search_key,
        root=root,
        recurrent_fn=recurrent_fn,
        num_simulations=simulations,
        invalid_actions=~states.legal_action_mask,
    )
    return policy.action.astype(jnp.int32)


def play_against_bot(
    env: LostCitiesEnv,
    agent: str,
    opponent: str,
    games: int,
    seed: int,
    simulations: int,
    leaf_value: str,
) -> np.ndarray:
    """Plays `agent` ("search" or "random") against bot `opponent`, seat = game % 2.

    Returns:
      ([games] the agent's margin in points per game, seconds of the first (compiling)
      decision, seconds of the other decisions).
    """
    seats = jnp.arange(games) % 2

    @jax.jit
    def decide(states: EnvState, key):
        if agent == "search":
            mine = _search_action(env, states, key, simulations, leaf_value)
        else:
            mine = random_actions(key, states.legal_action_mask)
        # The bot's randomness is the project's counter-based stream, one per game.
        theirs = jax_bots.batch_bot_action(
            env.rules, opponent, states.engine_state, seed, 0, jnp.arange(games), states._step_count
        )
        action = jnp.where(states.current_player == seats, mine, theirs)
        states = jax.vmap(env.step)(states, action)
        return states, states.rewards

    # The same deals for every agent: they depend on the seed only.
    states = jax.jit(jax.vmap(env.init))(jax.random.split(jax.random.key(seed), games))
    key = jax.random.key(seed + 1)
    total = np.zeros((games, 2), np.float32)
    times = []
    while not bool(jnp.all(_over(states))):
        start = time.perf_counter()
        key, now = jax.random.split(key)
        states, rewards = decide(states, now)
        total += np.asarray(rewards)  # waits for the step
        times.append(time.perf_counter() - start)
    margins = total[np.arange(games), np.asarray(seats)]
    return margins, times[0], sum(times[1:])


def _margin_summary(margins: np.ndarray) -> dict:
    return {
        "mean_margin": float(margins.mean()),
        "wins": int((margins > 0).sum()),
        "draws": int((margins == 0).sum()),
        "losses": int((margins < 0).sum()),
    }


def search_example(env: LostCitiesEnv, args) -> dict:
    play = functools.partial(
        play_against_bot,
        env,
        opponent=args.opponent,
        games=args.search_games,
        seed=args.seed,
        simulations=args.simulations,
        leaf_value=args.leaf_value,
    )
    search, first_call, seconds = play("search")
    baseline, _, _ = play("random")
    return {
        "policy": "mctx.gumbel_muzero_policy",
        "mctx": mctx.__version__,
        "opponent": args.opponent,
        "games": args.search_games,
        "simulations": args.simulations,
        "leaf_value": args.leaf_value,
        "root": "one determinised world per decision",
        "first_decision_seconds": first_call,
        "seconds": seconds,
        "search": _margin_summary(search),
        "random_agent_same_deals": _margin_summary(baseline),
    }


def _rules(overrides: list[str]) -> Rules:
    fields = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--rule wants FIELD=VALUE, got {item!r}")
        try:
            fields[name] = int(value)
        except ValueError:
            raise SystemExit(f"--rule {name} wants an integer, got {value!r}") from None
    try:
        return Rules.from_mapping(fields)
    except ValueError as error:
        raise SystemExit(f"--rule: {error}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=4096, help="random-rollout batch")
    parser.add_argument("--search-games", type=int, default=8, help="0 skips the search")
    parser.add_argument("--simulations", type=int, default=32)
    parser.add_argument("--leaf-value", choices=("rollout", "zero"), default="rollout")
    parser.add_argument("--opponent", choices=BOT_NAMES, default="safe_heuristic")
    parser.add_argument("--rule", action="append", default=[], help="FIELD=VALUE of Rules")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    if args.games < 1 or args.search_games < 0 or args.simulations < 1:
        raise SystemExit("--games and --simulations must be >= 1, --search-games >= 0")

    compile_cache.enable(compile_cache.directory(default=None))
    env = LostCitiesEnv(_rules(args.rule))
    summary = {
        "rules": env.rules.to_dict(),
        "env": f"{env.id}/{env.version}",
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }

    rollout = rollout_benchmark(env, args.games, args.seed)
    summary["rollout"] = rollout
    mean = rollout["mean_returns"]
    print(
        f"random rollout: {rollout['games']} games in {rollout['seconds']:.3f} s "
        f"({rollout['games_per_second']:,.0f} games/s, "
        f"{rollout['decisions_per_second']:,.0f} decisions/s; first call "
        f"{rollout['first_call_seconds']:.1f} s), mean returns [{mean[0]:+.2f}, {mean[1]:+.2f}], "
        f"truncated {rollout['truncated_fraction']:.1%}"
    )

    summary["search"] = None
    if mctx is None:
        summary["search_skipped"] = "mctx is not installed"
        print("search example skipped: it needs `pip install mctx`")
    elif args.search_games == 0:
        summary["search_skipped"] = "--search-games=0"
    else:
        search = search_example(env, args)
        summary["search"] = search
        result, base = search["search"], search["random_agent_same_deals"]
        print(
            f"gumbel muzero ({search['simulations']} simulations, {search['leaf_value']} "
            f"leaves, determinised root) vs {search['opponent']} over {search['games']} games: "
            f"mean margin {result['mean_margin']:+.1f} points "
            f"({result['wins']}W {result['draws']}D {result['losses']}L, "
            f"{search['seconds']:.1f} s after a {search['first_decision_seconds']:.1f} s compile); "
            f"random agent on the same deals: "
            f"{base['mean_margin']:+.1f}"
        )

    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
