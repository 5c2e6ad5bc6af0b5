"""Trackio (Hugging Face's experiment tracker) rollout traces (docs/formats-trackio.md).

Trackio stores what `trackio.log({"rollouts": [trackio.Trace(...), ...], "reward_mean": ...})`
logs in a project's SQLite file, `$TRACKIO_DIR/<project>.db` (trackio/sqlite_storage.py):

- table `traces`: `id` (`<run_id>:<log_id>:<key>[:<trace_index>]`), `run_id`, `run_name`, `step`,
  `key` (the metric key the traces were logged under), `trace_index` (position in the logged
  list; NULL for a single trace), `timestamp` (ISO-8601), `log_id` (one per `log()` call), and
  `messages`, `metadata`, `spans`: orjson-encoded JSON written as BLOBs into TEXT columns (not
  compressed), with NaN / ±Infinity written as the strings "NaN" / "Infinity" / "-Infinity"
  (`trackio.utils.serialize_values`; trackio's reader turns top-level ones back into floats);
- table `metrics`: the scalars logged in the same call, in the row with the same `log_id` (or,
  for `SQLiteStorage.log`, which writes no log id, the same run, step and timestamp);
- before trackio 0.26 (#559, "Store traces separately from metrics") the traces stayed inside the
  `metrics` JSON as `{"_type": "trackio.trace", messages, metadata, spans}` values; a database
  without a `traces` table is read that way, with trackio's own ids (`<run>:<step>:<key>[:<i>]`).

Also read: the Parquet copies of the `traces` table (`aux/traces.parquet` of a static Space
export, `<project>_traces.parquet` beside the database; the JSON columns as text), with the
scalars from the sibling metrics Parquet (`metrics.parquet` in the folder that holds `aux/`,
`<project>.parquet`); and the JSONL inbox fragments trackio writes instead of SQLite on a network filesystem
(`inbox/<writer>/*.jsonl`, records `{v, kind: "metric", project, run, run_id, metrics, step,
timestamp, log_id}`). Trackio's other files are claimed and skipped with a note: the trace
session files (`traces/<project>/<run>/*.jsonl`, Pi-format renderings of the `traces` rows for the
Hub's viewer) and the metrics/system/configs Parquet files.

One trace = one rollout (id: the trace's `id`); the spans pair with the messages by trackio's
own rules (trackio/agent_sessions.py): the Nth assistant message with the Nth generation span
(ordered by start time), a tool result with the tool span whose id is its `tool_call_id`, else
the next unused tool span.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ingest.fields import FieldError
from ingest.formats._trackio_trace import decode, rollout_of
from ingest.formats.base import ReadContext, json_type, record_error
from ingest.schema import Rollout
from ingest.source import RecordError, Source

NAME = "trackio"
EXPECTS = ("a Trackio project database (`<project>.db` with a `traces` or `metrics` table), its traces "
           "Parquet export (`aux/traces.parquet`, `<project>_traces.parquet`), or its JSONL inbox fragments")

TRACE_TYPE = "trackio.trace"
TRACE_COLUMNS = ("id", "run_name", "step", "key", "messages")


# --- detection -------------------------------------------------------------------------------

def sniff(source: Source) -> bool:
    first = source.first
    if source.kind == "sqlite":
        tables = set(first or [])
        return "traces" in tables or {"metrics", "configs"} <= tables
    if source.kind == "parquet":
        return isinstance(first, dict) and (_is_trace_row(first) or _is_other_table(first))
    if source.kind == "jsonl":
        return isinstance(first, dict) and (_is_session(first) or _is_fragment(first))
    return False


def _is_trace_row(row: dict) -> bool:
    return all(k in row for k in TRACE_COLUMNS)


def _is_other_table(row: dict) -> bool:
    """A row of trackio's metrics, system-metrics or configs Parquet (no traces in it)."""
    return "run_name" in row and (("timestamp" in row and "log_id" in row) or ("created_at" in row and "run_id" in row))


def _is_session(d) -> bool:
    """A trace session file's first object (`d` is None or not an object when the first line is not one)."""
    return isinstance(d, dict) and d.get("type") == "session" and d.get("harness") == "trackio"


FRAGMENT_KEYS = ("v", "kind", "project", "run")
FRAGMENT_KINDS = ("metric", "system_metric", "alert")


def _is_fragment(d: dict) -> bool:
    return all(k in d for k in FRAGMENT_KEYS) and d.get("kind") in FRAGMENT_KINDS


# --- reading ---------------------------------------------------------------------------------

def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    if source.kind == "sqlite":
        yield from _read_sqlite(source, ctx)
    elif source.kind == "parquet":
        yield from _read_parquet(source, ctx)
    elif _is_session(source.first):
        ctx.notes[source.name] = ("a Trackio trace session file (the .db's trace, rendered for the Hub's viewer): "
                                  "not read")
    else:
        yield from _read_fragments(source, ctx)


def _one(source: Source, line: int, prefix: str | None, ctx: ReadContext, t: dict, *args: Any,
         **kwargs: Any) -> Rollout | RecordError:
    """One trace → its Rollout, or the RecordError naming the file, the row (its rowid, Parquet
    row or JSONL line) and the field; one bad trace never stops the file."""
    try:
        return rollout_of(source, ctx, t, line, *args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - one odd trace must not stop the file
        return record_error(source.name, line, prefix, exc)


def _connect(path: Path) -> sqlite3.Connection:
    """Read-only. A database without a `-wal` beside it (trackio finished, or its last connection
    checkpointed) is opened `immutable`, so reading creates no `-wal`/`-shm` files in the
    user's folder; one with a WAL (a run still logging) is opened `mode=ro` to see what the WAL
    holds, and read as it is on disk when even that fails (a read-only folder)."""
    uri = path.resolve().as_uri()
    if not Path(f"{path}-wal").exists():
        conn = sqlite3.connect(f"{uri}?immutable=1", uri=True)
    else:
        try:
            conn = sqlite3.connect(f"{uri}?mode=ro", uri=True)
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1")
        except sqlite3.OperationalError:
            conn = sqlite3.connect(f"{uri}?immutable=1", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _read_sqlite(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    project = source.path.name.removesuffix(".db")
    try:
        conn = _connect(source.disk)
    except sqlite3.Error as exc:
        yield RecordError(source.name, None, None, f"cannot read SQLite database: {exc}")
        return
    try:
        tables = set(source.first or [])
        if "traces" not in tables:  # trackio < 0.26: traces inside the metrics JSON
            yield from _read_inline(source, ctx, conn, project)
            return
        cols = _columns(conn, "traces")
        metric_cols = _columns(conn, "metrics") if "metrics" in tables else set()
        runs = _run_names(conn, cols)
        sizes = _list_sizes(conn, cols)
        scalars = _SqliteScalars(conn, metric_cols)
        total = conn.execute("SELECT COUNT(*) FROM traces").fetchone()[0] or 1
        for k, row in enumerate(conn.execute("SELECT rowid AS _rowid, * FROM traces ORDER BY rowid")):
            t = dict(row)
            line = t.pop("_rowid")
            source.last_line, source.last_raw = line, None
            source.position = source.size * (k + 1) // total
            yield _one(source, line, None, ctx, t, project, scalars.get(t), runs, sizes, table="traces")
    except sqlite3.Error as exc:
        yield RecordError(source.name, source.last_line, None, f"cannot read SQLite database: {exc}")
    finally:
        conn.close()
        source.position = source.size


def _run_names(conn: sqlite3.Connection, cols: set[str]) -> dict[tuple[str | None, str], str]:
    """Rollscope run id per (trackio run_id, run_name): the run's name, with the start of its
    run id added when two trackio runs of this file share a name."""
    if "run_id" not in cols:
        return {}
    pairs = [(r[0], r[1]) for r in conn.execute("SELECT DISTINCT run_id, run_name FROM traces")]
    return _disambiguate(pairs)


def _disambiguate(pairs: list[tuple[Any, Any]]) -> dict[tuple[str | None, str], str]:
    by_name: dict[Any, set] = {}
    for rid, name in pairs:
        by_name.setdefault(name, set()).add(rid)
    return {(rid, name): (f"{name}-{str(rid)[:8]}" if len(by_name[name]) > 1 and rid else str(name))
            for rid, name in pairs if isinstance(name, str)}


def _list_sizes(conn: sqlite3.Connection, cols: set[str]) -> dict[tuple, int]:
    """Traces per (log call, key) that were logged as a list: the natural group's size."""
    if "log_id" not in cols:
        return {}
    return {(r[0], r[1]): r[2] for r in conn.execute(
        "SELECT log_id, key, COUNT(*) FROM traces WHERE trace_index IS NOT NULL AND log_id IS NOT NULL "
        "GROUP BY log_id, key")}


class _SqliteScalars:
    """The metrics row logged with a trace: by `log_id`, else by run, step and timestamp (the
    path that writes no log id). One query per log call (consecutive traces share it)."""

    def __init__(self, conn: sqlite3.Connection, cols: set[str]):
        self.conn, self.cols = conn, cols
        self.last: tuple | None = None
        self.value: dict | None = None

    def get(self, t: dict) -> dict | None:
        if "metrics" not in self.cols:
            return None
        run_col = "run_id" if "run_id" in self.cols and t.get("run_id") else "run_name"
        key = (t.get("log_id"), t.get(run_col), t.get("step"), t.get("timestamp"))
        if key == self.last:
            return self.value
        self.last, self.value = key, None
        row = None
        if t.get("log_id") is not None and "log_id" in self.cols:
            row = self.conn.execute("SELECT metrics FROM metrics WHERE log_id = ?", (t["log_id"],)).fetchone()
        if row is None:
            row = self.conn.execute(f"SELECT metrics FROM metrics WHERE {run_col} = ? AND step = ? AND timestamp = ?",
                                    (t.get(run_col), t.get("step"), t.get("timestamp"))).fetchone()
        if row is not None:
            try:
                value = decode(row[0], "metrics")
            except FieldError:
                value = None
            self.value = value if isinstance(value, dict) else None
        return self.value


def _read_inline(source: Source, ctx: ReadContext, conn: sqlite3.Connection,
                 project: str) -> Iterator[Rollout | RecordError]:
    """trackio < 0.26: each metrics row's trace payloads, the row's other values as scalars."""
    cols = _columns(conn, "metrics")
    if not {"metrics", "run_name", "step"} <= cols:
        yield RecordError(source.name, None, "metrics", "a Trackio database without a `traces` table needs a "
                                                        "`metrics` table with run_name, step, metrics")
        return
    found = 0
    for row in conn.execute("SELECT rowid AS _rowid, * FROM metrics ORDER BY rowid"):
        m = dict(row)
        line = m["_rowid"]
        source.last_line = line
        try:
            values = decode(m["metrics"], "metrics")
        except FieldError as exc:
            yield RecordError(source.name, line, exc.field, exc.message)
            continue
        if not isinstance(values, dict):
            continue
        run_key = m.get("run_id") or m.get("run_name") or "run"
        for key, i, trace, size in _payloads(values):
            found += 1
            parts = [str(run_key), str(m.get("step")), key] + ([str(i)] if i is not None else [])
            t = {"id": ":".join(parts), "run_id": m.get("run_id"), "run_name": m.get("run_name"),
                 "step": m.get("step"), "key": key, "trace_index": i, "timestamp": m.get("timestamp"),
                 "log_id": m.get("log_id"), "messages": trace.get("messages", []),
                 "metadata": trace.get("metadata", {}), "spans": trace.get("spans", [])}
            prefix = f"metrics.{key}" + (f"[{i}]" if i is not None else "")
            yield _one(source, line, prefix, ctx, t, project, values, {}, {(t["log_id"], key): size},
                       table="metrics", group_fallback=f"{run_key}:{t['step']}:{key}")
    if not found:
        ctx.notes[source.name] = "a Trackio database with no traces (metrics only): nothing to read"


def _payloads(values: dict) -> Iterator[tuple[str, int | None, dict, int]]:
    """(key, index in the logged list or None, trace payload, list size) of every trace value."""
    for key, value in values.items():
        items = value if isinstance(value, list) else [value]
        traces = [(i if isinstance(value, list) else None, v) for i, v in enumerate(items)
                  if isinstance(v, dict) and v.get("_type") == TRACE_TYPE]
        for i, trace in traces:
            yield str(key), i, trace, len(traces)


def _read_fragments(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    """Inbox fragments: each `metric` line holds one `log()` call, its traces still inline."""
    stem = ctx.source_key(source)
    for line, rec in source.lines():
        if isinstance(rec, RecordError):
            yield rec
            continue
        if not isinstance(rec, dict):
            yield RecordError(source.name, line, None, f"expected a Trackio inbox fragment (an object), got "
                                                       f"{json_type(rec)}", source.last_raw)
            continue
        if not _is_fragment(rec):
            missing = [k for k in FRAGMENT_KEYS if k not in rec]
            field = missing[0] if missing else "kind"
            why = (f"missing {', '.join(missing)}" if missing else
                   f"expected one of {', '.join(FRAGMENT_KINDS)}, got {rec.get('kind')!r}")
            yield RecordError(source.name, line, field, f"not a Trackio inbox fragment ({{v, kind, project, run, "
                                                        f"metrics, ...}}): {why}", source.last_raw)
            continue
        if rec.get("kind") != "metric":
            continue  # system metrics and alerts: no traces
        values = rec.get("metrics")
        if not isinstance(values, dict):
            yield RecordError(source.name, line, "metrics", f"expected an object, got {json_type(values)}")
            continue
        project = rec.get("project") if isinstance(rec.get("project"), str) else ""
        run_id, run = rec.get("run_id"), rec.get("run")
        log_id = rec.get("log_id")
        for key, i, trace, size in _payloads(values):
            parts = [str(run_id or run), str(log_id), key] + ([str(i)] if i is not None else [])
            tid = ":".join(parts) if log_id else f"{stem}#{line - 1}.{key}" + (f".{i}" if i is not None else "")
            t = {"id": tid, "run_id": run_id, "run_name": run, "step": rec.get("step"), "key": key,
                 "trace_index": i, "timestamp": rec.get("timestamp"), "log_id": log_id,
                 "messages": trace.get("messages", []), "metadata": trace.get("metadata", {}),
                 "spans": trace.get("spans", [])}
            prefix = f"metrics.{key}" + (f"[{i}]" if i is not None else "")
            yield _one(source, line, prefix, ctx, t, project, values, {}, {(log_id, key): size}, table="inbox",
                       group_fallback=f"{run_id or run}:{line}:{key}")


def _read_parquet(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    if not _is_trace_row(source.first):
        ctx.notes[source.name] = "a Trackio metrics, system-metrics or configs table (no traces): not read"
        return
    path = source.path
    project = path.name.removesuffix("_traces.parquet") if path.name.endswith("_traces.parquet") else None
    db = path.with_name(f"{project}.db") if project else None
    if db is not None and ctx.files is not None and db.resolve() in ctx.files:
        ctx.notes[source.name] = (f"the Parquet copy of {db.name}'s traces, which this ingest reads: "
                                  "not read twice")
        return
    if project is None:
        project = ""  # a static export's aux/traces.parquet: the project is not written in it
    metrics_file = (path.with_name(path.name.removesuffix("_traces.parquet") + ".parquet")
                    if path.name.endswith("_traces.parquet")
                    else path.parent.parent / "metrics.parquet" if path.parent.name == "aux" else None)
    by_log, by_time = _parquet_scalars(metrics_file)
    sizes, pairs = _parquet_groups(source)
    runs = _disambiguate(pairs)
    for line, row in source.parquet_rows():
        if isinstance(row, RecordError):
            yield row
            continue
        scalars = by_log.get(row.get("log_id")) if row.get("log_id") is not None else None
        if scalars is None:
            scalars = by_time.get((row.get("run_id") or row.get("run_name"), row.get("step"), row.get("timestamp")))
        yield _one(source, line, None, ctx, row, project, scalars, runs, sizes, table="traces")


def _parquet_scalars(path: Path | None) -> tuple[dict, dict]:
    """The scalars of a trackio metrics Parquet (flattened: one column per metric), by log id
    and by (run, step, timestamp)."""
    if path is None or not path.is_file():
        return {}, {}
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception:  # noqa: BLE001 - a broken sidecar costs the scalars, not the traces
        return {}, {}
    skip = {"id", "run_id", "timestamp", "run_name", "step", "log_id", "space_id"}
    by_log, by_time = {}, {}
    for r in rows:
        values = {k: v for k, v in r.items() if k not in skip and v is not None}
        if r.get("log_id") is not None:
            by_log[r["log_id"]] = values
        by_time[(r.get("run_id") or r.get("run_name"), r.get("step"), r.get("timestamp"))] = values
    return by_log, by_time


def _parquet_groups(source: Source) -> tuple[dict, list]:
    import pyarrow.parquet as pq

    try:
        names = pq.ParquetFile(source.disk).schema_arrow.names
        cols = [c for c in ("log_id", "key", "trace_index", "run_id", "run_name") if c in names]
        table = pq.read_table(source.disk, columns=cols).to_pylist()
    except Exception:  # noqa: BLE001 - the rows are read (and reported) by parquet_rows
        return {}, []
    sizes: dict[tuple, int] = {}
    pairs = set()
    for r in table:
        if r.get("trace_index") is not None and r.get("log_id") is not None:
            sizes[(r["log_id"], r.get("key"))] = sizes.get((r["log_id"], r.get("key")), 0) + 1
        if "run_id" in r:
            pairs.add((r.get("run_id"), r.get("run_name")))
    return sizes, sorted(pairs, key=str)


# --- one trace -------------------------------------------------------------------------------
