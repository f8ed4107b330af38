"""The store is reached through its per-table modules (issue 25): SQL is written in loomtui/store/
only, one module per table, and the rest of Loom calls their named functions. Outside the store,
`sqlite3` names only what goes wrong (its exceptions, to catch) and, in annotations, the types the
store hands out (a transaction's connection, a row); nothing outside it runs a statement.

These tests read Loom's source; the last one shows the scan sees each way around the rule.
"""

from __future__ import annotations

import ast
import re
import sqlite3
from pathlib import Path

from loomtui.store.migrations import MIGRATIONS

LOOMTUI = Path(__file__).resolve().parents[2] / "loomtui"
STORE = LOOMTUI / "store"

# A string that starts as an SQL statement does (upper case, as Loom writes them; prose is not).
STATEMENT = re.compile(
    r"\s*\(?\s*(SELECT\s+\S|INSERT\s+(OR\s+\w+\s+)?INTO\b|UPDATE\s+\w+\s+SET\b|DELETE\s+FROM\b|REPLACE\s+INTO\b"
    r"|WITH\s+\w+\s+AS\b|(CREATE|ALTER|DROP)\s+(TABLE|INDEX|UNIQUE|VIEW|TRIGGER)\b|PRAGMA\s|BEGIN\b|COMMIT\b"
    r"|ROLLBACK\b|SAVEPOINT\b|VACUUM\b|ATTACH\b)")
RUNS_SQL = {"execute", "executemany", "executescript"}
# The types a store function takes or returns, named in annotations only.
TYPES = {"Connection", "Row", "Cursor"}


def _annotations(tree: ast.AST) -> set[int]:
    """The ids of every node inside an annotation."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        notes: list[ast.AST | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            notes += [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            notes += [args.vararg and args.vararg.annotation, args.kwarg and args.kwarg.annotation, node.returns]
        elif isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        for note in notes:
            if note is not None:
                inside.update(id(n) for n in ast.walk(note))
    return inside


def _exception(name: str) -> bool:
    value = getattr(sqlite3, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def around_the_store(rel: str, source: str) -> list[str]:
    """What in one module outside loomtui/store/ (`rel`: its path under loomtui/) talks SQL itself."""
    tree = ast.parse(source)
    noted = _annotations(tree)
    aliases = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names if a.name == "sqlite3"}
    bad = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and STATEMENT.match(node.value):
            bad.append(f"{where}: SQL {node.value[:40]!r}")
        elif isinstance(node, ast.ImportFrom) and node.module == "sqlite3":
            bad += [f"{where}: from sqlite3 import {a.name}" for a in node.names if not _exception(a.name)]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            if not _exception(node.attr) and not (node.attr in TYPES and id(node) in noted):
                bad.append(f"{where}: sqlite3.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in RUNS_SQL:
                bad.append(f"{where}: .{node.func.attr}(")
            elif isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "conn":
                bad.append(f"{where}: .conn.{node.func.attr}(")  # the Store's own connection
    return bad


def test_sql_is_written_in_the_store_only():
    outside = [p for p in sorted(LOOMTUI.rglob("*.py")) if STORE not in p.parents]
    assert len(outside) > 100  # the whole package, not an empty glob
    bad = [line for path in outside
           for line in around_the_store(path.relative_to(LOOMTUI).as_posix(), path.read_text(encoding="utf-8"))]
    assert bad == [], "call the table's module in loomtui/store/ instead:\n" + "\n".join(bad)


def test_every_table_has_its_module():
    """Each table of the schema has a module of its name under loomtui/store/, which holds its queries."""
    # A table made anew is created under a passing name and renamed to its own (SQLite alters no CHECK).
    passing = {m for _, sql in MIGRATIONS for m in re.findall(r"ALTER TABLE (\w+) RENAME TO", sql)}
    tables = {m for _, sql in MIGRATIONS for m in re.findall(r"CREATE TABLE (\w+)", sql)} - passing
    assert passing == {"queue_items_new"}
    assert {"ledger", "meta", "outbox", "canary_runs", "queue_items"} <= tables
    missing = sorted(t for t in tables if not (STORE / f"{t}.py").is_file())
    assert missing == [], f"tables without a module in loomtui/store/: {missing}"


def test_the_scan_sees_each_way_around_the_store():
    source = '''
import sqlite3
import sqlite3 as lite
from sqlite3 import connect, OperationalError

def read(db: sqlite3.Connection, store) -> sqlite3.Row | None:
    try:
        rows = db.execute("SELECT * FROM ledger")
        db.executemany(f"UPDATE queue_items SET state = ? WHERE id = {1}", [])
        store.conn.commit()
        lite.connect(":memory:")
        keep = sqlite3.Row
        word = "Select the next agent"
        other = "delete-buffer -b x"
        query = "DELETE FROM outbox"
    except (sqlite3.Error, lite.OperationalError):
        pass
'''
    found = [line.split(": ", 1)[1] for line in around_the_store("x.py", source)]
    assert sorted(found) == sorted([
        "from sqlite3 import connect", ".execute(", "SQL 'SELECT * FROM ledger'", ".executemany(",
        "SQL 'UPDATE queue_items SET state = ? WHERE i'", ".conn.commit(", "sqlite3.connect", "sqlite3.Row",
        "SQL 'DELETE FROM outbox'",
    ])
