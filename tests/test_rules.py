"""Rules validation and the derived layout."""

import pytest

from lc_cfr.game.rules import Rules


def test_defaults_are_the_classic_game():
    rules = Rules()
    assert rules.n_cards == 60 and rules.cards_per_color == 12
    assert rules.num_actions == 22
    assert rules.encoding_size == 8 * 60 + 7 * 5 + 5 == 520
    assert rules.card_value(rules.n_wagers) == 2 and rules.card_value(11) == 10
    assert rules.card_is_wager(0) and rules.card_color(12) == 1
    assert rules.deck_scale == 1 / 64 and rules.turn_scale == 1 / 128


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"n_colors": 0}, "n_colors"),
        ({"n_colors": 7}, "n_colors"),
        ({"n_colors": 1, "n_ranks": 3, "n_wagers": 0, "hand_size": 2}, "hand_size"),
        ({"n_colors": 1, "n_ranks": 4, "n_wagers": 0, "hand_size": 2}, "hand_size"),
        ({"hand_size": 0}, "hand_size"),
        ({"n_ranks": 0}, "n_ranks"),
        ({"n_wagers": -1}, "n_wagers"),
        ({"max_turns": 0}, "max_turns"),
        ({"bonus_threshold": 0}, "bonus_threshold"),
        ({"min_rank": 2.5}, "min_rank"),
    ],
)
def test_invalid_rules_rejected_naming_the_field(fields, named):
    with pytest.raises(ValueError, match=named):
        Rules(**fields)


def test_from_mapping_names_unknown_fields():
    assert Rules.from_mapping({"n_colors": 2}) == Rules(n_colors=2)
    with pytest.raises(ValueError, match="colours"):
        Rules.from_mapping({"colours": 2})
