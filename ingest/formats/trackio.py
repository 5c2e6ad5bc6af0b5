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
scalars from the sibling metrics Parquet (`../metrics.parquet`, `<project>.parquet`); and the
JSONL inbox fragments trackio writes instead of SQLite on a network filesystem
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

import math
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ingest import endings
from ingest.fields import FieldError
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder
from ingest.formats.base import ReadContext, guarded, id_text, json_type
from ingest.schema import Call, Ending, EndingInfo, Error, GroupRef, Message, Rollout, RunRef, Span, Task, Usage
from ingest.source import RecordError, Source, loads
from ingest.timestamps import to_epoch

NAME = "trackio"
EXPECTS = ("a Trackio project database (`<project>.db` with a `traces` or `metrics` table), its traces "
           "Parquet export (`aux/traces.parquet`, `<project>_traces.parquet`), or its JSONL inbox fragments")

TRACE_TYPE = "trackio.trace"
TRACE_COLUMNS = ("id", "run_name", "step", "key", "messages")
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

# metadata keys mapped to Rollscope fields (the first present wins); the rest stays in extra
REWARD_KEYS = ("reward", "score")
COMPONENT_KEYS = ("rewards", "reward_components", "reward_breakdown")
ADVANTAGE_KEYS = ("advantage", "advantages")
GROUP_KEYS = ("group_id", "group", "uid", "group_uid")
GROUP_INDEX_KEYS = ("group_index", "sample_index", "rollout_index", "sample_idx")
GROUP_SIZE_KEYS = ("group_size",)
POLICY_KEYS = ("policy_version", "weight_version", "model_version", "policy_step")
FINISH_KEYS = ("finish_reason", "stop_reason")
ENDING_KEYS = ("ending", "termination_reason", "stop_condition")
TASK_KEYS = ("task_id", "prompt_id", "example_id", "problem_id", "question_id", "instance_id", "task")
ERROR_STATUSES = frozenset({"error", "failed"})
# logged scalars whose names Rollscope reads as per-rollout facts (ingest/metrics.py, advantages.py):
# a batch-level value under that name is kept in `extra.logged_metrics`, not in `metrics`
RESERVED_METRICS = frozenset({"tool_errors", "advantage"})


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


def _is_session(d: dict) -> bool:
    return d.get("type") == "session" and d.get("harness") == "trackio"


def _is_fragment(d: dict) -> bool:
    return "v" in d and d.get("kind") in ("metric", "system_metric", "alert") and "project" in d and "run" in d


# --- reading ---------------------------------------------------------------------------------

def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    if source.kind == "sqlite":
        yield from _read_sqlite(source, ctx)
    elif source.kind == "parquet":
        yield from _read_parquet(source, ctx)
    elif _is_session(source.first):
        ctx.notes[source.name] = "a Trackio trace session file (the .db's trace, rendered for the Hub's viewer): not read"
    else:
        yield from _read_fragments(source, ctx)


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
            yield guarded(source.name, line, None, lambda t=t, line=line: _rollout(
                source, ctx, t, line, project, scalars.get(t), runs, sizes, table="traces"))
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
                value = _decode(row[0], "metrics")
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
            values = _decode(m["metrics"], "metrics")
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
            yield guarded(source.name, line, prefix, lambda t=t, line=line, values=values, size=size: _rollout(
                source, ctx, t, line, project, values, {}, {(t["log_id"], key): size}, table="metrics",
                group_fallback=f"{run_key}:{t['step']}:{key}"))
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
        if not isinstance(rec, dict) or rec.get("kind") != "metric":
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
            yield guarded(source.name, line, prefix, lambda t=t, line=line, size=size: _rollout(
                source, ctx, t, line, project, values, {}, {(log_id, key): size}, table="inbox",
                group_fallback=f"{run_id or run}:{line}:{key}"))


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
        yield guarded(source.name, line, None, lambda row=row, line=line, scalars=scalars: _rollout(
            source, ctx, row, line, project, scalars, runs, sizes, table="traces"))


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

def _decode(value: Any, path: str) -> Any:
    """A JSON column as trackio writes it: orjson bytes in a BLOB, text in a TEXT column or a
    Parquet string, or (inline payloads) the value itself."""
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, (bytes, bytearray, str)):
        try:
            return loads(bytes(value) if not isinstance(value, str) else value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FieldError(path, f"invalid JSON: {exc}") from None
    return value


def _finite(value: Any) -> Any:
    """Trackio's spelling of a non-finite number ("NaN", "Infinity") → the float."""
    return _NON_FINITE.get(value, value) if isinstance(value, str) else value


def _number(value: Any, path: str, *, allow_bool: bool = True) -> float | None:
    value = _finite(value)
    if value is None:
        return None
    if isinstance(value, bool):
        if allow_bool:
            return float(value)
        raise FieldError(path, "expected a number, got boolean")
    if isinstance(value, (int, float)):
        return float(value)
    raise FieldError(path, f"expected a number or null, got {json_type(value)}")


def _first(meta: dict, keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for k in keys:
        if k in meta and meta[k] is not None:
            return k, meta[k]
    return None, None


def _stamp(value: Any, path: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        return to_epoch(value, path).epoch
    except FieldError:
        return None


def _rollout(source: Source, ctx: ReadContext, t: dict, line: int, project: str, scalars: dict | None,
             runs: dict, sizes: dict, *, table: str, group_fallback: str | None = None) -> Rollout:
    trace_id = id_text(t.get("id"), "id", required=True)
    step = t.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise FieldError("step", f"expected a training step (an integer ≥ 0), got {step!r}")
    messages = _decode(t.get("messages"), "messages")
    metadata = _decode(t.get("metadata"), "metadata")
    spans = _decode(t.get("spans"), "spans") if t.get("spans") is not None else []
    if messages is None:
        messages = []
    if not isinstance(messages, list):
        raise FieldError("messages", f"expected an array of messages, got {json_type(messages)}")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise FieldError("metadata", f"expected an object, got {json_type(metadata)}")
    if not isinstance(spans, list):
        raise FieldError("spans", f"expected an array of spans, got {json_type(spans)}")
    meta = {k: _finite(v) for k, v in metadata.items()}  # as trackio's own reader gives them back
    used: set[str] = set()

    def take(keys: tuple[str, ...]) -> tuple[str | None, Any]:
        k, v = _first(meta, keys)
        if k is not None:
            used.add(k)
        return k, v

    pk, pv = take(POLICY_KEYS)
    policy = pv if isinstance(pv, int) and not isinstance(pv, bool) and pv >= 0 else None
    if pk is not None and policy is None:
        used.discard(pk)  # not a version number: kept as written
    b = RolloutBuilder(policy_version=policy)
    for i, span in enumerate(spans):
        if not isinstance(span, dict):
            raise FieldError(f"spans[{i}]", f"expected a span object, got {json_type(span)}")
    generations = _ordered(spans, "generation")
    tool_spans = _ordered(spans, "tool")
    errors: list[Error] = []
    if messages:
        _openai.add_messages(b, messages, "messages")
        _apply_spans(b, messages, generations, tool_spans, spans, errors)
    else:
        _from_spans(b, spans, errors)

    rk, rv = take(REWARD_KEYS)
    reward = _number(rv, f"metadata.{rk}") if rk else None
    metrics: dict[str, float | None] = {}
    extra: dict[str, Any] = {}
    ck, cv = take(COMPONENT_KEYS)
    if isinstance(cv, dict):
        for name, v in cv.items():
            v = _finite(v)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                metrics[f"reward_components.{name}"] = float(v) if math.isfinite(v) else None
        extra["reward_components"] = cv
    elif ck is not None:
        used.discard(ck)
    ak, av = take(ADVANTAGE_KEYS)
    if ak is not None:
        if isinstance(av, list):  # per-token or per-turn advantages: kept as written
            used.discard(ak)
        else:
            adv = _number(av, f"metadata.{ak}", allow_bool=False)
            if adv is not None:
                extra["advantage"] = adv
    group = _group(t, meta, take, sizes, group_fallback)
    task = _task(meta, take)
    fk, fv = take(FINISH_KEYS)
    if fk is not None:
        if not isinstance(fv, str):
            raise FieldError(f"metadata.{fk}", f"expected a string, got {json_type(fv)}")
        _finish_reason(b, fv)
    ending = EndingInfo()
    stop_condition = None
    ek, ev = take(ENDING_KEYS)
    if ek is not None:
        if not isinstance(ev, str):
            raise FieldError(f"metadata.{ek}", f"expected a string, got {json_type(ev)}")
        if ek == "stop_condition":
            stop_condition = ev
        else:
            ending = EndingInfo(type=endings.from_reason(ev), detail=ev)
    status = meta.get("status")
    if isinstance(status, str) and status.strip().lower() in ERROR_STATUSES:
        errors.append(Error(type="trace_status", message=str(meta.get("error") or status)))
        if ending.type == Ending.unknown:
            ending = EndingInfo(type=Ending.error, detail=f"status={status}")
    if ending.type == Ending.error and not errors:
        errors.append(Error(type=ending.detail or "error"))

    logged = _scalars(scalars, extra)
    metrics = {**logged, **metrics}
    rest = {k: v for k, v in metadata.items() if k not in used}
    if rest:
        extra["metadata"] = rest
    extra["trackio"] = {k: v for k, v in (("run_id", t.get("run_id")), ("key", t.get("key")),
                                          ("trace_index", t.get("trace_index")), ("log_id", t.get("log_id")),
                                          ("timestamp", t.get("timestamp"))) if v is not None}
    others = [s for s in spans if str(s.get("kind") or "").lower() not in ("generation", "tool")]
    if others:
        extra["trackio"]["spans"] = others
    run_name = t.get("run_name")
    record_run = runs.get((t.get("run_id"), run_name)) or (run_name if isinstance(run_name, str) and run_name else None)
    run_id = ctx.run_for(source, record_run)
    timing = _timing(spans, t, meta)
    # where it came from (not content: the same trace read from the .db, its Parquet copy or a
    # fragment is the same rollout); a static export does not name its project
    src: dict[str, Any] = {"format": NAME, "file": source.name, "line": line, "table": table}
    if project:
        src["project"] = project
    rollout = Rollout(
        id=trace_id,
        run=RunRef(id=run_id, name=run_name if isinstance(run_name, str) else None),
        step=step if step is not None else ctx.step,
        group=group,
        task=task,
        reward=reward,
        metrics=metrics,
        stop_condition=stop_condition,
        ending=ending,
        errors=errors,
        timing=timing,
        extra=extra,
        source=src,
    )
    endings.derive(rollout)
    return b.finish(rollout)


def _scalars(scalars: dict | None, extra: dict) -> dict[str, float | None]:
    """The numbers logged beside the traces (the same for every trace of that `log()` call)."""
    out: dict[str, float | None] = {}
    for k, v in (scalars or {}).items():
        v = _finite(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if k in RESERVED_METRICS:
            extra.setdefault("logged_metrics", {})[k] = v
            continue
        out[str(k)] = float(v) if math.isfinite(v) else None
    return out


def _group(t: dict, meta: dict, take: Callable, sizes: dict, fallback: str | None) -> GroupRef | None:
    gk, gv = take(GROUP_KEYS)
    ik, iv = take(GROUP_INDEX_KEYS)
    sk, sv = take(GROUP_SIZE_KEYS)
    for key, v in ((ik, iv), (sk, sv)):
        if key is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == sk else 0)):
            raise FieldError(f"metadata.{key}", f"expected an integer, got {json_type(v)}")
    if gk is not None:
        return GroupRef(id=id_text(gv, f"metadata.{gk}"), index=iv, size=sv)
    index = t.get("trace_index")
    if index is None:
        return None
    log_id = t.get("log_id")
    size = sizes.get((log_id, t.get("key")))
    gid = f"{log_id}:{t.get('key')}" if log_id is not None else fallback
    if gid is None:
        return None
    return GroupRef(id=gid, index=iv if iv is not None else index, size=sv or size)


def _task(meta: dict, take: Callable) -> Task | None:
    tk, tv = take(TASK_KEYS)
    if tk is None:
        return None
    if isinstance(tv, dict):
        key = tv.get("id") if isinstance(tv.get("id"), (str, int)) and not isinstance(tv.get("id"), bool) else None
        return Task(key=id_text(key, f"metadata.{tk}.id"), data=tv)
    if isinstance(tv, (str, int)) and not isinstance(tv, bool):
        return Task(key=id_text(tv, f"metadata.{tk}"))
    raise FieldError(f"metadata.{tk}", f"expected a string or integer id, got {json_type(tv)}")


def _finish_reason(b: RolloutBuilder, raw: str) -> None:
    """The trace's finish reason: the last model call's, when the spans did not say."""
    last_node = next((i for i in range(len(b.nodes) - 1, -1, -1) if b.nodes[i].sampled), None)
    call = next((c for c in reversed(b.calls) if c.node is not None and c.node == last_node), None)
    if call is None:
        b.call(last_node, raw).extra["finish_reason_from"] = "metadata"
    elif call.finish_reason_raw is None:
        call.finish_reason, call.finish_reason_raw = _openai.finish_reason(raw), raw
        call.extra["finish_reason_from"] = "metadata"


# --- spans -----------------------------------------------------------------------------------

def _ordered(spans: list[dict], kind: str) -> list[dict]:
    """Spans of one kind by start time, then position (trackio.agent_sessions._ordered_spans)."""
    indexed = [(i, s) for i, s in enumerate(spans) if str(s.get("kind") or "").lower() == kind]

    def key(item: tuple[int, dict]) -> tuple[float, int]:
        start = _stamp(item[1].get("start_time") or item[1].get("startTime"), "start_time")
        return (start if start is not None else math.inf, item[0])

    return [s for _, s in sorted(indexed, key=key)]


def span_is_error(span: dict) -> bool:
    """trackio.agent_sessions._span_is_error: status error/failed, or an error set."""
    return str(span.get("status") or "").lower() in ERROR_STATUSES or bool(span.get("error"))


def _error_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for k in ("message", "error", "type"):
            if isinstance(value.get(k), str):
                return value[k]
    return "" if value is None or value is True else _openai.arguments_text(value)


def _span_time(span: dict) -> tuple[float | None, float | None]:
    start = _stamp(span.get("start_time") or span.get("startTime"), "start_time")
    end = _stamp(span.get("end_time") or span.get("endTime"), "end_time")
    duration = span.get("duration_ms")
    if isinstance(duration, (int, float)) and not isinstance(duration, bool) and math.isfinite(duration):
        if end is None and start is not None:
            end = start + duration / 1000
        elif start is None and end is not None:
            start = end - duration / 1000
    return start, end


def _usage(span: dict) -> Usage | None:
    """trackio.agent_sessions.span_usage's fields: input/prompt, output/completion, cache reads, cost."""
    u = span.get("usage") if isinstance(span.get("usage"), dict) else {}

    def count(*keys: str) -> int | None:
        for k in keys:
            v = u.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
            if isinstance(v, float) and v.is_integer():
                return int(v)
        return None

    cost = span.get("cost_usd")
    cost = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None
    details = u.get("completion_tokens_details") if isinstance(u.get("completion_tokens_details"), dict) else {}
    usage = Usage(input_tokens=count("input_tokens", "prompt_tokens"),
                  output_tokens=count("output_tokens", "completion_tokens"),
                  cache_read_input_tokens=count("cache_read_input_tokens", "cached_tokens"),
                  reasoning_output_tokens=count("reasoning_tokens") or (
                      details.get("reasoning_tokens") if isinstance(details.get("reasoning_tokens"), int) else None),
                  cost=cost)
    rest = {k: v for k, v in u.items() if k not in ("input_tokens", "prompt_tokens", "output_tokens",
                                                     "completion_tokens", "cache_read_input_tokens", "cached_tokens",
                                                     "reasoning_tokens")}
    if rest:
        usage.extra.update(rest)
    if all(getattr(usage, f) is None for f in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                                               "reasoning_output_tokens", "cost")) and not rest:
        return None
    return usage


def _span_finish(span: dict) -> str | None:
    for holder in (span, span.get("metadata"), span.get("output")):
        if isinstance(holder, dict):
            for k in FINISH_KEYS:
                if isinstance(holder.get(k), str):
                    return holder[k]
    return None


def _span_extra(span: dict) -> dict:
    out = {"span_id": span.get("id"), "span_name": span.get("name")}
    for k in ("parent_id", "status", "duration_ms", "metadata"):
        if span.get(k) is not None:
            out[k] = span[k]
    return {k: v for k, v in out.items() if v is not None}


def _generation_call(b: RolloutBuilder, node: int | None, span: dict, errors: list[Error]) -> Call:
    start, end = _span_time(span)
    error = None
    if span_is_error(span):
        error = Error(type="generation_error", message=_error_text(span.get("error")) or str(span.get("status")))
        errors.append(error.model_copy())
    model = span.get("model") if isinstance(span.get("model"), str) else None
    return b.call(node, _span_finish(span), _usage(span), model=model,
                  time=Span(start=start, end=end) if start is not None or end is not None else None,
                  error=error, extra=_span_extra(span))


def _apply_spans(b: RolloutBuilder, messages: list, generations: list[dict], tool_spans: list[dict],
                 spans: list[dict], errors: list[Error]) -> None:
    """Spans onto the message nodes (node i is message i): generation spans become the calls of
    the assistant messages in order, tool spans mark their tool results."""
    assistants = [i for i, n in enumerate(b.nodes) if n.message.role == "assistant"]
    message_calls = {c.node: c for c in b.calls}
    for k, span in enumerate(generations):
        node = assistants[k] if k < len(assistants) else None
        call = _generation_call(b, node, span, errors)
        old = message_calls.get(node)
        if old is not None and node is not None:  # the message's own finish_reason: keep it on the span's call
            b.calls.remove(old)
            if call.finish_reason_raw is None:
                call.finish_reason, call.finish_reason_raw = old.finish_reason, old.finish_reason_raw
        if node is not None and b.nodes[node].timestamp is None and call.time is not None:
            b.nodes[node].timestamp = call.time.end if call.time.end is not None else call.time.start
    by_id = {str(s.get("id")): s for s in tool_spans}
    remaining = list(tool_spans)
    for i, node in enumerate(b.nodes):
        if node.message.role != "tool":
            continue
        raw = messages[i] if i < len(messages) and isinstance(messages[i], dict) else {}
        call_id = raw.get("tool_call_id") or raw.get("toolCallId")
        span = by_id.get(str(call_id)) if call_id is not None else None
        if span is None and remaining:
            span = remaining[0]
        if span is not None and span in remaining:
            remaining.remove(span)
        x = node.message.extra
        if raw.get("isError") is True:
            x["is_error"] = True
        status = raw.get("status")
        if isinstance(status, str) and status.lower() in ERROR_STATUSES and not x.get("error"):
            x["error"] = status
        if span is not None:
            x["tool_span"] = _span_extra(span)
            start, end = _span_time(span)
            if start is not None or end is not None:
                x["tool_span"]["time"] = {"start": start, "end": end}
            if node.timestamp is None and end is not None:
                node.timestamp = end
            if span_is_error(span) and not x.get("error") and x.get("is_error") is not True:
                x["error"] = _error_text(span.get("error")) or str(span.get("status"))
    if remaining:
        b.extra.setdefault("trackio_unmatched_tool_spans", [s.get("id") for s in remaining])


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        for k in ("text", "content", "message", "output"):
            if isinstance(value.get(k), str):
                return value[k]
    return _openai.arguments_text(value)


def _from_spans(b: RolloutBuilder, spans: list[dict], errors: list[Error]) -> None:
    """A trace with spans and no messages (trackio.agent_sessions._spans_to_entries): a
    generation is an assistant turn (its output the text; the first one's input, when it is a
    string or a message list, the context); a tool span is a call on the generation before it
    (else on a node of its own) and its result."""
    def order(item: tuple[int, dict]) -> tuple[float, int]:
        start = _stamp(item[1].get("start_time") or item[1].get("startTime"), "start_time")
        return (start if start is not None else math.inf, item[0])

    last_gen: int | None = None
    for i, span in sorted(enumerate(spans), key=order):
        kind = str(span.get("kind") or "span").lower()
        if kind == "generation":
            if not b.nodes:
                inp = span.get("input")
                if isinstance(inp, list) and all(isinstance(m, dict) and "role" in m for m in inp):
                    _openai.add_messages(b, inp, f"spans[{i}].input")
                elif isinstance(inp, str):
                    b.add(Message(role="user", content=inp), extra={"from_span": span.get("id")})
            last_gen = b.add(Message(role="assistant", content=_text(span.get("output"))), sampled=True,
                             extra={"from_span": span.get("id")})
            call = _generation_call(b, last_gen, span, errors)
            if call.time is not None:
                b.nodes[last_gen].timestamp = call.time.end if call.time.end is not None else call.time.start
        elif kind == "tool":
            call_id = id_text(span.get("id"), f"spans[{i}].id") or f"span-{i}"
            name = span.get("name") if isinstance(span.get("name"), str) and span.get("name") else "tool"
            tc = _openai.tool_call(call_id, name, span.get("input"))
            if last_gen is not None and b.last == last_gen:
                msg = b.nodes[last_gen].message
                msg.tool_calls = (msg.tool_calls or []) + [tc]
            else:
                b.add(Message(role="assistant", tool_calls=[tc]), extra={"from_span": span.get("id"),
                                                                         "synthetic": "a tool span's call"})
            start, end = _span_time(span)
            x: dict[str, Any] = {"tool_span": _span_extra(span)}
            if span_is_error(span):
                x["error"] = _error_text(span.get("error")) or str(span.get("status"))
            content = span.get("error") if span_is_error(span) and span.get("output") is None else span.get("output")
            b.add(Message(role="tool", tool_call_id=call_id, name=name, content=_text(content), extra=x),
                  timestamp=end)
            last_gen = None


def _timing(spans: list[dict], t: dict, meta: dict) -> dict:
    out: dict[str, Any] = {}
    times = [_span_time(s) for s in spans]
    starts = [s for s, _ in times if s is not None]
    ends = [e for _, e in times if e is not None]
    if starts:
        out["start"] = min(starts)
    if ends:
        out["end"] = max(ends)
    logged = _stamp(t.get("timestamp"), "timestamp")
    if logged is not None:
        out["logged_at"] = logged
    for k in ("duration_ms", "latency_ms"):
        v = meta.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out["duration"] = v / 1000
            break
    return out
