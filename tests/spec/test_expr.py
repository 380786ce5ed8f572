import pytest

from schedsim.expr import ExprError, evaluate, interpolate


def test_arithmetic_and_integral_division():
    env = {"M": 8192, "world_size": 2, "chunks": 8}
    assert evaluate("M*world_size/chunks", env) == 2048
    assert isinstance(evaluate("M*world_size/chunks", env), int)
    assert evaluate("M/3", env) == pytest.approx(2730.6666, rel=1e-6)
    assert evaluate("2**10 + 7//2 - 5%3", {}) == 1024 + 3 - 2
    assert evaluate("range(1, 7, 2)", {}) == [1, 3, 5]
    assert evaluate("max(3, chunks) if chunks > 4 else 0", env) == 8
    assert evaluate("sizeof('bf16') * 10", {}) == 20
    assert evaluate("2 if s in ('a', 'b') else None", {"s": "b"}) == 2
    assert evaluate("s not in ['a']", {"s": "a"}) is False


def test_interpolation():
    assert interpolate("mm{i}_{j}", {"i": 1, "j": 2}) == "mm1_2"
    assert interpolate("{n*2}", {"n": 4}) == 8
    assert interpolate("plain", {}) == "plain"


@pytest.mark.parametrize("bad,msg", [
    ("__import__('os')", "only the functions"),
    ("().__class__", "not allowed"),
    ("open('x')", "only the functions"),
    ("lambda: 1", "not allowed"),
    ("x", "unknown name 'x'"),
    ("1/0", "division by zero"),
    ("2**1000", "exponent"),
    ("1 +", "cannot parse"),
])
def test_rejects_unsafe_or_bad(bad, msg):
    with pytest.raises(ExprError, match=msg):
        evaluate(bad, {})
