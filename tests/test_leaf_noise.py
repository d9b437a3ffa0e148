"""scripts/leaf_noise.py: the leaves' and the playouts' errors against the expected regret.

On the tiny game with exact networks: positions are drawn along whole games, a leaf that
the game never reaches is the full playout bit for bit (the children's common random
numbers), other decks give other playouts, and the error arithmetic recovers known noise
and bias levels.
"""

import pathlib
import sys

import numpy as np
import pytest
from traversal_helpers import SPEC, TINY, networks, options

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))

import leaf_noise  # noqa: E402

from lc_cfr.game import engine  # noqa: E402
from lc_cfr.traversal import policy as pol  # noqa: E402

SEED = 7
POSITIONS = 24


def _networks():
    net = networks()
    return leaf_noise.Networks(net.advantage, net.value)


def _options(leaf_decisions):
    return options(sampling_mode="external", expand_at="path", leaf_decisions=leaf_decisions)


def test_leaves_past_the_game_are_the_full_playouts():
    nets = _networks()
    opts = _options(8)
    nodes, found = leaf_noise.sample_positions(TINY, SPEC, opts, POSITIONS, nets, SEED)
    assert bool(found.all())
    mask = pol.agent_masks(TINY, nodes, opts.draws)
    assert bool((mask.sum(axis=-1) >= 2).all()) and not bool(nodes.terminal.any())
    # drawn along whole games, not only at their start
    assert len(set(np.asarray(engine.decision_index(nodes)).tolist())) >= 4

    far = 2 * TINY.max_turns  # no child reaches its leaf point there: it plays on
    measured = leaf_noise.measure(TINY, SPEC, opts, nets, POSITIONS, 2, SEED, depths=(far, 2))
    valid = measured.valid
    assert valid.sum(axis=1).min() >= 2
    # the leaf and F_0 share their random numbers: past the game they are one playout
    np.testing.assert_array_equal(measured.leaf[far], measured.full0)
    np.testing.assert_array_equal(measured.mixed[far], measured.full0)
    assert measured.redrawn.shape == measured.leaves[far].shape == (2, *valid.shape)
    # other decks give other playouts; a leaf 2 decisions down reads the value network
    assert not np.array_equal(measured.redrawn[0][valid], measured.full0[valid])
    assert not np.array_equal(measured.leaf[2][valid], measured.full0[valid])
    # regrets are measured from sigma's own node value: zero off the legal actions
    assert not measured.full0[~valid].any()


def test_the_error_arithmetic_recovers_known_noise():
    rng = np.random.default_rng(0)
    n, k, redraws, noise = 4000, 4, 6, 3.0
    truth = rng.normal(0.0, 2.0, (n, k)).astype(np.float32)
    valid = np.ones((n, k), bool)
    valid[:, 3] = False
    phase = np.repeat(np.arange(4), n // 4)

    def noisy(scale):
        return truth + rng.normal(0.0, scale, (n, k)).astype(np.float32)

    measured = leaf_noise.Measured(
        phase=phase,
        valid=valid,
        full0=noisy(noise),
        redrawn=np.stack([noisy(noise) for _ in range(redraws)]),
        leaf={8: truth.copy()},
        mixed={8: noisy(1.0)},
        leaves={8: np.stack([noisy(1.0) + 0.5 for _ in range(redraws)])},
    )
    rows = leaf_noise.phase_table(measured, 8)
    assert [row["phase"] for row in rows] == [0, 1, 2, 3]
    for row in rows:
        assert row["entries"] == 3 * n // 4
        assert row["playout_noise"] == pytest.approx(noise, rel=0.05)
        assert row["signal_rms"] == pytest.approx(2.0, rel=0.1)
        assert row["leaf_error_rms"] < 0.5  # exact, up to the estimate's own noise
        assert row["mixed_error_rms"] == pytest.approx(1.0, abs=0.3)
        assert row["full0_error_rms"] == pytest.approx(noise, rel=0.1)
        assert row["corr_full_pair"] == pytest.approx(4 / (4 + noise**2), abs=0.05)
        assert row["leaf_noise"] == pytest.approx(1.0, rel=0.05)
        assert row["leaf_bias_rms"] == pytest.approx(0.5, abs=0.15)


def test_a_phase_with_fewer_than_two_entries_is_left_out():
    valid = np.array([[True, True, False], [True, False, False]])
    zeros = np.zeros((2, 3), np.float32)
    measured = leaf_noise.Measured(
        phase=np.array([1, 2]),
        valid=valid,
        full0=zeros,
        redrawn=np.stack([zeros, zeros]),
        leaf={4: zeros},
        mixed={4: zeros},
        leaves={4: np.stack([zeros, zeros])},
    )
    rows = leaf_noise.phase_table(measured, 4)
    assert [row["phase"] for row in rows] == [1]
    assert np.isnan(rows[0]["corr_full_pair"])  # constant: no correlation, no warning


def test_draw_positions_are_draws_with_a_pile_legal():
    nets = _networks()
    opts = _options(8)
    nodes, found = leaf_noise.sample_positions(TINY, SPEC, opts, POSITIONS, nets, SEED, True)
    assert bool(found.any())
    mask = np.asarray(pol.agent_masks(TINY, nodes, opts.draws))[np.asarray(found)]
    deck = TINY.draw_deck_action
    assert mask[:, deck].all() and mask[:, deck + 1 :].any(axis=1).all()
    assert not mask[:, :deck].any()  # no card action at a draw decision


def test_the_draw_table_reads_the_piles_edge_and_the_leaf_bias():
    rng = np.random.default_rng(1)
    n, redraws, deck = 3000, 4, 5
    # slots: a card action (never at a draw), the deck, two piles (the second legal half
    # the time); the true edge of the piles over the deck is +2 points
    actions = np.tile(np.array([0, deck, deck + 1, deck + 2]), (n, 1))
    valid = np.ones((n, 4), bool)
    valid[:, 0] = False
    valid[: n // 2, 3] = False
    valid[-10:, 1] = False  # no deck draw: not a draw position
    truth = np.zeros((n, 4), np.float32)
    truth[:, 2:] = 2.0

    def noisy(shift=0.0):
        out = truth + rng.normal(0.0, 5.0, (n, 4)).astype(np.float32)
        out[:, 2:] += shift
        return np.where(valid, out, 0.0)

    measured = leaf_noise.Measured(
        phase=np.zeros(n, int),
        valid=valid,
        full0=noisy(),
        redrawn=np.stack([noisy() for _ in range(redraws)]),
        leaf={8: noisy(-3.0)},  # leaves that undervalue the piles by 3 points
        mixed={8: noisy()},
        leaves={8: np.stack([noisy(-3.0) for _ in range(redraws)])},
        actions=actions,
    )
    table = leaf_noise.draw_table(measured, 8, deck)
    assert table["positions"] == n - 10
    assert table["fbar"] == pytest.approx(2.0, abs=4 * table["fbar_stderr"])
    assert table["leaf"] == pytest.approx(-1.0, abs=4 * table["leaf_stderr"])
    assert table["leaf_less_fbar"] == pytest.approx(-3.0, abs=4 * table["leaf_less_fbar_stderr"])
    assert table["full0_less_fbar"] == pytest.approx(0.0, abs=4 * table["full0_less_fbar_stderr"])
    assert 0.0 < table["leaf_positive"] < table["fbar_positive"] < 1.0
    no_draws = measured._replace(actions=np.zeros_like(actions))
    assert leaf_noise.draw_table(no_draws, 8, deck) is None
