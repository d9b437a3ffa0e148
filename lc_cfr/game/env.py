"""A pgx-style environment over the JAX engine (`lc_cfr.game.engine`).

Pgx (Koyamada et al. 2023, "Pgx: Hardware-Accelerated Parallel Game Simulators for
Reinforcement Learning", NeurIPS Datasets and Benchmarks) gives every game the same small
API so that one RL or search loop (e.g. AlphaZero with `mctx`) runs on any of them.
`LostCitiesEnv` puts the engine behind that API:

    env = LostCitiesEnv(Rules())
    state = jax.jit(jax.vmap(env.init))(jax.random.split(key, 1024))
    state = jax.jit(jax.vmap(env.step))(state, actions)

Followed from pgx:

- `init(key) -> EnvState` and `step(state, action, key=None) -> EnvState`, pure and
  jittable, per game (vmap outside); `observe(state, player)`; the properties `id`,
  `version`, `num_players`, `num_actions`, `observation_shape`.
- The state carries `current_player`, `observation` (of the player to move),
  `legal_action_mask`, `rewards`, `terminated`, `truncated` and `_step_count`.
- `rewards` [2] is what each player earns on this step: zero until the step that ends
  the game, which pays the engine's `returns` (score difference in points). The sum of
  the rewards of an episode is therefore the engine's return of its final state.
- Stepping a finished (terminated or truncated) state returns it unchanged with zero
  rewards, whatever the action.
- Once the game is over `legal_action_mask` is all true, as in pgx, so that a policy
  normalised over the mask never divides by zero; before that it is the engine's mask.
- An illegal action (masked off or out of range) ends the game: `terminated` is set and
  the mover loses. We keep the engine's penalty (`engine.step` and `engine.returns`):
  the mover gets `-ILLEGAL_ACTION_PENALTY` (1000 points) and the opponent `+1000`, where
  pgx pays -1 and +1; the game is zero-sum in points, so the penalty is in points too.

Where it differs, and why:

- `init(key)` shuffles the deck with `jax.random.permutation(key, N)` and deals with
  `engine.init_from_deck`. This is pgx's keyed deal, and it is NOT the trainer's deal:
  the trainer and evaluation deal game `g` of `(seed, iteration)` with the shared
  counter-based generator (`engine.init`, `rng.Purpose.DEAL`), which the Cython engine
  reproduces bit for bit; a key's deal is unrelated to those. To play the trainer's
  deals through the env, wrap them: `env.from_engine_state(engine.init(rules, seed, g))`.
- `step` ignores `key`: chance is fixed by the deck order at the deal, so the dynamics
  are deterministic (pgx likewise takes the key only for stochastic games).
- `truncated` means the engine's `max_turns` cap ended the game (docs/game.md, "Why
  max_turns"). Such a game is over, like a terminated one: it pays its standing score
  difference, as the engine and the trainer score it, rather than leaving a value to
  bootstrap. `terminated` and `truncated` are never both set.
- Player 0 always moves first (the engine's rule). Pgx shuffles the seats of many
  two-player games at `init`; here an agent that should learn both seats must be given
  both (mirror the games).
- `rewards` are in points, not pgx's win/draw/loss in {-1, 0, 1}: Lost Cities is scored,
  and the project's utility is the score difference (the trainer divides by
  `utility_scale`).
- The observation is the engine's information-state encoding, [8N + 7C + 5] float32
  (docs/game.md), a vector rather than pgx's board planes. It hides the opponent's hand
  and the deck order; the full `engine_state` (a public field, where pgx keeps its game
  state private in `_x`) does not, because the project's bots and tools read it.
  `resample_hidden` redraws what the player to move cannot see (a determinisation), for
  search that should not peek.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from lc_cfr.game import determinize, engine
from lc_cfr.game.rules import Rules


@struct.dataclass
class EnvState:
    """One game in pgx's layout. E = encoding size, A = actions, N cards (docs/game.md)."""

    current_player: jax.Array  # [] int32, the player to move
    observation: jax.Array  # [E] float32, engine.observe for current_player
    legal_action_mask: jax.Array  # [A] bool, all true once the game is over
    rewards: jax.Array  # [2] float32, points earned on the last step
    terminated: jax.Array  # [] bool, the game ended (deck empty or an illegal action)
    truncated: jax.Array  # [] bool, the game was cut at rules.max_turns
    _step_count: jax.Array  # [] int32, steps taken before the game ended
    engine_state: engine.State  # the full game, hidden information included

    @property
    def env_id(self) -> str:
        return LostCitiesEnv.id


class LostCitiesEnv:
    """Lost Cities for one rules variant, with pgx's `init` / `step` / `observe`.

    Every method is a pure function of its array arguments (the rules are static), so
    it can be jitted and vmapped; write per-game code and vmap it.
    """

    id = "lost_cities"
    version = "v0"

    def __init__(self, rules: Rules | None = None):
        self.rules = Rules() if rules is None else rules

    @property
    def num_players(self) -> int:
        return 2

    @property
    def num_actions(self) -> int:
        return self.rules.num_actions

    @property
    def observation_shape(self) -> tuple[int, ...]:
        return (self.rules.encoding_size,)

    def __repr__(self) -> str:
        return f"LostCitiesEnv({self.rules!r})"

    def init(self, key: jax.Array) -> EnvState:
        """Deals a game from a JAX PRNG key (not the trainer's seed/game_index deal).

        Args:
          key: a PRNG key (typed or raw uint32[2]); it decides the whole deck order.

        Returns:
          The initial `EnvState`, player 0 to move.
        """
        deck = jax.random.permutation(key, self.rules.n_cards)
        return self.from_engine_state(engine.init_from_deck(self.rules, deck))

    def from_engine_state(self, x: engine.State) -> EnvState:
        """Wraps an engine state (e.g. an `engine.init` deal): zero rewards, step count 0."""
        return self._wrap(x, jnp.zeros((2,), jnp.float32), jnp.int32(0))

    def step(self, state: EnvState, action, key: jax.Array | None = None) -> EnvState:
        """Applies `action` for the player to move.

        Args:
          state: the current `EnvState`.
          action: [] int, an action id in [0, num_actions).
          key: unused; the deal fixed every chance outcome (pgx passes it to stochastic
            games only).

        Returns:
          The next state. A finished state comes back unchanged with zero rewards; an
          illegal action ends the game with the mover charged the illegal-action penalty.
        """
        del key
        before = state.engine_state
        after = engine.step(self.rules, before, action)
        # The engine returns a finished state unchanged, so `ended` is false there and the
        # no-op pays nothing; only the step that finishes the game pays the returns.
        ended = after.terminal & ~before.terminal
        rewards = jnp.where(ended, engine.returns(self.rules, after), jnp.float32(0))
        step_count = state._step_count + (~before.terminal).astype(jnp.int32)
        return self._wrap(after, rewards, step_count)

    def observe(self, state: EnvState, player) -> jax.Array:
        """The information-state encoding of `player`, [E] float32 (docs/game.md)."""
        return engine.observe(self.rules, state.engine_state, player)

    def resample_hidden(self, state: EnvState, key: jax.Array) -> EnvState:
        """Redraws the cards the player to move cannot see: a determinisation.

        The hidden cards are the opponent's hand cards that the mover did not see taken
        from a pile and the cards left in the deck; `lc_cfr.game.determinize` permutes
        them uniformly among the deck positions they occupy and rebuilds the opponent's
        hand, so the mover's observation and legal actions are unchanged and the hidden
        world is a uniform sample of those consistent with the cards the mover saw. It
        does not weigh worlds by how likely the opponent's moves made them.

        Args:
          state: a game; the resampling is from `state.current_player`'s point of view.
          key: a PRNG key.

        Returns:
          The state with the opponent's hand and the remaining deck redrawn.
        """
        words = jax.random.bits(key, (self.rules.n_cards,), jnp.uint32)
        world = determinize.determinize(self.rules, state.engine_state, words)
        return state.replace(engine_state=world)

    def _wrap(self, x: engine.State, rewards: jax.Array, step_count: jax.Array) -> EnvState:
        mask = engine.legal_action_mask(self.rules, x) | x.terminal
        return EnvState(
            current_player=x.current_player,
            observation=engine.observe(self.rules, x, x.current_player),
            legal_action_mask=mask,
            rewards=rewards.astype(jnp.float32),
            terminated=x.terminal & ~x.truncated,
            truncated=x.truncated,
            _step_count=jnp.asarray(step_count, jnp.int32),
            engine_state=x,
        )
