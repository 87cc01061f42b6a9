"""``csv_import``: import a CSV into a SQLite database in batches, resuming from a checkpoint.

Payload (JSON): ``target_db`` (required: the SQLite file to import into), ``rows`` (rows to
generate, default 10,000) or ``csv_path`` (an existing CSV with id,name,amount_cents),
``table`` (default ``imported_rows``), ``batch_ms`` (a pause per batch, default 0).

Exactly once: each batch is one transaction of ``INSERT OR IGNORE`` keyed on the row id,
committed *before* the checkpoint names it. A crash after the commit and before the
checkpoint repeats that batch, and the primary key turns the repeat into a no-op.
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from jobwire.worker.sdk import DependencyFailed, HandlerError, Handlers, InputInvalid, JobContext, Result, StageDef

handlers = Handlers()
BATCH = 1000
Row = tuple[int, str, int]
STAGES = [
    StageDef(code="PREPARING", labels={"en": "Preparing the file", "zh-CN": "正在准备文件"}),
    StageDef(code="IMPORTING", labels={"en": "Importing rows", "zh-CN": "正在导入数据"}),
    StageDef(code="VERIFYING", labels={"en": "Verifying the import", "zh-CN": "正在核对导入结果"}),
    StageDef(code="DELIVERING", labels={"en": "Delivering result", "zh-CN": "正在提交结果"}, cancellable=False),
]


@dataclass(frozen=True)
class _Params:
    target_db: str
    csv_path: str
    table: str
    rows: int
    batch_s: float


@handlers.job("csv_import", stages=STAGES)
def import_csv(ctx: JobContext) -> Result:
    params = _params(ctx)
    source = _prepare(ctx, params)
    total = sum(1 for _ in _rows(source))
    ctx.stage("IMPORTING")
    with closing(_connect(params.target_db)) as db:
        _create_table(db, params.table)
        added = _import(ctx, db, params, source, total)
        ctx.stage("VERIFYING")
        missing = _verify(ctx, db, params.table, source, total)
    if missing:
        raise HandlerError(f"{missing} rows are missing after the import")
    report = ctx.tmp_dir / "import-report.json"
    summary = {"rows": total, "inserted_by_this_attempt": added, "resumed_at_row": _resume_point(ctx)}
    report.write_text(json.dumps({**summary, "table": params.table, "attempt": ctx.attempt}, indent=2))
    return Result.from_file(report, summary=f"{total} rows imported ({added} in attempt {ctx.attempt})")


def _params(ctx: JobContext) -> _Params:
    raw = ctx.json()
    if not isinstance(raw, dict) or not raw.get("target_db"):
        raise InputInvalid("the payload must name a target_db")
    table = str(raw.get("table", "imported_rows"))
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", table):
        raise InputInvalid("table must be a plain SQL name")
    try:
        rows, batch_ms = int(raw.get("rows", 10_000)), float(raw.get("batch_ms", 0))
    except (TypeError, ValueError) as exc:
        raise InputInvalid("rows and batch_ms must be numbers") from exc
    if not 0 <= rows <= 10_000_000 or batch_ms < 0:
        raise InputInvalid("rows must be 0 to 10,000,000 and batch_ms not negative")
    return _Params(str(raw["target_db"]), str(raw.get("csv_path", "")), table, rows, batch_ms / 1000)


def _prepare(ctx: JobContext, params: _Params) -> Path:
    """The CSV to import: the caller's, or one generated (deterministically) in tmp_dir."""
    if params.csv_path:
        path = Path(params.csv_path)
        if not path.is_file():
            raise InputInvalid("csv_path does not name a readable file")
        return path
    path = ctx.tmp_dir / "input.csv"
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "name", "amount_cents"])
        for row_id in range(1, params.rows + 1):
            # The same rows every attempt, so a resumed import continues the same file.
            writer.writerow([row_id, f"customer-{row_id:07d}", row_id * 7919 % 100_000])
            if row_id % BATCH == 0:
                ctx.check()
                ctx.progress(row_id, total=params.rows)
    ctx.progress(params.rows, total=params.rows)
    return path


def _rows(path: Path) -> Iterator[Row]:
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        next(reader, None)  # header
        for line_no, record in enumerate(reader, start=2):
            try:
                yield int(record[0]), record[1], int(record[2])
            except (IndexError, ValueError) as exc:
                raise InputInvalid(f"line {line_no} is not id,name,amount_cents") from exc


def _resume_point(ctx: JobContext) -> int:
    if ctx.last_checkpoint is None:
        return 0
    return int(json.loads(ctx.last_checkpoint)["rows_done"])


def _connect(target_db: str) -> sqlite3.Connection:
    try:
        return sqlite3.connect(target_db, timeout=30)
    except sqlite3.Error as exc:
        raise DependencyFailed("the target database cannot be opened") from exc


def _create_table(db: sqlite3.Connection, table: str) -> None:
    db.execute(
        f"CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " amount_cents INTEGER NOT NULL, job_no TEXT NOT NULL, attempt INTEGER NOT NULL)"
    )
    db.commit()


def _import(ctx: JobContext, db: sqlite3.Connection, params: _Params, source: Path, total: int) -> int:
    """Import from the checkpoint on; returns how many rows this attempt inserted."""
    done = _resume_point(ctx)
    ctx.progress(done, total=total)
    sql = f"INSERT OR IGNORE INTO {params.table} (id, name, amount_cents, job_no, attempt) VALUES (?, ?, ?, ?, ?)"
    before = db.total_changes
    batch: list[tuple[int, str, int, str, int]] = []
    for index, (row_id, name, amount) in enumerate(_rows(source), start=1):
        if index <= done:
            continue
        batch.append((row_id, name, amount, ctx.job_no, ctx.attempt))
        if len(batch) == BATCH or index == total:
            _commit_batch(db, sql, batch)
            ctx.checkpoint(json.dumps({"rows_done": index}).encode())  # only after the commit
            ctx.progress(index, total=total)
            batch = []
            ctx.sleep(params.batch_s)  # a safe point between batches
    return db.total_changes - before


def _commit_batch(db: sqlite3.Connection, sql: str, batch: list[tuple[int, str, int, str, int]]) -> None:
    try:
        with db:  # one transaction: the whole batch or none of it
            db.executemany(sql, batch)
    except sqlite3.OperationalError as exc:
        raise DependencyFailed("the target database is busy or unavailable") from exc


def _verify(ctx: JobContext, db: sqlite3.Connection, table: str, source: Path, total: int) -> int:
    """Count source rows missing from the table, a batch of ids at a time."""
    missing, checked, ids = 0, 0, []
    for row_id, _name, _amount in _rows(source):
        ids.append(row_id)
        if len(ids) == BATCH:
            missing += _missing(db, table, ids)
            checked += len(ids)
            ids = []
            ctx.check()
            ctx.progress(checked, total=total)
    missing += _missing(db, table, ids)
    ctx.progress(total, total=total)
    return missing


def _missing(db: sqlite3.Connection, table: str, ids: list[int]) -> int:
    if not ids:
        return 0
    marks = ",".join("?" * len(ids))
    (found,) = db.execute(f"SELECT COUNT(*) FROM {table} WHERE id IN ({marks})", ids).fetchone()
    return len(ids) - int(found)
