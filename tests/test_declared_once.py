"""The rules at the edges are written once: the id and namespace patterns (the store's, which the
served schemas take), bearer parsing (``caller.secret_of``) and the wording of a pydantic error
(``serve.errors.first_problem``). Each check names the one module that may spell the rule out, so
a second copy anywhere under lab/ fails here."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[1] / "lab"

# (what, a literal only its owner writes, the owner)
ONCE = [
    ("the id pattern", "[A-Za-z0-9_.:@#/+-]", "store/records.py"),
    ("the namespace segment pattern", "[A-Za-z0-9][A-Za-z0-9_.-]{", "store/records.py"),
    ("bearer parsing", '== "bearer"', "serve/caller.py"),
    ("the unknown-field wording", "unknown field; known:", "serve/errors.py"),
    ("a pydantic error's place", 'get("loc"', "serve/errors.py"),
]


def _writers(literal: str) -> list[str]:
    return sorted(str(p.relative_to(LAB)) for p in LAB.rglob("*.py") if literal.lower() in p.read_text().lower())


@pytest.mark.parametrize("what,literal,owner", ONCE, ids=[w for w, _, _ in ONCE])
def test_each_edge_rule_is_written_in_one_module(what, literal, owner):
    assert _writers(literal) == [owner], what


def test_the_served_patterns_are_the_stores_own():
    from lab.errors import ValidationError
    from lab.serve import contract as C
    from lab.store.records import validate_id, validate_namespace

    def store_takes(check, value: str) -> bool:
        try:
            check(value)
        except ValidationError:
            return False
        return True

    # (the store refuses more than a pattern can say: reserved device names, a trailing '.', '..')
    namespaces = ["a", "team-a/notes", "a/b/c/d", "a/b/c/d/e", "x" * 64, "x" * 65, "-a", "a//b", "a/", "é", "a b"]
    for name in namespaces:
        assert bool(re.fullmatch(C.NAMESPACE_PATTERN, name)) == store_takes(validate_namespace, name), name
    ids = ["a", "notes:1", "a@b#c/d+e", "x" * 200, "x" * 201, "-a", ":a", "a b"]
    for value in ids:
        assert bool(re.fullmatch(C.ID_PATTERN, value)) == store_takes(validate_id, value), value
