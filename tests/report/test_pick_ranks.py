"""The summary's worst and best ranks (``pick_ranks``) without sorting every rank: the rows a full sort gives."""

from __future__ import annotations

import random

import pytest

from schedsim.report.summary import pick_ranks


def by_sort(ranks, score, tie, k=3):
    order = sorted(ranks, key=lambda r: (-round(score[r], 9), -round(tie.get(r, 0.0), 9), r))
    return order[:k] + [r for r in order[-k:] if r not in order[:k]]


@pytest.mark.parametrize("seed", range(20))
def test_worst_and_best_ranks_are_a_full_sorts_ends(seed):
    rng = random.Random(seed)
    ranks = rng.sample(range(1000), rng.randint(9, 300))
    # few distinct scores (ties broken by the tie scores, then by rank), noise below 1 ns that must not count
    score = {r: rng.choice([0.0, 1e-3, 2e-3]) + rng.uniform(-1e-12, 1e-12) for r in ranks}
    tie = {r: rng.choice([0.0, 5e-4]) for r in ranks if rng.random() < 0.7}
    rows, left = pick_ranks(ranks, score, False, tie=tie)
    assert rows == by_sort(ranks, score, tie) and left == len(ranks) - 6


def test_few_ranks_or_all_ranks_print_every_rank():
    assert pick_ranks([3, 1, 2], {1: 0.0, 2: 1.0, 3: 2.0}, False) == ([3, 1, 2], 0)
    ranks = list(range(20))
    assert pick_ranks(ranks, dict.fromkeys(ranks, 0.0), True) == (ranks, 0)
    # 20 equal scores: worst are the lowest ranks, best the highest, in sorted order
    assert pick_ranks(ranks, dict.fromkeys(ranks, 0.0), False) == ([0, 1, 2, 17, 18, 19], 14)


@pytest.mark.parametrize("seed", range(5))
def test_scores_on_nanosecond_halves_round_as_python_does(seed):
    # scores on and beside x.5 ns, where rounding by numpy (x·10^9, rint, /10^9) and by round() can part
    rng = random.Random(seed)
    ranks = list(range(200))
    score = {r: (rng.randint(0, 6) + 0.5) * 1e-9 * rng.choice([1, 3, 7]) + rng.choice([0.0, 1e-18, -1e-18])
             for r in ranks}
    rows, left = pick_ranks(ranks, score, False)
    assert rows == by_sort(ranks, score, {}) and left == 194
