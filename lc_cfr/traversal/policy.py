"""Per-node policy arithmetic shared by every traversal (docs/design.md sections 2.3 and 3).

Regret matching, exploration, sampling and the outcome-sampling regret targets of Deep
CFR (Brown et al. 2019, arXiv:1811.00164) with the outcome-sampling estimator of MCCFR
(Lanctot et al. 2009, "Monte Carlo Sampling for Regret Minimization in Extensive
Games"). Functions act on one node (`[A]` arrays); `vmap` them outside.

Sums over actions are written as explicit left-to-right chains (`sequential_sum`,
`sequential_cumsum`) rather than `jnp.sum`/`jnp.cumsum`: XLA may reassociate a reduction,
and a C twin adding in plain order must reproduce the same float32 bits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lc_cfr.game import engine, rng

FALLBACKS = ("argmax_tiebreak", "uniform")
UNSAMPLED_REGRET_MODES = ("negative_node_value", "zero")
# Which draws the agent's policies may take (config `draws`), in training and in play:
# every legal one; the deck or a pile whose top card the mover can play at once
# (`engine.playable_pile_tops`); the deck only. A restriction of the agent, not a rule:
# bots and the game's other players draw as the rules allow (docs/experiments.md 20).
DRAWS = ("any", "playable", "deck")


def restrict_draws(rules, state, mask: jax.Array, draws: str) -> jax.Array:
    """[A] bool: the legal `mask` of one state without the pile draws `draws` excludes.
    The deck draw, legal at every draw decision, is always kept, so a draw decision
    keeps at least one action; card decisions are unchanged."""
    if draws == "any":
        return mask
    piles = jnp.zeros((rules.n_colors,), jnp.bool_)
    if draws == "playable":
        piles = engine.playable_pile_tops(rules, state)
    head = jnp.ones((2 * rules.hand_size + 1,), jnp.bool_)
    return mask & jnp.concatenate([head, piles])


def agent_mask(rules, state, draws: str) -> jax.Array:
    """[A] bool: the actions the agent may take at one state: legal, less the pile draws
    `draws` excludes. Every place the agent's policies meet a state reads its mask here."""
    return restrict_draws(rules, state, engine.legal_action_mask(rules, state), draws)


def agent_masks(rules, states, draws: str) -> jax.Array:
    """[B, A] bool: `agent_mask` of each of a batch of states [B]."""
    return jax.vmap(agent_mask, in_axes=(None, 0, None))(rules, states, draws)


def check_draws(draws: str) -> str:
    if draws not in DRAWS:
        raise ValueError(f"draws must be one of {DRAWS}, got {draws!r}")
    return draws


def sequential_sum(x: jax.Array) -> jax.Array:
    """x[0] + x[1] + ... in that order, over the last axis."""
    total = x[..., 0]
    for i in range(1, x.shape[-1]):
        total = total + x[..., i]
    return total


def sequential_cumsum(x: jax.Array) -> jax.Array:
    """Prefix sums in left-to-right order over the last axis."""
    sums = [x[..., 0]]
    for i in range(1, x.shape[-1]):
        sums.append(sums[-1] + x[..., i])
    return jnp.stack(sums, axis=-1)


def regret_matching(
    advantages: jax.Array, mask: jax.Array, *, fallback: str, floor: float = 0.0
) -> jax.Array:
    """The regret-matching policy of one node.

    Args:
      advantages: [A] float32 predicted advantages.
      mask: [A] bool legal actions (at least one).
      fallback: when no legal advantage is positive, `argmax_tiebreak` puts all mass on
        the legal action of highest advantage (lowest index among ties), `uniform`
        spreads it evenly over the legal actions.
      floor: `regret_matching.floor`, delta in [0, 1): the policy is
        (1 - delta) * RM + delta * uniform(legal), so no legal action is ever exactly 0.
        Why: in outcome sampling one sampled action of probability 0 zeroes the
        importance weight of every earlier node on the path. The bias: the policy played
        (and averaged) is not regret matching but a delta-mix of it, whose regret can
        exceed RM's by at most delta * (max - mean legal action value) per node.
        0 is plain regret matching (and leaves its bits unchanged).

    Returns:
      [A] float32 policy, zero on illegal actions.
    """
    if fallback not in FALLBACKS:
        raise ValueError(
            f"regret_matching.all_negative_fallback must be one of {FALLBACKS}, got {fallback!r}"
        )
    positive = jnp.where(mask, jnp.maximum(advantages, 0.0), 0.0)
    total = sequential_sum(positive)
    if fallback == "uniform":
        backup = mask / jnp.maximum(sequential_sum(mask.astype(jnp.float32)), 1.0)
    else:
        best = jnp.argmax(jnp.where(mask, advantages, -jnp.inf))
        backup = (jnp.arange(mask.shape[-1]) == best).astype(jnp.float32)
    matched = positive / jnp.where(total > 0, total, 1.0)
    policy = jnp.where(total > 0, matched, backup).astype(jnp.float32)
    if floor > 0:
        check_floor(floor)
        policy = explore(policy, mask, floor)
    return policy


def check_floor(floor: float) -> float:
    """Returns `floor` if it is a valid regret_matching.floor, else raises ValueError."""
    if not 0.0 <= floor < 1.0:
        raise ValueError(f"regret_matching.floor must be in [0, 1), got {floor!r}")
    return floor


def explore(policy: jax.Array, mask: jax.Array, epsilon: float) -> jax.Array:
    """Mixes `epsilon` of the uniform legal policy into `policy` (outcome sampling)."""
    uniform = mask / jnp.maximum(sequential_sum(mask.astype(jnp.float32)), 1.0)
    return (epsilon * uniform + (1.0 - epsilon) * policy).astype(jnp.float32)


def greedy_action(probs: jax.Array, mask: jax.Array, n_piles: int) -> jax.Array:
    """[] int32: a policy's greedy action at one state, the draw's source chosen first
    (the pile draws are the last `n_piles` = `rules.n_colors` actions, the deck draw the
    one before them, `Rules.draw_deck_action`).

    At a card decision (and wherever the deck draw is not legal) it is the most probable
    legal action, the lowest index among ties. At a draw decision the piles' total
    probability is weighed against the deck's first, and the most probable pile is taken
    when the total is larger. Why: an average strategy (and any mixed policy) spreads its
    wish to draw from a pile over the piles it could draw from, so a plain argmax over
    the actions takes the deck at decisions where most of the probability is on drawing
    from a pile; the average strategies of docs/experiments.md 52 drew from a pile a
    tenth as often as their own runs' current policies. Card decisions keep the plain
    argmax: grouping them by play and discard was measured and loses (same section).
    Where one pile already outweighs the deck the answer is the plain argmax's.
    """
    deck = probs.shape[-1] - 1 - n_piles
    piles = jnp.where(mask[deck + 1 :], probs[deck + 1 :], 0.0)
    best = jnp.argmax(jnp.where(mask, probs, -1.0)).astype(jnp.int32)
    best_pile = (deck + 1 + jnp.argmax(jnp.where(mask[deck + 1 :], piles, -1.0))).astype(jnp.int32)
    take_pile = mask[deck] & (sequential_sum(piles) > probs[deck])
    return jnp.where(take_pile, best_pile, best)


def sample_action(probs: jax.Array, mask: jax.Array, bits: jax.Array) -> jax.Array:
    """Inverse-CDF sample from `probs` with the shared generator's `uniform(bits)`.

    The first legal action whose prefix sum exceeds u; if rounding leaves u above the
    last prefix sum, the last legal action.
    """
    u = rng.uniform(bits)
    above = mask & (sequential_cumsum(jnp.where(mask, probs, 0.0)) > u)
    last_legal = mask.shape[-1] - 1 - jnp.argmax(mask[::-1])
    return jnp.where(jnp.any(above), jnp.argmax(above), last_legal).astype(jnp.int32)


def sampled_value(weight_after: jax.Array, utility: jax.Array, sample_prob: jax.Array):
    """The importance-weighted value v~ = W * u / q of a sampled action, before any clip."""
    return weight_after * utility / sample_prob


def outcome_targets(
    policy: jax.Array,
    mask: jax.Array,
    action: jax.Array,
    sample_prob: jax.Array,
    weight_after: jax.Array,
    utility: jax.Array,
    *,
    value_clip: float,
    unsampled_regret: str,
) -> jax.Array:
    """Outcome-sampling regret targets at one traverser node.

    With a* the sampled action, q = sigma'(a*) its sampling probability and W the product
    of sigma/sigma' over the traverser's later decisions on the path, the importance-
    weighted value of a* is v~ = W * u / q (clipped to +-value_clip when value_clip > 0).
    The sampled node value is sigma(a*) v~. Targets r(a) = v~(a) - sigma(a*) v~ with
    v~(a) = 0 for unsampled actions:

    * `negative_node_value`: r(a*) = (1 - sigma(a*)) v~ and r(a) = -sigma(a*) v~ for the
      other legal actions. Unbiased: E[r(a)] = v(a) - sum_b sigma(b) v(b), the true
      (sampled-counterfactual) regret.
    * `zero`: r(a*) = (1 - sigma(a*)) v~ and 0 elsewhere. Biased: a is sampled with
      probability sigma'(a), so E[r(a)] = sigma'(a) * v(a)(1 - sigma(a)) / sigma'(a)
      = v(a)(1 - sigma(a)): it drops the -sum_b sigma(b) v(b) baseline of every unsampled
      action, which favours actions by their raw value rather than their advantage.

    Args:
      policy: [A] the traverser's regret-matching policy sigma at the node.
      mask: [A] legal actions.
      action: [] sampled action a*.
      sample_prob: [] sigma'(a*).
      weight_after: [] W.
      utility: [] terminal (or cut-off) utility of the traverser.
      value_clip: clip of |v~|; 0 disables.
      unsampled_regret: `negative_node_value` or `zero`.

    Returns:
      [A] float32 regret targets, zero on illegal actions.
    """
    if unsampled_regret not in UNSAMPLED_REGRET_MODES:
        raise ValueError(
            "traversal.outcome_unsampled_regret must be one of "
            f"{UNSAMPLED_REGRET_MODES}, got {unsampled_regret!r}"
        )
    value = sampled_value(weight_after, utility, sample_prob)
    if value_clip > 0:
        value = jnp.clip(value, -value_clip, value_clip)
    sampled = jnp.arange(policy.shape[-1]) == action
    chosen_prob = policy[action]
    if unsampled_regret == "negative_node_value":
        targets = jnp.where(sampled, (1.0 - chosen_prob) * value, -chosen_prob * value)
    else:
        targets = jnp.where(sampled, (1.0 - chosen_prob) * value, 0.0)
    return jnp.where(mask, targets, 0.0).astype(jnp.float32)


def node_regrets(policy: jax.Array, values: jax.Array, mask: jax.Array):
    """External sampling at one expanded node: (v = sum sigma(a) v(a), r(a) = v(a) - v).

    Args:
      policy: [A] sigma at the node; values: [A] child values v(a); mask: [A] legal.

    Returns:
      ([] node value, [A] regrets, zero on illegal actions).
    """
    # The barrier keeps XLA from fusing the products into the sum (as fused multiply-adds
    # in some contexts and not others), so every caller gets the same bits.
    node_value = sequential_sum(jax.lax.optimization_barrier(policy * values))
    return node_value, jnp.where(mask, values - node_value, 0.0).astype(jnp.float32)


def weights_after(ratios: jax.Array, count: jax.Array) -> jax.Array:
    """W_k = prod_{k < j < count} ratios[j] for every node k of one path.

    Args:
      ratios: [D] sigma(a*)/sigma'(a*) at the traverser's nodes, in path order.
      count: [] number of valid nodes (entries at or past it are ignored).

    Returns:
      [D] float32, multiplied right to left so every backend can reproduce the bits.
    """
    depth = ratios.shape[-1]
    valid = jnp.arange(depth) < count
    ratios = jnp.where(valid, ratios, 1.0)
    weights = [jnp.float32(1.0)]
    for j in range(depth - 1, 0, -1):
        weights.append(weights[-1] * ratios[j])
    return jnp.stack(weights[::-1]).astype(jnp.float32)


OUTCOME_ESTIMATORS = ("importance", "baseline", "history_value")


def baseline_path_targets(
    policy: jax.Array,
    mask: jax.Array,
    action: jax.Array,
    sample_prob: jax.Array,
    baseline: jax.Array,
    count: jax.Array,
    utility: jax.Array,
    *,
    estimator: str,
    value_clip: float,
    value_lambda: float,
):
    """Regret and value targets of one outcome-sampled path with a learned history value.

    The traverser's decisions k = 0 .. count-1 of the path, in order, each with its policy
    sigma_k, sampled action a*_k of sampling probability q_k and the value network's
    estimates b_k(a) of the traverser's utility after each action (Q(h_k, a)). From the
    end of the path (v~ = the terminal utility u) back to the start:

      u~_k(a) = b_k(a) + [a = a*_k] (v~_{k+1} - b_k(a*_k)) / q_k,   v~_k = sum_a sigma_k(a) u~_k(a)

    the variance-reduced sampled values of VR-MCCFR (Schmid et al. 2019,
    arXiv:1809.03057; the learned baseline of DREAM, Steinberger et al. 2020,
    arXiv:2006.10410). E[u~_k(a)] is the value of a under sigma for any baseline; a
    sampled action with sigma = 0 no longer zeroes the estimates above it, they fall back
    to the baseline's. `value_clip` > 0 clips u~_k(a*_k) to +-value_clip.

    Regret targets, per `estimator`:
    * `baseline`: r_k(a) = u~_k(a) - v~_k (VR-MCCFR; unbiased whatever the baseline);
    * `history_value`: r_k(a) = b_k(a) - sum_b sigma_k(b) b_k(b), the ESCHER-style target
      (McAleer et al. 2022, arXiv:2206.04122): no importance weight and no sampled term,
      exact when the value network is; biased by its error otherwise.

    The value network's target for (h_k, a*_k) is
    y_k = lambda v~_{k+1} + (1 - lambda) sum_a sigma_{k+1}(a) b_{k+1}(a) (u after the last
    decision): lambda = 1 is the sampled (variance-reduced) return, lambda = 0 the
    expected-SARSA bootstrap through the next decision's estimates.

    Args:
      policy, mask, baseline: [D, A] sigma_k, legal actions, b_k (0 where illegal).
      action: [D] a*_k; sample_prob: [D] q_k.
      count: [] decisions on the path (entries at or past it are ignored).
      utility: [] terminal (or cut-off) utility of the traverser.
      estimator: `baseline` or `history_value`.
      value_clip: clip of u~_k(a*_k); 0 disables.
      value_lambda: lambda in [0, 1].

    Returns:
      ([D, A] regret targets, 0 on illegal actions and past `count`; [D] value targets).
    """
    if estimator not in OUTCOME_ESTIMATORS[1:]:
        raise ValueError(
            f"traversal.outcome_estimator must be one of {OUTCOME_ESTIMATORS}, got {estimator!r}"
        )
    depth, num_actions = policy.shape
    actions = jnp.arange(num_actions)
    baseline = jnp.where(mask, baseline, 0.0)

    def back(carry, k):
        sampled_next, expected_next = carry
        valid = k < count
        sigma, b, legal = policy[k], baseline[k], mask[k]
        chosen = actions == action[k]
        correction = (sampled_next - b[action[k]]) / sample_prob[k]
        value_chosen = b[action[k]] + correction
        if value_clip > 0:
            value_chosen = jnp.clip(value_chosen, -value_clip, value_clip)
        values = jnp.where(chosen, value_chosen, b)
        # barriers: the products stay products in every caller (no fused multiply-adds)
        sampled = sequential_sum(jax.lax.optimization_barrier(sigma * values))
        expected = sequential_sum(jax.lax.optimization_barrier(sigma * b))
        if estimator == "baseline":
            regrets = values - sampled
        else:
            regrets = b - expected
        lam = jnp.float32(value_lambda)
        parts = jax.lax.optimization_barrier(
            (lam * sampled_next, (jnp.float32(1.0) - lam) * expected_next)
        )
        value_target = parts[0] + parts[1]
        out = (
            jnp.where(valid & legal, regrets, 0.0).astype(jnp.float32),
            jnp.where(valid, value_target, 0.0).astype(jnp.float32),
        )
        carry = (jnp.where(valid, sampled, sampled_next), jnp.where(valid, expected, expected_next))
        return carry, out

    utility = jnp.asarray(utility, jnp.float32)
    _, (targets, value_targets) = jax.lax.scan(
        back, (utility, utility), jnp.arange(depth), reverse=True
    )
    return targets, value_targets
