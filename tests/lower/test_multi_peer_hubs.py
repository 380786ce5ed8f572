"""Rule 7's hubs (``multi_peer_hubs``) found for all pairs at once: the memberships a union-find over the pairs
gives (written out below as the reference), on a hand-made case and on random ones."""

from __future__ import annotations

import random

import numpy as np
import pytest

from schedsim.arrays import unique
from schedsim.lower.checks import multi_peer_hubs


def union_find_hubs(us: np.ndarray, ur: np.ndarray, multi: np.ndarray) -> tuple[list[int], list[int]]:
    am, bm = multi[us], multi[ur]
    keep = am | bm
    us, ur, am, bm = us[keep], ur[keep], am[keep], bm[keep]
    if not len(us):
        return [], []
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    both = am & bm
    for a, b in zip(us[both].tolist(), ur[both].tolist(), strict=True):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    root = np.array([find(a if m else b) for a, b, m in zip(us.tolist(), ur.tolist(), am.tolist(), strict=True)],
                    np.int64)
    hub = unique(root)[2]
    unit, hubs = np.concatenate([us, ur]), np.concatenate([hub, hub])
    first = unique(unit * (int(hub.max()) + 1) + hubs)[1]
    return unit[first].tolist(), hubs[first].tolist()


def test_hubs_by_hand():
    # units 0-3 are multi-peer batches: pairs (3, 1) and (1, 2) chain them into one hub named by unit 1; unit 0
    # pairs with the plain unit 4 (hub of its own); the plain units 5 and 6 pair with each other (no hub)
    multi = np.array([1, 1, 1, 1, 0, 0, 0], bool)
    us, ur = np.array([3, 1, 0, 5]), np.array([1, 2, 4, 6])
    units, hubs = multi_peer_hubs(us, ur, multi)
    assert units.tolist() == [0, 1, 2, 3, 4] and hubs.tolist() == [0, 1, 1, 1, 0]


@pytest.mark.parametrize("seed", range(40))
def test_hubs_match_a_union_find(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 60)
    multi = np.array([rng.random() < 0.6 for _ in range(n)], bool)
    pairs = [(rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(1, 3 * n))]
    if seed % 4 == 0:  # a long chain in scrambled order: many rounds of hooking
        perm = rng.sample(range(n), n)
        multi[:] = True
        pairs = [(perm[i], perm[i + 1]) for i in range(n - 1)]
        rng.shuffle(pairs)
    us, ur = np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)
    units, hubs = multi_peer_hubs(us, ur, multi)
    assert (units.tolist(), hubs.tolist()) == union_find_hubs(us, ur, multi)


@pytest.mark.parametrize("seed", range(12))
def test_hubs_of_multi_peer_batches_only(seed):
    # every paired unit a multi-peer batch, as in a `rank` ring's send+recv batches (each batch's send to rank + 1
    # and recv from rank - 1, one ring per iteration): each unit sits in its ring's hub alone; pairs repeat and
    # come in any order, and some units pair with none
    rng = random.Random(seed)
    world, iters = rng.randint(2, 9), rng.randint(1, 7)
    n = world * iters + rng.randint(0, 5)
    multi = np.zeros(n, bool)
    multi[:world * iters] = True
    pairs = [(i * world + r, i * world + (r + 1) % world) for i in range(iters) for r in range(world)]
    pairs += rng.sample(pairs, rng.randint(0, len(pairs)))
    rng.shuffle(pairs)
    us, ur = np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)
    units, hubs = multi_peer_hubs(us, ur, multi)
    assert (units.tolist(), hubs.tolist()) == union_find_hubs(us, ur, multi)
    assert units.tolist() == list(range(world * iters)) and hubs.tolist() == [u // world for u in range(world * iters)]
