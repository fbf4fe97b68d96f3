"""The loop IR's one traversal: visitors see every statement in program order, mutators
rebuild what their overrides change and keep the rest, and a subclass overriding `visit`
or one kind sees the recursion go through it."""
from __future__ import annotations

from autotune.ir.analysis import map_stmt_exprs, substitute
from autotune.ir.expr import Const, Var, cmp
from autotune.ir.stmt import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    Scope,
    Seq,
    Stmt,
    Store,
    Sync,
    format_stmt,
    walk_stmts,
)
from autotune.ir.visitor import StmtMutator, StmtVisitor

I, J = Var("i"), Var("j")
OUT = Buffer("out", (4, 8))
TMP = Buffer("tmp", (8,), scope=Scope.LOCAL)


def _tree() -> Stmt:
    fill = For(J, 8, ForKind.SERIAL, Store(TMP, (J,), Const(1.0)))
    use = For(J, 8, ForKind.VECTORIZED,
              IfThenElse(cmp("<", J, 6), Store(OUT, (I, J), TMP[J]), Store(OUT, (I, J),
                                                                        Const(0.0))))
    return For(I, 4, ForKind.PARALLEL, Allocate(TMP, Seq([fill, Sync(), use])))


class _Order(StmtVisitor):
    def __init__(self) -> None:
        self.seen: list[Stmt] = []

    def visit(self, s: Stmt) -> None:
        self.seen.append(s)
        super().visit(s)


def test_a_visitor_sees_every_statement_in_program_order() -> None:
    tree = _tree()
    order = _Order()
    order.visit(tree)
    assert order.seen == list(walk_stmts(tree))


def test_the_identity_mutator_rebuilds_an_equal_tree() -> None:
    tree = _tree()
    copy = StmtMutator().visit(tree)
    assert copy is not tree and format_stmt(copy) == format_stmt(tree)
    leaves = [s for s in walk_stmts(tree) if isinstance(s, (Store, Sync))]
    assert [s for s in walk_stmts(copy) if isinstance(s, (Store, Sync))] == leaves


class _DropSyncs(StmtMutator):
    def visit_leaf(self, s: Stmt) -> Stmt:
        return Seq([]) if isinstance(s, Sync) else s


class _Unguard(StmtMutator):
    """Keeps each guard's then-branch, unguarded, and counts the loops it passed."""

    def __init__(self) -> None:
        self.loops = 0

    def visit_for(self, s: For) -> Stmt:
        self.loops += 1
        return super().visit_for(s)

    def visit_if(self, s: IfThenElse) -> Stmt:
        return self.visit(s.then)


def test_overrides_rewrite_their_kind_and_the_sequence_flattens() -> None:
    tree = _tree()
    no_sync = _DropSyncs().visit(tree)
    assert not any(isinstance(s, Sync) for s in walk_stmts(no_sync))
    seqs = [s for s in walk_stmts(no_sync) if isinstance(s, Seq)]
    assert len(seqs) == 1 and len(seqs[0].stmts) == 2  # the empty sequence is gone
    unguard = _Unguard()
    flat = unguard.visit(tree)
    assert unguard.loops == 3
    assert not any(isinstance(s, IfThenElse) for s in walk_stmts(flat))
    assert "= 0.0" not in "\n".join(format_stmt(flat))


def test_map_stmt_exprs_maps_conditions_and_leaves_through_the_mutator() -> None:
    tree = _tree()
    zero_i = map_stmt_exprs(tree, lambda e: substitute(e, {I: Const(0)}))
    text = "\n".join(format_stmt(zero_i))
    assert "out[0, j]" in text and "out[i, j]" not in text
    assert text.count("for ") == 3 and "if (j < 6):" in text and "else:" in text
