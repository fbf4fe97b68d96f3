"""Affine analysis and simplification against plain evaluation of random index expressions."""
import random

import pytest

from autotune.ir.analysis import affine, simplify
from autotune.ir.expr import BinOp, Const, Expr, Var, add, binop, mul

VARS = [Var(n) for n in "abcd"]
EXTENTS = dict(zip(VARS, (3, 4, 7, 16)))


def evaluate(e: Expr, env: dict) -> int:
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Const):
        return int(e.value)
    assert isinstance(e, BinOp), e
    a, b = evaluate(e.a, env), evaluate(e.b, env)
    return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0,
            "%": a % b if b else 0, "min": min(a, b), "max": max(a, b)}[e.op]


def random_expr(rng: random.Random, depth: int, linear: bool) -> Expr:
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(VARS) if rng.random() < 0.7 else Const(rng.randint(-5, 9))
    ops = ["+", "-", "*k"] if linear else ["+", "-", "*k", "*", "//", "%", "min"]
    op = rng.choice(ops)
    a = random_expr(rng, depth - 1, linear)
    if op == "*k":
        k = Const(rng.randint(-4, 6))
        return mul(a, k) if rng.random() < 0.5 else mul(k, a)
    if op in ("//", "%"):
        return binop(op, a, Const(rng.randint(1, 8)))
    return binop(op, a, random_expr(rng, depth - 1, linear))


def points(rng: random.Random, n: int = 20) -> list[dict]:
    return [{v: rng.randrange(ext) for v, ext in EXTENTS.items()} for _ in range(n)]


def value_of(form, env: dict) -> int:
    coefs, c = form
    return c + sum(k * evaluate(t, env) for t, k in coefs.items())


@pytest.mark.parametrize("seed", range(6))
def test_linear_expressions_are_affine_and_keep_their_value(seed):
    rng = random.Random(seed)
    for _ in range(200):
        e = random_expr(rng, 5, linear=True)
        form = affine(e)
        assert form is not None, e
        assert all(isinstance(t, Var) and k != 0 for t, k in form[0].items()), (e, form)
        for env in points(rng, 5):
            assert value_of(form, env) == evaluate(e, env), e


@pytest.mark.parametrize("seed", range(6))
def test_opaque_terms_hold_no_inner_var_and_keep_the_value(seed):
    rng = random.Random(100 + seed)
    inner = {VARS[0], VARS[1]}
    found = 0
    for _ in range(300):
        e = random_expr(rng, 5, linear=False)
        form = affine(e, inner)
        if affine(e) is not None:  # an affine form is found with or without inner
            assert form is not None, e
        if form is None:
            continue
        found += 1
        for t in form[0]:
            if not isinstance(t, Var):
                assert not any(v in inner for v in _vars(t)), (e, t)
        for env in points(rng, 5):
            assert value_of(form, env) == evaluate(e, env), e
    assert found > 50


def test_products_of_vars_are_opaque_only_outside_the_inner_loops():
    a, b, c, _ = VARS
    ab = BinOp("*", a, b)
    assert affine(ab) is None
    assert affine(add(ab, c), inner={c}) == ({ab: 1, c: 1}, 0)
    assert affine(add(ab, c), inner={a}) is None
    assert affine(BinOp("-", c, c)) == ({}, 0)  # terms that cancel are dropped


@pytest.mark.parametrize("seed", range(6))
def test_simplify_keeps_the_value_over_the_loop_ranges(seed):
    rng = random.Random(200 + seed)
    memo: dict = {}
    for _ in range(300):
        e = random_expr(rng, 5, linear=False)
        s = simplify(e, EXTENTS, memo)
        assert simplify(s, EXTENTS) == s, e  # canonical: simplifying again changes nothing
        for env in points(rng, 8):
            assert evaluate(s, env) == evaluate(e, env), (e, s)


def _vars(e: Expr) -> set:
    if isinstance(e, Var):
        return {e}
    return set().union(*(_vars(c) for c in e.children())) if e.children() else set()
