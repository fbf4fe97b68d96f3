"""The one traversal of statement trees: functors that dispatch on a statement's kind.

A pass subclasses one of them and overrides the kinds it cares about; the recursion into
``Seq``, ``For``, ``Allocate`` and ``IfThenElse`` is written here once (as TVM's
``StmtFunctor`` / ``StmtVisitor`` / ``StmtMutator``). State a pass carries down the tree
(enclosing loops, a guard, an indentation) lives on the functor, set around the recursive
``visit`` of a child.
"""
from __future__ import annotations

from typing import Generic, TypeVar

from mypy_extensions import mypyc_attr

from autotune.ir.stmt import Allocate, For, IfThenElse, Seq, Stmt

R = TypeVar("R")


@mypyc_attr(allow_interpreted_subclasses=True)
class StmtFunctor(Generic[R]):
    """``visit(s)`` calls the method of ``s``'s kind; every statement that is not one of
    the four compound ones is a leaf. Subclasses define all five methods."""

    def visit(self, s: Stmt) -> R:
        if isinstance(s, Seq):
            return self.visit_seq(s)
        if isinstance(s, For):
            return self.visit_for(s)
        if isinstance(s, Allocate):
            return self.visit_allocate(s)
        if isinstance(s, IfThenElse):
            return self.visit_if(s)
        return self.visit_leaf(s)

    def visit_seq(self, s: Seq) -> R:
        raise NotImplementedError

    def visit_for(self, s: For) -> R:
        raise NotImplementedError

    def visit_allocate(self, s: Allocate) -> R:
        raise NotImplementedError

    def visit_if(self, s: IfThenElse) -> R:
        raise NotImplementedError

    def visit_leaf(self, s: Stmt) -> R:
        raise NotImplementedError


@mypyc_attr(allow_interpreted_subclasses=True)
class StmtVisitor(StmtFunctor[None]):
    """Visits every statement of a tree in program order; leaves do nothing."""

    def visit_seq(self, s: Seq) -> None:
        for c in s.stmts:
            self.visit(c)

    def visit_for(self, s: For) -> None:
        self.visit(s.body)

    def visit_allocate(self, s: Allocate) -> None:
        self.visit(s.body)

    def visit_if(self, s: IfThenElse) -> None:
        self.visit(s.then)
        if s.else_ is not None:
            self.visit(s.else_)

    def visit_leaf(self, s: Stmt) -> None:
        pass


@mypyc_attr(allow_interpreted_subclasses=True)
class StmtMutator(StmtFunctor[Stmt]):
    """Rebuilds a tree bottom-up from what ``visit`` returns for each child (a ``Seq``
    flattens the sequences its children become); leaves are kept as they are."""

    def visit_seq(self, s: Seq) -> Stmt:
        return Seq([self.visit(c) for c in s.stmts])

    def visit_for(self, s: For) -> Stmt:
        return For(s.var, s.extent, s.kind, self.visit(s.body))

    def visit_allocate(self, s: Allocate) -> Stmt:
        return Allocate(s.buffer, self.visit(s.body))

    def visit_if(self, s: IfThenElse) -> Stmt:
        return IfThenElse(s.cond, self.visit(s.then),
                          None if s.else_ is None else self.visit(s.else_))

    def visit_leaf(self, s: Stmt) -> Stmt:
        return s
