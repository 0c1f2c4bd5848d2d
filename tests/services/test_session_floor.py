"""Session is the floor of services/ (issue 27): it imports no service and forwards to none, and each cache a
service keeps on it has one owner.

A forwarding method is how the old Session grew: a verb's one-line `return await service.verb(self, ...)` for
callers holding a session, so the same verb was reached two ways and session.py imported every service it
forwarded to (a 24-module import circle). The checks read services/session.py and the package's sources as
text (ast), so they hold for code no test runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import remote_gpu_trainer
from remote_gpu_trainer.services import session as session_module

PACKAGE = Path(remote_gpu_trainer.__file__).parent
SESSION_FILE = Path(session_module.__file__)


def session_class() -> ast.ClassDef:
    tree = ast.parse(SESSION_FILE.read_text(encoding="utf-8"))
    (found,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Session"]
    return found


def forwards(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the body, docstring aside, is one statement that only calls something: `return f(...)`,
    `return await f(...)`, `await f(...)` or `f(...)`."""
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return False
    value = body[0].value
    if isinstance(value, ast.Await):
        value = value.value
    return isinstance(value, ast.Call)


def test_no_session_method_only_calls_another() -> None:
    # no allow-list: a method worth having on the floor does something of its own (a cache, a refusal)
    methods = [node for node in session_class().body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    assert methods, "Session defines no methods: the class was not found where this test looks"
    assert [m.name for m in methods if forwards(m)] == []


def test_the_check_flags_a_forward() -> None:
    """The check above would see a forward if one were added (each shape a forward took before issue 27)."""
    shapes = ['def overview(self):\n    "Doc."\n    return observe_and_build(self)\n',
              "async def pull(self, run_id):\n    return await pull_run(self, run_id)\n",
              "async def evaluate_rules(self, run_id, state):\n"
              "    await run_logs.evaluate_rules(self, run_id, state)\n",
              "def close(self):\n    self.db.close()\n"]
    parsed = [ast.parse(text).body[0] for text in shapes]
    assert [forwards(node) for node in parsed if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)] \
        == [True, True, True, True]
    kept = ast.parse("def profile(self, name):\n    return self.provider(name).profile\n").body[0]
    assert isinstance(kept, ast.FunctionDef) and not forwards(kept)


def test_session_imports_no_service() -> None:
    """Not even under TYPE_CHECKING: the import graph of services/ starts at session.py."""
    tree = ast.parse(SESSION_FILE.read_text(encoding="utf-8"))
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            imported += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
    assert [name for name in imported if name.startswith("remote_gpu_trainer.services")] == []
    assert "remote_gpu_trainer.state.db" in imported  # the walk saw session.py's imports


def test_each_session_cache_is_keyed_by_its_owner() -> None:
    """Session.cache(owner, ...) is called with the calling module's own `__name__` only: the cache a service
    keeps is reached through that service's functions, never read or written by another module."""
    callers: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cache" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "session":
                first = node.args[0] if node.args else None
                owner = first.id if isinstance(first, ast.Name) else ast.unparse(first) if first else "nothing"
                callers.setdefault(str(path.relative_to(PACKAGE)), []).append(owner)
    assert callers, "no service keeps a cache on the session: the walk did not find the calls"
    assert {path: owners for path, owners in callers.items() if set(owners) != {"__name__"}} == {}
    assert all(len(owners) == 1 for owners in callers.values()), callers  # one cache per owner module
