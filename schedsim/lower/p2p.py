"""Send/recv pairing on arrays, as NCCL pairs them: the k-th send from a to b meets the k-th recv on b from a,
in issue order (a ``p2p_batch`` is posted whole at the position of its first member).

NCCL has no tags (``ncclSend``/``ncclRecv`` take a peer, a count and a type), so ``tag:`` (and a ``msg`` tag)
only states intent: a pairing whose tags disagree, or whose sizes differ, is an error (worded by
:func:`schedsim.lower.link.build_fault`); one whose names suggest another pairing is a warning.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import compress
from typing import Any

import numpy as np

from schedsim.kinds import KINDS
from schedsim.lower.program import batch_heads, stable_order, unique

_P2P_WORDS = re.compile(r"(?:^|(?<=_))(?:i?send|i?recv|snd|rcv|tx|rx)(?:_|$)|^(?:i?send|i?recv)|(?:i?send|i?recv)$")


@lru_cache(maxsize=1 << 16)
def message_name(name: str) -> str:
    """What a send/recv's name says it carries: the name without send/recv words (``send_grad`` -> ``grad``).
    Remembered for the last 65,536 names (a process's lowerings repeat them: ``schedsim search``'s points name
    their pipeline send/recvs alike)."""
    return _P2P_WORDS.sub("", name.lower()).strip("_")


__all__ = ["match_p2p", "message_name", "message_names", "name_warning"]

#: Substrings one of which every send/recv word of :data:`_P2P_WORDS` holds (lower case)
_P2P_PARTS = re.compile(r"send|recv|snd|rcv|tx|rx")


def message_names(names: list[str]) -> list[str]:
    """:func:`message_name` of each of ``names``, the regex run only on the names that hold a send/recv word's
    letters (found in one pass over the names joined); the others' message is the name in lower case without
    its leading and trailing ``_`` (stripped only where some name has one)."""
    low = "\0".join(names).lower()
    parts = low.split("\0")
    if len(parts) != len(names):  # a name holds the separator
        return [message_name(n) for n in names]
    # no name begins or ends with `_` (a ring's `s{i}`): each is its message as it is, no strip per name
    edge = low[:1] == "_" or low[-1:] == "_" or "\0_" in low or "_\0" in low
    out = [x.strip("_") for x in parts] if edge else parts
    hits = [m.start() for m in _P2P_PARTS.finditer(low)]
    if hits:
        ends = np.cumsum([len(x) + 1 for x in parts])  # one past each name's separator
        for i in np.unique(np.searchsorted(ends, hits, "right")).tolist():
            out[i] = message_name(names[i])
    return out

I64 = np.int64


def _msg_values(cols: Any, s: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Per matched send ``s`` and recv ``r`` (op indices), an id of the ``msg`` value of its tag set (-1 when
    it has none; equal ids for equal values); None when every one of them is a tag set whose ``msg`` is the
    op's message column (:meth:`~schedsim.lower.table.Table.mark_msg_tags`: the pipeline's), which the
    caller has compared already. Only the tag sets of these ops are read."""
    t = cols.table
    both = np.concatenate([s, r])
    tb = cols.c["tags"][both]
    if len(tb) and int(tb.min()) == int(tb.max()):  # one tag set for them all (most often none): read once
        if bool(t.msg_in_column(tb[:1])[0]):
            return None
        one = 0 if any(key == "msg" for key, _v in t.tags.take([int(tb[0])])[0]) else -1
        return np.full(len(s), one, I64), np.full(len(r), one, I64)
    col = t.msg_in_column(tb)
    if bool(col.all()):
        return None
    vals: dict[Any, int] = {}
    out = np.full(len(both), -1, I64)
    u, _first, inv = unique(tb.astype(I64))
    per_tag = np.full(len(u), -1, I64)
    for k, ts in enumerate(t.tags.take(u.tolist())):
        for key, v in ts:
            if key == "msg":
                per_tag[k] = vals.setdefault(v, len(vals))
                break
    out[:] = per_tag[inv.reshape(-1)]
    m = cols.c["msg"][both]
    for k in np.flatnonzero(col).tolist():  # the message column stands for the tag
        out[k] = vals.setdefault(t.strs.item(int(m[k])), len(vals)) if m[k] >= 0 else -1
    return out[:len(s)], out[len(s):]


def match_p2p(cols: Any, warn: bool = True) -> tuple[np.ndarray | None, list[str]]:
    """``(pairs, warnings)``: matched ``(send, recv)`` op indices (sorted by (src, dst), then written process
    group, then issue order), or None when the pairing breaks a rule (unmatched op, tags, messages or sizes that
    disagree); the warnings (names that suggest another pairing) only with ``warn``.

    NCCL matches the k-th send from a to b with the k-th recv on b from a on one communicator; torch runs a
    send/recv on its process group's (``P2POp(..., group=)``; ProcessGroupNCCL keeps a communicator per group),
    so the ops that name a ``group:`` pair within it. Where that pairing fails, the pairing over every group
    is returned, whose mixed groups :func:`schedsim.lower.p2p_comms.check_p2p_groups` reports."""
    c = cols.c
    idx = np.flatnonzero(cols.is_p2p)
    if not len(idx):
        return np.zeros((0, 2), I64), []
    tp = cols.table.templates
    is_send = np.array([KINDS[t.kind].sender for t in tp], bool)[c["tmpl"][idx]]
    rank, peer = c["rank"][idx].astype(I64), c["peer"][idx].astype(I64)
    at, ascending = batch_heads(c["rank"][idx], c["batch"][idx], idx)
    src = np.where(is_send, rank, peer)
    dst = np.where(is_send, peer, rank)
    W = int(max(rank.max(), peer.max())) + 1
    codes: dict[Any, int] = {None: 0}
    tg = np.array([codes.setdefault(getattr(t, "comm", None), len(codes)) for t in tp], I64)
    grp = tg[c["tmpl"][idx]] if len(codes) > 1 else None  # the written group's code (0: none)
    for g in ((grp, None) if grp is not None else (None,)):
        sides = []
        for m in (is_send, ~is_send):
            if g is not None:
                o = np.lexsort((idx[m], at[m], g[m], dst[m], src[m]))
            elif ascending and W * W < 2**62:  # (at, idx) ascend together: a stable sort by (src, dst) alone
                o = stable_order(src[m] * W + dst[m], W * W)
            else:
                o = np.lexsort((idx[m], at[m], dst[m], src[m]))
            sides.append((idx[m][o], src[m][o], dst[m][o], g[m][o] if g is not None else None))
        (s, ss, sd, sg), (r, rs, rd, rg) = sides
        if len(s) == len(r) and np.array_equal(ss, rs) and np.array_equal(sd, rd) and \
                (sg is None or np.array_equal(sg, np.asarray(rg))):
            break
    else:
        return None, []
    msg = c["msg"]
    if bool(((msg[s] >= 0) & (msg[r] >= 0) & (msg[s] != msg[r])).any()):
        return None, []
    mv = _msg_values(cols, s, r)
    if mv is None:  # the tags' messages are the message columns, compared above
        ms = np.where(msg[s] >= 0, 0, -1)  # (only "has one" is read below)
    else:
        ms, mr = mv
        if bool(((ms >= 0) & (mr >= 0) & (ms != mr)).any()):
            return None, []
    nbytes, tm = np.array([t.nbytes for t in tp], np.float64), c["tmpl"]
    if bool((nbytes[tm[s]] != nbytes[tm[r]]).any()):
        return None, []
    return np.stack([s, r], axis=1).astype(I64, copy=False), _name_warnings(cols, s, r, ss, sd, ms) if warn else []


def _name_warnings(cols: Any, s: np.ndarray, r: np.ndarray, ss: np.ndarray, sd: np.ndarray,
                   ms: np.ndarray) -> list[str]:
    """Warnings for pairs whose op names suggest another pairing (send ``x_grad`` met by recv ``y``): a pair
    without a message tag (``ms`` < 0) whose send and recv carry different message names, where a recv of the
    same (src, dst) carries the send's (the first such recv, in the pairing's order, is the one meant).

    In bulk: each distinct op name's message name once (:func:`message_names`), then array lookups."""
    c = cols.c
    cand = np.flatnonzero(ms < 0)
    if not len(cand):
        return []
    nid = c["name"]
    sn, rn = nid[s[cand]], nid[r]
    side = np.zeros(int(max(sn.max(), rn.max())) + 1, np.int8)  # per name id: 1 a send's, 2 a recv's, 3 both
    side[sn] = 1
    side[rn] |= 2
    ids = np.flatnonzero(side)  # the names in use, ascending (a table of them, not a sort)
    msgs = message_names(list(cols.table.names.take(ids.tolist())))
    sides = side[ids]
    sent = set(compress(msgs, (sides & 1).tolist()))  # C-level loops over the names, no bytecode per name
    sent.discard("")
    if sent.isdisjoint(compress(msgs, (sides & 2).tolist())):
        return []  # no recv carries a send's message name: none can be meant for another (a ring's s{i} / r{i})
    codes = {m: k for k, m in enumerate(dict.fromkeys(m for m in msgs if m))}  # by first use
    codes[""] = -1
    mcode = np.fromiter(map(codes.__getitem__, msgs), I64, len(msgs))
    del codes[""]
    at_id = np.cumsum(side != 0) - 1  # name id -> its index in ids
    ca, code_r = mcode[at_id[sn]], mcode[at_id[rn]]
    keep = (ca >= 0) & (code_r[cand] >= 0) & (ca != code_r[cand])
    cand, ca = cand[keep], ca[keep]
    if not len(cand):
        return []
    key = ss * (int(sd.max()) + 1) + sd
    group = np.searchsorted(key, key, "left")  # per pair, the first pair of its (src, dst)
    C = len(codes) + 1
    rkey = group * C + code_r
    u, first = np.unique(rkey, return_index=True)  # a group's first recv of each message name
    q = group[cand] * C + ca
    at = np.minimum(np.searchsorted(u, q), len(u) - 1)
    hit = u[at] == q
    tp = cols.table.templates
    out: list[str] = []
    for k, j in zip(cand[hit].tolist(), first[at[hit]].tolist(), strict=True):
        a, b, other = int(s[k]), int(r[k]), int(r[j])
        out.append(name_warning(tp[int(c["tmpl"][a])].source, _oid(cols, a), _oid(cols, b), _oid(cols, other),
                                int(ss[k]), int(sd[k])))
    return out


def name_warning(source: str, send: str, recv: str, meant: str, src: int, dst: int) -> str:
    """The warning for send ``send`` paired with recv ``recv`` while its name matches recv ``meant``."""
    return (f"{source}: NCCL pairs send {send} with recv {recv} (issue order between ranks {src} and {dst}), but "
            f"the names suggest it is meant for {meant}; at equal sizes NCCL delivers the wrong tensor without an "
            f"error\n  fix: post the recvs on rank {dst} in the order rank {src} sends (or rename the ops)")


def _oid(cols: Any, i: int) -> str:
    return f"{cols.table.names.item(int(cols.c['name'][i]))}@r{int(cols.c['rank'][i])}"
