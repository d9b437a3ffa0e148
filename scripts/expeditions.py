"""Yardstick: where does a trained policy open expeditions, and how do they end?

Plays a policy view of a run's checkpoint against a bot, both seats of every deal, and
follows each expedition the agent opens to the end of the game: how much of the deck was
left when it opened it, and what the expedition scored. A policy that opens everything
at once and ends below zero loses to `passive_discard` however well it denies; this
script says whether the fault is the opening or the play after it
(docs/experiments.md section 7). It also counts the agent's plays and discards a game and
its plays that give up a lower card of its own hand (a card of the played colour, below
the played one, that it could still have played: it is blocked from then on), and can
play a bot in the agent's seat instead (`--agent-bot`, the same counts for comparison)
or hold the agent to at most K open expeditions (`--max-expeditions`, a what-if: plays
that would open one more are masked; section 30).

    .venv/bin/python scripts/expeditions.py --workdir RUN [--view average_strategy]
        [--opponent passive_discard] [--deals 100] [--checkpoint N] [--json out.json]
        [--agent-bot safe_heuristic] [--max-expeditions 4]

Greedy play of the view, as the evaluator plays it (`policy.greedy_action` of the average
strategy's or the current policy's distribution). Deals are `engine.init(rules, 7, g)`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lc_cfr.bots import BOT_NAMES  # noqa: E402
from lc_cfr.bots.jax_bots import bot_action  # noqa: E402
from lc_cfr.game import engine  # noqa: E402
from lc_cfr.game.rules import CARD_PHASE  # noqa: E402
from lc_cfr.nets import mlp  # noqa: E402
from lc_cfr.train.saved_networks import load_saved_networks  # noqa: E402
from lc_cfr.traversal import policy as pol  # noqa: E402

VIEWS = ("average_strategy", "current")
DECK_BUCKETS = (0, 4, 8, 12, 16, 20, 1000)  # cards left in the deck when opened


def _opening_plays(rules, state, me):
    """[H] bool: the hand slots whose play would open an expedition of `me`."""
    opened = (state.expedition_numbered[me] + state.expedition_wagers[me]) > 0  # [C]
    cards = jnp.minimum(state.hands[me], rules.n_cards - 1)  # an empty slot is no play
    return ~opened[cards // rules.cards_per_color]


def _strands(rules, state, me, slot: int) -> bool:
    """Whether playing hand slot `slot` blocks another card of the hand still playable."""
    k, w = rules.cards_per_color, rules.n_wagers
    card = int(state.hands[me, slot])
    colour, within = divmod(card, k)
    top = int(state.expedition_top[me, colour])  # rank index of the highest numbered, -1

    def playable(other: int) -> bool:  # a wager while nothing numbered, or above the top
        return other % k - w > top if other % k >= w else top < 0

    return within >= w and any(
        c // k == colour and c % k < within and playable(c)
        for c in (int(c) for c in np.asarray(state.hands[me]))
        if c < rules.n_cards and c != card
    )


def play(
    saved, view: str, opponent: str, deals: int, agent_bot: str = "", max_expeditions: int = 0
) -> dict:
    """Openings (deck left, final expedition score), own scores and the agent's plays,
    discards and stranding plays over 2 x deals games."""
    rules, spec = saved.rules, saved.spec
    hand = rules.hand_size
    cap = max_expeditions or rules.n_colors

    @jax.jit
    def agent(params, state):
        me = state.current_player
        obs = engine.observe(rules, state, me)
        mask = pol.agent_mask(rules, state, saved.config.draws)
        opened = jnp.sum((state.expedition_numbered[me] + state.expedition_wagers[me]) > 0)
        capped = (state.phase == CARD_PHASE) & (opened >= cap)
        mask = mask.at[:hand].set(mask[:hand] & ~(capped & _opening_plays(rules, state, me)))
        raw = mlp.apply(spec, params, obs[None])[0]
        if view == "current":
            probs = pol.regret_matching(raw, mask, fallback="argmax_tiebreak")
        else:
            probs = mlp.masked_policy(raw, mask)
        return pol.greedy_action(probs, mask, rules.n_colors)

    step = jax.jit(lambda state, action: engine.step(rules, state, action))
    bot = jax.jit(lambda state, g, d: bot_action(rules, opponent, state, 0, 0, g, d))
    # iteration word 1: the agent's seat draws other noise than the opponent's
    seat_bot = agent_bot and jax.jit(
        lambda state, g, d: bot_action(rules, agent_bot, state, 0, 1, g, d)
    )
    openings, own_scores, plays, discards, strands = [], [], 0, 0, 0
    for deal in range(deals):
        for seat in (0, 1):
            state = engine.init(rules, 7, deal)
            params = saved.advantage[seat] if view == "current" else saved.strategy
            opened, decision = [], 0
            while not bool(state.terminal):
                if int(state.current_player) == seat:
                    if seat_bot:
                        action = int(seat_bot(state, jnp.int32(deal), jnp.int32(decision)))
                    else:
                        action = int(agent(params, state))
                    if int(state.phase) == CARD_PHASE:
                        discards += action >= hand
                    if int(state.phase) == CARD_PHASE and action < hand:
                        plays += 1
                        strands += _strands(rules, state, seat, action)
                        colour = rules.card_color(int(state.hands[seat, action]))
                        cards = int(state.expedition_numbered[seat, colour]) + int(
                            state.expedition_wagers[seat, colour]
                        )
                        if cards == 0:
                            opened.append((rules.n_cards - int(state.deck_pos), colour))
                else:
                    action = int(bot(state, jnp.int32(deal), jnp.int32(decision)))
                state = step(state, action)
                decision += 1
            final = np.asarray(engine.expedition_scores(rules, state))[seat]
            openings += [(left, int(final[colour])) for left, colour in opened]
            own_scores.append(int(final.sum()))
    return {
        "openings": openings,
        "own_scores": own_scores,
        "plays": plays,
        "discards": discards,
        "strands": strands,
    }


def summarize(result: dict) -> dict:
    openings = np.array(result["openings"], dtype=np.int64).reshape(-1, 2)
    games = len(result["own_scores"])
    buckets = []
    for low, high in zip(DECK_BUCKETS[:-1], DECK_BUCKETS[1:], strict=True):
        chosen = openings[(openings[:, 0] >= low) & (openings[:, 0] < high)]
        if len(chosen):
            buckets.append(
                {
                    "deck_left_from": low,
                    "deck_left_to": high - 1,
                    "openings": len(chosen),
                    "mean_final_score": float(chosen[:, 1].mean()),
                    "negative_share": float(np.mean(chosen[:, 1] < 0)),
                }
            )
    return {
        "games": games,
        "openings_per_game": len(openings) / max(games, 1),
        "negative_share": float(np.mean(openings[:, 1] < 0)) if len(openings) else 0.0,
        "own_score_mean": float(np.mean(result["own_scores"])),
        "plays_per_game": result["plays"] / max(games, 1),
        "discards_per_game": result["discards"] / max(games, 1),
        "stranding_plays_per_game": result["strands"] / max(games, 1),
        "by_deck_left": buckets,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="the run directory")
    parser.add_argument("--view", choices=VIEWS, default="average_strategy")
    parser.add_argument("--opponent", choices=BOT_NAMES, default="passive_discard")
    parser.add_argument("--deals", type=int, default=100, help="each played in both seats")
    parser.add_argument("--checkpoint", type=int, default=None, help="default: the latest")
    parser.add_argument("--json", default=None, help="write the summary here")
    parser.add_argument(
        "--agent-bot", choices=BOT_NAMES, default="", help="play this bot in the agent's seat"
    )
    parser.add_argument(
        "--max-expeditions", type=int, default=0, help="what-if: at most K open (0 = no cap)"
    )
    args = parser.parse_args()
    if args.deals < 1:
        parser.error("--deals must be >= 1")
    if args.max_expeditions < 0:
        parser.error("--max-expeditions must be >= 0")
    if args.agent_bot and args.max_expeditions:
        parser.error("--max-expeditions caps the trained agent; not with --agent-bot")
    try:
        saved = load_saved_networks(args.workdir, args.checkpoint)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    if saved.strategy_note():
        print(f"note: {saved.strategy_note()}", file=sys.stderr)
    result = play(saved, args.view, args.opponent, args.deals, args.agent_bot, args.max_expeditions)
    summary = summarize(result)
    agent = args.agent_bot or args.view
    summary.update(
        workdir=args.workdir,
        checkpoint=saved.iteration,
        view=args.view,
        opponent=args.opponent,
        agent_bot=args.agent_bot,
        max_expeditions=args.max_expeditions,
    )
    capped = f" (at most {args.max_expeditions} open)" if args.max_expeditions else ""
    print(
        f"{args.workdir} checkpoint {saved.iteration}, {agent}{capped} vs {args.opponent}: "
        f"{summary['openings_per_game']:.2f} expeditions opened a game, "
        f"{summary['negative_share']:.0%} end negative, own score {summary['own_score_mean']:+.2f}"
    )
    print(
        f"  a game: {summary['plays_per_game']:.1f} plays, {summary['discards_per_game']:.1f} "
        f"discards, {summary['stranding_plays_per_game']:.2f} plays that give up a lower card "
        "of the hand"
    )
    for row in summary["by_deck_left"]:
        print(
            f"  deck left {row['deck_left_from']:2d}-{min(row['deck_left_to'], 99):2d}: "
            f"{row['openings']:4d} openings, final score {row['mean_final_score']:+6.1f}, "
            f"{row['negative_share']:.0%} negative"
        )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
