"""The committed rule's arithmetic: exact intervals and paired differences, checked against published values."""

from __future__ import annotations

import pytest

from tools.bench import default_rule


@pytest.mark.parametrize(("successes", "trials", "expected"), [
    # Clopper-Pearson 95% intervals as tabulated (e.g. R's binom.test): 0/10, 5/10, 10/10, 3/20
    (0, 10, (0.0, 0.3085)), (5, 10, (0.1871, 0.8129)), (10, 10, (0.6915, 1.0)), (3, 20, (0.0321, 0.3789))])
def test_exact_interval_matches_the_tables(successes, trials, expected):
    low, high = default_rule.clopper_pearson(successes, trials)
    assert low == pytest.approx(expected[0], abs=1e-4)
    assert high == pytest.approx(expected[1], abs=1e-4)


def test_a_few_discordant_pairs_tie_and_many_do_not():
    full_right = set(range(40))
    a = {key: True for key in full_right}
    b_close = {key: key >= 2 for key in full_right}   # B loses 2 that A keeps
    b_far = {key: key >= 10 for key in full_right}    # B loses 10 that A keeps
    close = default_rule.paired_difference(a, b_close, full_right)
    far = default_rule.paired_difference(a, b_far, full_right)
    assert (close["only_a"], close["only_b"], close["tie"]) == (2, 0, True)
    assert (far["only_a"], far["only_b"], far["tie"]) == (10, 0, False)
    assert far["difference"] == pytest.approx(0.25)
    assert far["interval"][0] > 0


def test_costs_less_needs_ranges_apart():
    prefill = {"snapkv": {"median": 1.0, "min": 1.0, "max": 1.0},
               "slow": {"median": 1.2, "min": 1.1, "max": 1.3},
               "close": {"median": 1.05, "min": 0.98, "max": 1.1}}
    assert default_rule.costs_less("snapkv", "slow", prefill)
    assert not default_rule.costs_less("snapkv", "close", prefill)
