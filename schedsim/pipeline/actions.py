"""Pipeline actions: the small, text-round-trippable IR of a pipeline schedule.

An action is one thing one rank does for one pipeline stage and one
microbatch: ``2F0`` is "stage 2 runs the forward of microbatch 0". The
notation and the parser are those of PyTorch's ``_Action``
(``torch/distributed/pipelining/schedules.py``, PyTorch 00722e64), so a
schedule written by ``torch`` (for instance with ``_dump_csv``) reads back
here unchanged and vice versa:

========================  ===============================================
text                      meaning
========================  ===============================================
``2F0``                   forward of stage 2, microbatch 0
``2B0``                   full backward (input and weight gradients)
``2I0``                   backward for the input only (the ZB paper's "B")
``2W0``                   backward for the weights only
``2SEND_F0``              stage 2 sends the activation of mb 0 to stage 3
``3RECV_F0``              stage 3 receives that activation
``3SEND_B0``              stage 3 sends the input gradient of mb 0 to stage 2
``2RECV_B0``              stage 2 receives that gradient
``(0F7;7B3)OVERLAP_F_B``  DualPipe's overlapped forward + backward pair
``0UNSHARD``              FSDP/bookkeeping actions, no microbatch (parsed so
                          that torch files load; schedsim ignores them)
========================  ===============================================

``parse_action(str(a)) == a`` holds for every action (tested).
"""

from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple, TypeAlias

__all__ = [
    "COMM_TYPES",
    "COMPUTE_TYPES",
    "Action",
    "ComputationType",
    "OverlapAction",
    "PipelineOrder",
    "ScheduleAction",
    "parse_action",
]


class ComputationType(str, Enum):
    """Kind of a pipeline action, valued by its torch notation.

    Source: ``_ComputationType`` in PyTorch ``distributed/pipelining/schedules.py``.
    """

    F = "F"
    """Forward of one stage for one microbatch."""
    I = "I"
    """Backward for the input gradient only (the ZB paper's "B")."""
    B = "B"
    """Full backward: input and weight gradients together."""
    W = "W"
    """Backward for the weight gradient only."""
    SEND_F = "SEND_F"
    """Send a forward activation to the next stage."""
    RECV_F = "RECV_F"
    """Receive a forward activation from the previous stage."""
    SEND_B = "SEND_B"
    """Send an input gradient to the previous stage."""
    RECV_B = "RECV_B"
    """Receive an output gradient from the next stage."""
    OVERLAP_F_B = "OVERLAP_F_B"
    """DualPipe's overlapped F+B pair; only the type of an :class:`OverlapAction`."""
    UNSHARD = "UNSHARD"
    """FSDP unshard (torch lowering pass); carried through, never simulated."""
    RESHARD = "RESHARD"
    """FSDP reshard (torch lowering pass); carried through, never simulated."""
    REDUCE_GRAD = "REDUCE_GRAD"
    """Data-parallel gradient reduction (torch lowering pass); never simulated."""

    def __str__(self) -> str:
        return self.value


#: Types that run a computation on one stage for one microbatch.
COMPUTE_TYPES = frozenset({ComputationType.F, ComputationType.I, ComputationType.B, ComputationType.W})
#: Point-to-point communication types added by :func:`schedsim.pipeline.comms.add_p2p`.
COMM_TYPES = frozenset(
    {
        ComputationType.SEND_F,
        ComputationType.RECV_F,
        ComputationType.SEND_B,
        ComputationType.RECV_B,
    }
)
_NO_MICROBATCH_TYPES = frozenset({ComputationType.UNSHARD, ComputationType.RESHARD, ComputationType.REDUCE_GRAD})

# Longest alternatives first is not needed: F/B/... never prefix SEND_/RECV_
# because those start with S/R. Same token set as torch's ``_action_regex``.
_ACTION_RE = re.compile(r"(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)")
_OVERLAP_RE = re.compile(r"\(([^()]*)\)(\w+)")
_VALID_FORM = (
    "expected [stage][type][microbatch] such as '2F0', '1B3', '3SEND_F1', "
    "type one of F, I, B, W, SEND_F, RECV_F, SEND_B, RECV_B "
    "(or UNSHARD, RESHARD, REDUCE_GRAD without a microbatch), "
    "or an overlapped pair '(0F7;7B3)OVERLAP_F_B'"
)


class Action(NamedTuple):
    """One action of one stage on one microbatch, e.g. ``2F0``.

    Parameters
    ----------
    stage : int
        Global pipeline stage index (0 .. num_stages-1).
    type : ComputationType
        What the action does.
    microbatch : int or None
        Microbatch index; ``None`` only for UNSHARD/RESHARD/REDUCE_GRAD.

    Notes
    -----
    ``str(action)`` is torch's notation (``_Action.__repr__``), and
    ``Action.parse(str(action)) == action``.
    """

    stage: int
    type: ComputationType
    microbatch: int | None

    def __str__(self) -> str:
        mb = "" if self.microbatch is None else str(self.microbatch)
        return f"{self.stage}{self.type.value}{mb}"

    def __repr__(self) -> str:
        return str(self)

    @property
    def is_compute(self) -> bool:
        """True for F, I, B and W."""
        return self.type in COMPUTE_TYPES

    @property
    def is_comm(self) -> bool:
        """True for SEND_F, RECV_F, SEND_B and RECV_B."""
        return self.type in COMM_TYPES

    @property
    def sub_actions(self) -> tuple[Action, ...]:
        """``(self,)``; lets callers treat plain and overlapped actions alike."""
        return (self,)

    @staticmethod
    def parse(text: str) -> Action | OverlapAction:
        """Parse torch notation back into an action (inverse of ``str``).

        Parameters
        ----------
        text : str
            One token such as ``"2F0"``, ``"3SEND_F1"`` or
            ``"(0F7;7B3)OVERLAP_F_B"``. Surrounding whitespace is ignored.

        Returns
        -------
        Action or OverlapAction

        Raises
        ------
        ValueError
            If the token is empty or malformed; the message quotes the token
            and shows the valid form.

        Examples
        --------
        >>> Action.parse("2F0")
        2F0
        >>> Action.parse("2F0") == Action(2, ComputationType.F, 0)
        True
        """
        return parse_action(text)


class OverlapAction(NamedTuple):
    """DualPipe's overlapped forward/backward pair, ``(0F7;7B3)OVERLAP_F_B``.

    The two sub-actions run as one fused chunk on one rank (DeepSeek
    ``dualpipev.py``; torch ``ScheduleDualPipeV`` emits them as an
    ``_Action`` with ``sub_actions``). schedsim's unit-time model counts the
    pair serially: F then B.

    Parameters
    ----------
    forward : Action
        The F half.
    backward : Action
        The B (or I) half.
    """

    forward: Action
    backward: Action

    @property
    def type(self) -> ComputationType:
        """Always :attr:`ComputationType.OVERLAP_F_B`."""
        return ComputationType.OVERLAP_F_B

    @property
    def sub_actions(self) -> tuple[Action, Action]:
        """``(forward, backward)``."""
        return (self.forward, self.backward)

    @property
    def is_compute(self) -> bool:
        """Always True: an overlapped pair is compute."""
        return True

    @property
    def is_comm(self) -> bool:
        """Always False."""
        return False

    def __str__(self) -> str:
        return f"({self.forward};{self.backward}){ComputationType.OVERLAP_F_B.value}"

    def __repr__(self) -> str:
        return str(self)

    @staticmethod
    def parse(text: str) -> Action | OverlapAction:
        """Same as :func:`parse_action`."""
        return parse_action(text)


ScheduleAction: TypeAlias = Action | OverlapAction
"""Anything that can stand in a rank's action list."""

PipelineOrder: TypeAlias = dict[int, list[ScheduleAction | None]]
"""rank -> ordered actions of that rank; ``None`` is an idle slot."""


def _parse_single(token: str, whole: str) -> Action:
    match = _ACTION_RE.fullmatch(token)
    if match is None:
        raise ValueError(f"invalid action {whole!r}: {_VALID_FORM}")
    stage_s, type_s, mb_s = match.groups()
    ctype = ComputationType(type_s)
    if ctype in _NO_MICROBATCH_TYPES:
        if mb_s:
            raise ValueError(
                f"invalid action {whole!r}: {ctype.value} takes no microbatch, "
                f"write '{stage_s}{ctype.value}'; {_VALID_FORM}"
            )
        return Action(int(stage_s), ctype, None)
    if not mb_s:
        raise ValueError(
            f"invalid action {whole!r}: {ctype.value} needs a microbatch index, "
            f"e.g. '{stage_s}{ctype.value}0'; {_VALID_FORM}"
        )
    return Action(int(stage_s), ctype, int(mb_s))


def parse_action(text: str) -> Action | OverlapAction:
    """Parse one action token in torch notation.

    Accepts ``[stage][type][microbatch]`` (regex
    ``(\\d+)(F|I|B|W|SEND_F|RECV_F|SEND_B|RECV_B)(\\d*)``, as torch's
    ``_action_regex``, plus torch's UNSHARD/RESHARD/REDUCE_GRAD) and the
    overlapped form ``(0F7;7B3)OVERLAP_F_B`` of torch's ``_Action.from_str``.
    Unlike torch, the whole token must match: ``"2F0x"`` is rejected instead
    of silently read as ``2F0``.

    Parameters
    ----------
    text : str
        The token.

    Returns
    -------
    Action or OverlapAction

    Raises
    ------
    ValueError
        Empty or malformed token. The message quotes it and shows the valid form.
    TypeError
        ``text`` is not a string.

    Examples
    --------
    >>> parse_action("(0F7;7B3)OVERLAP_F_B").backward
    7B3
    """
    if not isinstance(text, str):
        raise TypeError(f"invalid action {text!r}: not a string; {_VALID_FORM}")
    token = text.strip()
    if not token:
        raise ValueError(f"invalid action {text!r}: empty token; {_VALID_FORM}")
    if token.startswith("("):
        match = _OVERLAP_RE.fullmatch(token)
        if match is None:
            raise ValueError(f"invalid action {text!r}: {_VALID_FORM}")
        inner, kind = match.groups()
        if kind != ComputationType.OVERLAP_F_B.value:
            raise ValueError(
                f"invalid action {text!r}: a parenthesised pair must end in 'OVERLAP_F_B', got {kind!r}; {_VALID_FORM}"
            )
        parts = [p.strip() for p in inner.split(";")]
        if len(parts) != 2:
            raise ValueError(
                f"invalid action {text!r}: OVERLAP_F_B holds exactly two actions 'F;B', got {len(parts)}; {_VALID_FORM}"
            )
        fwd = _parse_single(parts[0], text)
        bwd = _parse_single(parts[1], text)
        if fwd.type is not ComputationType.F or bwd.type not in (
            ComputationType.B,
            ComputationType.I,
        ):
            raise ValueError(
                f"invalid action {text!r}: OVERLAP_F_B pairs a forward with a "
                f"backward, '(sF m;sB m)', got {fwd} and {bwd}"
            )
        return OverlapAction(fwd, bwd)
    return _parse_single(token, text)
