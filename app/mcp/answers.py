"""A page's JSON twin → what an MCP tool answers: concise text for the agent to read, plus
structured content (a plain dict) with the same facts and the pages' stable links.

Pure functions, no I/O: each takes the twin (a dict, as the page's `.json` answers it) and
`link`, which turns a twin's URL into the page's URL a person can open (app.mcp.reader.Reader.link).
They are tolerant: a key the twin lacks is left out of the answer (the twins of the failures page,
grouped search hits and paired comparison are read when present, skipped when not), never an error.

Trace text (messages, tool output, error messages, ids) is untrusted: it is quoted as data,
shortened to the caps below, and app.mcp.server reveals invisible characters in everything
returned.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from app.text import reveal_invisible
from ingest import words

Link = Callable[[str | None], str | None]

MESSAGES_PER_ANSWER = 20  # get_rollout: messages of one branch per answer (the rest by `offset`)
CHARS_PER_MESSAGE = 4_000  # get_rollout: characters of one message's text (the rest by `message`/`chars_from`)
CHARS_PER_ARGUMENTS = 500  # get_rollout: characters of one tool call's arguments
ROWS_PER_ANSWER = 50  # list_rollouts / search: rows listed in the text (structured content: the page's rows)
TOP = 5  # tasks, groups, steps named in a summary's text


@dataclass
class Answer:
    """A tool's answer: `text` (concise, for the agent to read) and `data` (structured content)."""

    text: str
    data: dict[str, Any] = field(default_factory=dict)


# `1 hit`, `2 hits`, `1,920 rollouts`: the digits grouped in an answer
plural = partial(words.plural, thousands=True)


def num(x: Any, digits: int = 3) -> str:
    """A number for text: floats to `digits` decimals, None as `—`."""
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def pct(x: Any) -> str:
    """A share (0..1) as a percentage, `—` when unknown."""
    return "—" if x is None else f"{100 * float(x):.0f}%"


def cut(text: Any, limit: int) -> tuple[str, bool]:
    """`text` (a string, or None) cut to `limit` characters; and whether it was cut."""
    s = "" if text is None else str(text)
    return (s, False) if len(s) <= limit else (s[:limit], True)


def quote(text: Any) -> str:
    """Trace text quoted as data (a Python string literal) with every invisible, bidirectional or
    other unprintable non-ASCII character shown as `⟨U+XXXX⟩` (repr would write `\\u202e`, which
    docs/mcp.md does not promise and an agent may read back as the character); ASCII controls
    stay escaped as repr writes them (`\\n`, `\\x00`). None is `None`."""
    if text is None:
        return "None"
    s = reveal_invisible(str(text))
    if not s.isprintable():
        s = "".join(c if c.isprintable() or c < "\x80" else f"⟨U+{ord(c):04X}⟩" for c in s)
    return repr(s)


def _steps(first: Any, last: Any) -> str:
    if first is None:
        return "no steps"
    return f"step {first}" if first == last else f"steps {first}–{last}"


def _pairs(facet: Any) -> list[tuple[Any, Any]]:
    """A facet as (value, count) pairs, whether the twin gives `{value: count}` or
    `[{"value"|"step"|"ending", "count"}]`."""
    if isinstance(facet, dict):
        return list(facet.items())
    out = []
    for row in facet or []:
        if isinstance(row, dict):
            key = next((row[k] for k in ("value", "step", "ending", "key") if k in row), None)
            out.append((key, row.get("count")))
    return out


def _lines(*parts: str | None) -> str:
    return "\n".join(p for p in parts if p)


# --- list_runs, run_summary -----------------------------------------------------------------------

def runs_answer(d: dict, link: Link) -> Answer:
    """`/runs.json` → every run with its rollouts, steps, mean reward (errors scored 0 / dropped)
    and errors."""
    runs = []
    for r in d.get("runs") or []:
        endings = r.get("endings") or {}
        runs.append({k: v for k, v in {
            "run": r.get("id"), "name": r.get("name"), "type": r.get("type"), "rollouts": r.get("rollouts"),
            "first_step": r.get("first_step"), "last_step": r.get("last_step"), "steps": r.get("steps"),
            "mean_reward": r.get("mean_reward"), "mean_reward_no_errors": r.get("mean_reward_no_errors"),
            "endings": endings or None, "url": link(r.get("url"))}.items() if v is not None})
    lines = [f"{plural(len(runs), 'run')}:"]
    for r in runs:
        name = f" ({r['name']})" if r.get("name") and r.get("name") != r["run"] else ""
        errors = (r.get("endings") or {}).get("error")
        lines.append(f"- {r['run']}{name}: {plural(r.get('rollouts'), 'rollout')}, "
                     f"{_steps(r.get('first_step'), r.get('last_step'))}, mean reward {num(r.get('mean_reward'))} "
                     f"({num(r.get('mean_reward_no_errors'))} with errors dropped)"
                     + (f", {plural(errors, 'error')}" if errors else "") + f" — {r.get('url')}")
    return Answer(_lines(*lines), {"runs": runs, "url": link("/runs")})


def run_answer(d: dict, link: Link) -> Answer:
    """`/runs/{run}.json` → totals, step alerts, the steps with most errors and lowest reward, the
    checks that flagged rollouts."""
    run = d.get("run") or {}
    totals = d.get("totals") or {}
    steps = [s for s in d.get("steps") or [] if isinstance(s, dict)]
    compact = [{"step": s.get("step"), "rollouts": s.get("rollouts"), "errors": (s.get("endings") or {}).get("error"),
                "mean_reward": s.get("mean_reward"), "mean_reward_no_errors": s.get("mean_reward_no_errors"),
                "url": link((s.get("url") or "").replace("/rollouts.json?step=", "/steps/") or None)
                if s.get("step") is not None else None}
               for s in steps]
    alerts = [{"step": a.get("step"), "text": a.get("text"),
               "url": link(f"{(run.get('url') or '').removesuffix('.json')}/steps/{a.get('step')}")}
              for a in d.get("alerts") or [] if isinstance(a, dict)]
    checks = [{"kind": c.get("kind"), "label": c.get("label"), "severity": c.get("severity"),
               "rollouts": c.get("rollouts"), "url": link(c.get("url"))}
              for c in d.get("checks") or [] if isinstance(c, dict) and c.get("rollouts")]
    worst = sorted((s for s in compact if s.get("errors")), key=lambda s: -(s["errors"] or 0))[:TOP]
    data = {k: v for k, v in {
        "run": run.get("id"), "name": run.get("name"), "url": link(run.get("url")),
        "rollouts_url": link(run.get("rollouts_url")), "search_url": link(d.get("search_url")),
        "totals": totals or None, "alerts": alerts, "checks": checks, "steps": compact,
        "steps_shown": d.get("steps_shown"), "live": d.get("live")}.items() if v is not None}
    endings = totals.get("endings") or {}
    lines = [f"Run {run.get('id')}" + (f" ({run['name']})" if run.get("name") else "") + f": "
             f"{plural(totals.get('rollouts'), 'rollout')} over {plural(len(steps), 'step')}, mean reward "
             f"{num(totals.get('mean_reward'))} ({num(totals.get('mean_reward_no_errors'))} with errors dropped).",
             "Endings: " + ", ".join(f"{e} {n:,}" for e, n in endings.items() if n) if endings else None]
    if len(compact) >= 2 and compact[0].get("mean_reward") is not None and compact[-1].get("mean_reward") is not None:
        lines.append(f"Mean reward step {compact[0]['step']} → {compact[-1]['step']}: "
                     f"{num(compact[0]['mean_reward'])} → {num(compact[-1]['mean_reward'])}.")
    if alerts:
        lines.append(f"{plural(len(alerts), 'step alert')}:")
        lines += [f"- step {a['step']}: {a['text']} — {a['url']}" for a in alerts]
    if worst:
        lines.append("Most errors: " + ", ".join(f"step {s['step']} ({s['errors']})" for s in worst) + ".")
    if checks:
        lines.append("Checks that flagged rollouts: " + ", ".join(f"{c['kind']} {c['rollouts']:,}" for c in checks)
                     + ".")
    lines.append(f"Page: {data.get('url')}")
    return Answer(_lines(*lines), data)


# --- step_story -------------------------------------------------------------------------------------

def step_answer(d: dict, link: Link) -> Answer:
    """`/runs/{run}/steps/{step}.json` → the story's headline, the alert, endings with the
    source's reasons, new failure signatures (when the twin has them), the tasks most affected,
    findings and what carried no gradient."""
    run = (d.get("run") or {}).get("id")
    step = d.get("step")
    endings = [{"ending": e.get("ending"), "count": e.get("count"), "share": e.get("share"),
                "details": e.get("details"), "url": link(e.get("url"))}
               for e in d.get("endings") or [] if isinstance(e, dict)]
    tasks = [{"task": t.get("task"), "rollouts": t.get("rollouts"), "errors": t.get("errors"),
              "mean_reward": t.get("mean_reward"), "delta": t.get("delta"), "url": link(t.get("url"))}
             for t in (d.get("tasks") or [])[:TOP] if isinstance(t, dict)]
    findings = [{"kind": f.get("kind"), "count": f.get("count"), "url": link(f.get("url"))}
                for f in d.get("findings") or [] if isinstance(f, dict)]
    signatures = [_signature(s, link) for s in (d.get("new_signatures") or d.get("signatures") or [])
                  if isinstance(s, dict)]
    alert = d.get("alert") if isinstance(d.get("alert"), dict) else None
    no_grad = d.get("no_gradient") or {}
    page = link(f"/runs/{_seg(run)}/steps/{step}") if run is not None and step is not None else None
    data = {k: v for k, v in {
        "run": run, "step": step, "rollouts": d.get("rollouts"), "headline": d.get("headline"),
        "alert": alert and {"text": alert.get("text")}, "endings": endings, "new_signatures": signatures or None,
        "tasks": tasks, "findings": findings, "reward": _reward(d.get("reward")),
        "no_gradient": [{"reason": c.get("reason"), "count": c.get("count")} for c in no_grad.get("counts") or []],
        "url": page, "rollouts_url": link(d.get("rollouts_url")), "previous_url": link(d.get("previous_url")),
        "next_url": link(d.get("next_url")), "task_changes_url": link(d.get("task_changes_url"))}.items()
        if v is not None}
    lines = [f"Step {step} of run {run}: {plural(d.get('rollouts'), 'rollout')}."]
    lines += [f"- {h}" for h in d.get("headline") or []]
    if alert:
        lines.append(f"Step alert: {alert.get('text')}")
    if signatures:
        lines.append("New failure signatures at this step: " + "; ".join(
            f"{quote(s.get('template'))} ({plural(s.get('count'), 'rollout')})" for s in signatures[:TOP]))
    errors = next((e for e in endings if e["ending"] == "error" and e.get("count")), None)
    if errors:
        reasons = ", ".join(f"{x.get('detail')} {x.get('count')}" for x in errors.get("details") or [])
        lines.append(f"Errors: {errors['count']}" + (f" ({reasons})" if reasons else "") + f" — {errors['url']}")
    if tasks:
        lines.append("Tasks most affected: " + "; ".join(
            f"{t['task']} ({plural(t.get('errors'), 'error')}, mean reward {num(t.get('mean_reward'))}"
            + (f", Δ {num(t.get('delta'))}" if t.get("delta") is not None else "") + ")" for t in tasks))
    if findings:
        lines.append("Findings: " + ", ".join(f"{f['kind']} {f['count']}" for f in findings) + ".")
    if data["no_gradient"]:
        lines.append("No gradient: " + ", ".join(f"{c['reason']} {c['count']}" for c in data["no_gradient"]) + ".")
    lines.append(f"Page: {page}")
    return Answer(_lines(*lines), data)


def _reward(r: Any) -> dict | None:
    if not isinstance(r, dict):
        return None
    return {k: r.get(k) for k in ("mean", "mean_no_errors", "excluded") if k in r}


def _seg(value: Any) -> str:
    from app.urls import q

    return q(value)


# --- list_rollouts ------------------------------------------------------------------------------------

def rollout_row(r: dict, link: Link) -> dict:
    """One row of the rollouts list, the fields an agent filters and reads on."""
    return {k: v for k, v in {
        "rollout": r.get("rollout_id"), "attempt": r.get("attempt") or None, "step": r.get("step"),
        "group": r.get("group_id"), "task": r.get("task_key"), "ending": r.get("ending"),
        "ending_detail": r.get("ending_detail"), "reward": r.get("reward"), "advantage": r.get("advantage"),
        "turns": r.get("n_turns"), "tokens": r.get("n_tokens"), "flags": r.get("flags") or None,
        "signature": r.get("signature") or r.get("signature_id"), "url": link(r.get("url"))}.items()
        if v is not None}


def rollouts_answer(d: dict, link: Link) -> Answer:
    """`/runs/{run}/rollouts.json` → the page's rows, the total, and the cursor of the next page
    (`after`)."""
    run = (d.get("run") or {}).get("id")
    rows = [rollout_row(r, link) for r in d.get("rollouts") or [] if isinstance(r, dict)]
    filters = d.get("filters") or {}
    total = d.get("total")
    page_url = link(_page_of(d))
    data = {k: v for k, v in {
        "run": run, "filters": filters, "total": total, "total_capped": d.get("total_capped") or None,
        "rollouts": rows, "after": d.get("next"), "url": page_url}.items() if v is not None}
    shown = ", ".join(f"{k}={v}" for k, v in filters.items())
    lines = [f"{plural(total, 'rollout')} in run {run}" + (f" with {shown}" if shown else "")
             + f"; {len(rows)} on this page:"]
    for r in rows[:ROWS_PER_ANSWER]:
        ending = r.get("ending", "") + (f" ({r['ending_detail']})" if r.get("ending_detail") else "")
        flags = f" [{', '.join(r['flags'])}]" if r.get("flags") else ""
        step = f" step {r['step']}" if r.get("step") is not None else ""
        lines.append(f"- {r.get('rollout')}{step} {r.get('task') or ''}: {ending}, reward "
                     f"{num(r.get('reward'))}{flags} — {r.get('url')}")
    if d.get("next"):
        lines.append(f"More: call list_rollouts again with the same filters and after={d['next']!r}.")
    lines.append(f"Page: {page_url}")
    return Answer(_lines(*lines), data)


def _page_of(d: dict) -> str | None:
    base = d.get("facets_base")
    query = d.get("list_query")
    if not base:
        return None
    return base + (f"?{query}" if query else "")


# --- get_rollout ------------------------------------------------------------------------------------

# What the rollout twin's `tool_error` holds when the source kept no message of its own, only a
# signal that the result failed (ingest.metrics.tool_failure): the result's own text is the message.
TOOL_ERROR_SIGNALS = {"error text": "its text opens with the word error", "is_error": "flagged is_error",
                      "error observation": "an error observation"}


def _tool_error(reason: Any, content: str) -> dict:
    """A tool result's failure for the answer: `tool_error`, the tool's own message (the error's
    message where the source kept one, else the first line of the result's text, at most 500
    characters), and `tool_error_signal`, what said it failed when that was no message."""
    if not reason:
        return {}
    if reason not in TOOL_ERROR_SIGNALS:
        return {"tool_error": reason}
    first = next((line.strip() for line in content.splitlines() if line.strip()), "")
    return {k: v for k, v in {"tool_error": cut(first, 500)[0] or None, "tool_error_signal": reason}.items()
            if v is not None}


def rollout_answer(d: dict, link: Link, *, max_chars: int = CHARS_PER_MESSAGE) -> Answer:
    """`/runs/{run}/rollouts/{id}.json` (one page of a branch's messages) → the rollout's header
    (step, group, task, ending with the source's reason and message, reward, errors), its findings,
    and its messages, each cut to `max_chars` characters; `next_offset` when more messages follow."""
    r = d.get("rollout") or {}
    ending = d.get("ending") or {}
    run = r.get("run_id") or (d.get("run") or {}).get("id")
    messages = []
    for m in d.get("messages") or []:
        if not isinstance(m, dict):
            continue
        content, content_cut = cut(m.get("content"), max_chars)
        reasoning, reasoning_cut = cut(m.get("reasoning"), max_chars)
        calls = [{"name": c.get("name"), "arguments": cut(c.get("arguments"), CHARS_PER_ARGUMENTS)[0],
                  "result_message": c.get("result_node")} for c in m.get("tool_calls") or [] if isinstance(c, dict)]
        full = m.get("content_len")
        messages.append({k: v for k, v in {
            "message": m.get("idx"), "role": m.get("role"), "name": m.get("name"), "sampled": m.get("sampled") or None,
            "content": content, "content_chars": full,
            "content_cut": (content_cut or bool(m.get("content_truncated"))) or None,
            "reasoning": reasoning or None, "reasoning_cut": reasoning_cut or None, "tool_calls": calls or None,
            **_tool_error(m.get("tool_error"), content), "answers_call": (m.get("answers") or {}).get("name"),
            "findings": [f.get("kind") for f in m.get("findings") or [] if isinstance(f, dict)] or None,
            }.items() if v is not None})
    findings = [{k: v for k, v in {"kind": f.get("kind"), "severity": f.get("severity"), "message": f.get("message"),
                                   "at_message": f.get("node")}.items() if v is not None}
                for f in d.get("findings") or [] if isinstance(f, dict)]
    rng = d.get("range") or {}
    page = link(r.get("url"))
    data = {k: v for k, v in {
        "run": run, "rollout": r.get("rollout_id"), "attempt": r.get("attempt"), "step": r.get("step"),
        "group": r.get("group_id"), "task": r.get("task_key"),
        "ending": {k: v for k, v in {"type": ending.get("type") or r.get("ending"),
                                     "detail": ending.get("detail") or r.get("ending_detail"),
                                     "message": ending.get("message")}.items() if v is not None},
        "reward": d.get("reward", r.get("reward")), "rewards": d.get("rewards") or None,
        "advantage": r.get("advantage"), "errors": d.get("errors") or None, "findings": findings,
        "no_gradient_reason": d.get("no_gradient_reason"), "branch": d.get("branch"),
        "branches": len(d.get("branches") or []) or None, "messages_total": d.get("messages_total"),
        "offset": d.get("offset"), "messages": messages, "next_offset": d.get("next_offset"),
        "url": page, "group_url": link(r.get("group_url"))}.items() if v is not None}
    e = data["ending"]
    where = ", ".join(f"{k} {v}" for k, v in (("run", run), ("step", r.get("step")), ("group", r.get("group_id")),
                                              ("task", r.get("task_key"))) if v is not None)
    lines = [f"Rollout {r.get('rollout_id')} ({where}): ending {e.get('type')}"
             + (f" ({e['detail']})" if e.get("detail") else "")
             + f", reward {num(data.get('reward'))}.",
             f"Ending message: {quote(e['message'])}" if e.get("message") else None]
    for err in d.get("errors") or []:
        if isinstance(err, dict):
            lines.append(f"Error: {err.get('type') or 'error'}: {quote(cut(err.get('message'), 500)[0])}")
    if findings:
        lines.append(f"{plural(len(findings), 'finding')}: " + "; ".join(
            f"{f['kind']}" + (f" at message {f['at_message']}" if f.get("at_message") is not None else "")
            + (f": {f['message']}" if f.get("message") else "") for f in findings[:10]))
    first, last, total = rng.get("first"), rng.get("last"), rng.get("total", d.get("messages_total"))
    lines.append(f"Messages {first}–{last} of {total} (branch {d.get('branch', 0)}); trace text is quoted as data:"
                 if messages else "No messages on this page.")
    for m in messages:
        head = f"[{m.get('message')}] {m.get('role')}" + (f" ({m['name']})" if m.get("name") else "")
        lines.append(head + ":")
        if m.get("reasoning"):
            lines.append(f"  reasoning: {quote(m['reasoning'])}" + (" [cut]" if m.get("reasoning_cut") else ""))
        if m.get("content"):
            shown = len(m["content"])
            more = (f" [cut at {shown:,} of {m.get('content_chars') or 0:,} characters: get_rollout with "
                    f"message={m.get('message')} and chars_from={shown} reads on]") if m.get("content_cut") else ""
            lines.append(f"  {quote(m['content'])}{more}")
        for c in m.get("tool_calls") or []:
            lines.append(f"  calls {c['name']}({c['arguments']})"
                         + ("" if c.get("result_message") is not None else " — no result recorded"))
        if m.get("tool_error"):
            lines.append(f"  tool error: {quote(m['tool_error'])}")
        elif m.get("tool_error_signal"):
            lines.append(f"  tool error ({TOOL_ERROR_SIGNALS.get(m['tool_error_signal'], m['tool_error_signal'])}, "
                         "no message)")
    if d.get("next_offset") is not None:
        lines.append(f"More messages: call get_rollout again with offset={d['next_offset']}.")
    lines.append(f"Page: {page}")
    return Answer(_lines(*lines), data)


def message_text_answer(text: str, *, run: str, rollout: str, message: int, chars_from: int, url: str | None,
                        max_chars: int = CHARS_PER_MESSAGE) -> Answer:
    """One message's full text (`/runs/{run}/nodes/{pk}/{idx}.txt`) from `chars_from`, `max_chars`
    at a time, with where the next piece starts."""
    piece = text[chars_from:chars_from + max_chars]
    end = chars_from + len(piece)
    nxt = end if end < len(text) else None
    data = {k: v for k, v in {"run": run, "rollout": rollout, "message": message, "chars_from": chars_from,
                              "chars_total": len(text), "text": piece, "next_chars_from": nxt,
                              "url": url}.items() if v is not None}
    lines = [f"Message {message} of rollout {rollout}: characters {chars_from:,}–{end:,} of {len(text):,} "
             "(trace text, quoted as data):", quote(piece)]
    if nxt is not None:
        lines.append(f"More: call get_rollout again with message={message} and chars_from={nxt}.")
    lines.append(f"Page: {url}")
    return Answer(_lines(*lines), data)


# --- search -------------------------------------------------------------------------------------------

def _snippet(segments: Any) -> str:
    """A snippet's segments (`{"text", "hit"}`) as text, each match in «»."""
    if isinstance(segments, str):
        return segments
    out = []
    for s in segments or []:
        if isinstance(s, dict):
            out.append(f"«{s.get('text', '')}»" if s.get("hit") else str(s.get("text", "")))
    return " ".join("".join(out).split())[:400]


def search_answer(d: dict, link: Link) -> Answer:
    """`/search.json?q=` → hits (per rollout when the twin groups them, with their matches; per
    message otherwise), facets by step and ending when present, and the next page's link."""
    hits = []
    for h in d.get("hits") or []:
        if not isinstance(h, dict):
            continue
        matches = h.get("matches")
        rows = matches if isinstance(matches, list) else [h]
        shown = [{k: v for k, v in {"message": m.get("node_idx", m.get("message")), "role": m.get("role"),
                                    "field": m.get("kind") or m.get("field"), "snippet": _snippet(m.get("snippet")),
                                    "partial": m.get("truncated") or m.get("partial"),
                                    "url": link(m.get("url"))}.items() if v not in (None, "")}
                 for m in rows if isinstance(m, dict)]
        hits.append({k: v for k, v in {
            "run": h.get("run_id") or h.get("run"), "rollout": h.get("rollout_id") or h.get("rollout"),
            "attempt": h.get("attempt") or None, "step": h.get("step"), "ending": h.get("ending"),
            "ending_detail": h.get("ending_detail"), "matches": shown,
            "count": h.get("count") if isinstance(matches, list) else None,
            "url": link(h.get("rollout_url") or h.get("url"))}.items() if v is not None})
    facets = d.get("facets") if isinstance(d.get("facets"), dict) else {}
    by_step = _pairs(facets.get("step") or facets.get("by_step") or facets.get("steps"))
    by_ending = _pairs(facets.get("ending") or facets.get("by_ending") or facets.get("endings"))
    query = d.get("q", d.get("query"))
    total = d.get("total_rollouts", d.get("total"))
    data = {k: v for k, v in {
        "query": query, "run": d.get("run"), "total": total, "hits": hits,
        "facets": {"step": dict(by_step), "ending": dict(by_ending)} if by_step or by_ending else None,
        "next_url": link(d.get("next_url")), "after": d.get("next") or _query_value(d.get("next_url"), "after"),
        "error": d.get("error") if isinstance(d.get("error"), str) else None,
        "url": link(_search_url(query, d.get("run")))}.items() if v is not None}
    unit = "rollout" if any(isinstance(h.get("matches"), list) for h in d.get("hits") or [] if isinstance(h, dict)) \
        else "message"
    where = f" in run {d['run']}" if d.get("run") else ""
    count = total if isinstance(total, int) else len(hits)
    lines = [f"{plural(count, 'hit')} for {quote(query)}{where}" + (f" ({plural(count, unit)})" if hits else "")
             + (f"; {len(hits)} on this page" if isinstance(total, int) and total > len(hits) else "") + "."]
    if data.get("error"):
        lines.append(str(data["error"]))
    notes = [n for n in d.get("notes") or [] if isinstance(n, str)]
    if notes:
        data["notes"] = notes
        lines.extend(f"Note: {n}" for n in notes[:5])
    if by_step:
        lines.append("By step: " + ", ".join(f"{k}: {v}" for k, v in by_step[:30]) + ".")
    if by_ending:
        lines.append("By ending: " + ", ".join(f"{k}: {v}" for k, v in by_ending) + ".")
    for h in hits[:ROWS_PER_ANSWER]:
        ending = f", {h['ending']}" + (f" ({h['ending_detail']})" if h.get("ending_detail") else "") \
            if h.get("ending") else ""
        where = ", ".join(x for x in (f"step {h['step']}" if h.get("step") is not None else None,
                                      ending.removeprefix(", ")) if x)
        lines.append(f"- {h.get('run')} / {h.get('rollout')}" + (f" ({where})" if where else "") + f" — {h.get('url')}")
        for m in h["matches"][:3]:
            where_ = f"message {m['message']}" if m.get("message") is not None else (m.get("field") or "match")
            lines.append(f"    {where_}" + (f" ({m['role']})" if m.get("role") else "")
                         + f": {quote(m.get('snippet', ''))}"
                         + (" [middle of a long text not indexed]" if m.get("partial") else ""))
    if data.get("after") is not None:
        lines.append(f"More: call search again with after={data['after']!r}.")
    lines.append(f"Page: {data.get('url')}")
    return Answer(_lines(*lines), data)


def _query_value(url: str | None, key: str) -> str | None:
    if not url or "?" not in url:
        return None
    from urllib.parse import parse_qs

    got = parse_qs(url.split("?", 1)[1]).get(key)
    return got[0] if got else None


def _search_url(query: Any, run: Any) -> str:
    from app import urls

    return urls.search(q=query if query else None, run=run or None)


# --- failure_signatures ----------------------------------------------------------------------------------

def _signature(s: dict, link: Link) -> dict:
    per_step = s.get("per_step") if isinstance(s.get("per_step"), dict) else None
    return {k: v for k, v in {
        "id": s.get("id"), "template": s.get("template"), "count": s.get("count"), "share": s.get("share"),
        "first_step": s.get("first_step"), "last_step": s.get("last_step"), "per_step": per_step,
        "new_at_step": s.get("new_at_step"),
        "examples": [{"rollout": e.get("rollout_id"), "url": link(e.get("url"))}
                     for e in s.get("examples") or [] if isinstance(e, dict)] or None,
        "rollouts_url": link(s.get("rollouts_url"))}.items() if v is not None}


def failures_answer(d: dict, link: Link, *, run: str) -> Answer:
    """`/runs/{run}/failures.json` → the run's failure signatures, most frequent first: template,
    count, share of failed rollouts, the steps it appeared at (per step), where it is new, examples."""
    sigs = [_signature(s, link) for s in d.get("signatures") or [] if isinstance(s, dict)]
    page = link(f"/runs/{_seg(run)}/failures")
    data = {k: v for k, v in {"run": run, "signatures": sigs, "other": d.get("other"), "url": page}.items()
            if v is not None}
    lines = [f"{plural(len(sigs), 'failure signature')} in run {run}" + (", most frequent first:" if sigs else ".")]
    for s in sigs[:20]:
        steps = _steps(s.get("first_step"), s.get("last_step"))
        per = s.get("per_step") or {}
        spread = (" (" + ", ".join(f"{k}: {v}" for k, v in list(per.items())[:12]) + ")") if per else ""
        new = f", new at step {s['new_at_step']}" if s.get("new_at_step") is not None else ""
        lines.append(f"- {quote(s.get('template'))}: {plural(s.get('count'), 'rollout')} "
                     f"({pct(s.get('share'))} of failed), "
                     f"{steps}{spread}{new} — {s.get('rollouts_url') or ''}".rstrip(" —"))
        for e in (s.get("examples") or [])[:2]:
            lines.append(f"    example {e.get('rollout')}: {e.get('url')}")
    lines.append(f"Page: {page}")
    return Answer(_lines(*lines), data)


# --- compare_runs ---------------------------------------------------------------------------------------

def compare_answer(d: dict, link: Link) -> Answer:
    """`/compare.json?runs=` → each run's totals, the endings that moved, and per task either the
    paired difference with its interval and verdict (when the twin has `paired`) or the change in
    mean reward (last run − first)."""
    runs = [{k: v for k, v in {"run": r.get("id"), "rollouts": r.get("rollouts"), "mean_reward": r.get("mean_reward"),
                               "mean_reward_no_errors": r.get("mean_reward_no_errors"),
                               "first_step": r.get("first_step"), "last_step": r.get("last_step"),
                               "url": link(r.get("url"))}.items() if v is not None}
            for r in d.get("runs") or [] if isinstance(r, dict)]
    ids = [r.get("run") for r in runs]
    endings = [{"ending": e.get("ending"), "shares": e.get("shares"), "delta": e.get("delta")}
               for e in d.get("endings") or [] if isinstance(e, dict)]
    paired = d.get("paired") if isinstance(d.get("paired"), dict) else None
    ptasks = []
    for t in (paired or {}).get("tasks") or []:
        if isinstance(t, dict):
            ptasks.append({k: (link(v) if k.endswith("url") and isinstance(v, str) else
                               [link(u) for u in v] if k == "urls" and isinstance(v, list) else v)
                           for k, v in t.items()})
    tasks = [{"task": t.get("task"), "mean_reward": t.get("mean_reward"), "delta": t.get("delta"),
              "urls": [link(u) for u in t.get("urls") or []]}
             for t in (d.get("tasks") or [])[:ROWS_PER_ANSWER] if isinstance(t, dict)]
    sign = (paired or {}).get("sign_test")
    page = link(_compare_url(ids, d.get("steps")))
    data = {k: v for k, v in {
        "runs": runs, "steps": d.get("steps") or None, "endings": endings,
        "paired": {k: v for k, v in {"tasks": ptasks, "sign_test": sign,
                                     "shared_tasks": paired.get("shared_tasks")}.items() if v is not None}
        if paired is not None else None,
        "tasks": tasks, "tasks_total": d.get("tasks_total"), "url": page}.items() if v is not None}
    lines = [f"Comparing {plural(len(runs), 'run')}" + (f" over steps {d['steps']}" if d.get("steps") else "") + ":"]
    lines += [f"- {r.get('run')}: {plural(r.get('rollouts'), 'rollout')}, mean reward {num(r.get('mean_reward'))} "
              f"({num(r.get('mean_reward_no_errors'))} with errors dropped) — {r.get('url')}" for r in runs]
    moved = [e for e in endings if e.get("delta")]
    if moved:
        lines.append("Endings (share, last − first run): " + ", ".join(
            f"{e['ending']} {'+' if e['delta'] > 0 else ''}{100 * e['delta']:.1f} pts" for e in moved) + ".")
    if paired is not None:
        shared = paired.get("shared_tasks")
        if shared == 0:
            lines.append(f"No task in common: none of the {plural(len(ptasks), 'task')} has scored rollouts in both "
                         "runs, so there is no paired difference and no sign test.")
        elif isinstance(sign, dict):
            lines.append("Sign test across tasks: " + ", ".join(f"{k} {num(v)}" for k, v in sign.items()
                                                                 if not isinstance(v, (dict, list))) + ".")
        lines.append(f"Paired difference per task ({plural(len(ptasks), 'task')}"
                     + (f", {plural(shared, 'task')} in both runs" if isinstance(shared, int) else "") + "):")
        for t in ptasks[:TOP * 2]:
            ci = (f" [{num(t.get('ci_low'))}, {num(t.get('ci_high'))}]"
                  if t.get("ci_low") is not None or t.get("ci_high") is not None else "")
            verdict = f" {t['verdict']}" if t.get("verdict") else ""
            note = f" ({t['note']})" if isinstance(t.get("note"), str) and t["note"] else ""
            lines.append(f"- {t.get('task')}: {num(t.get('diff'))}{ci}{verdict}{note}")
        if len(ptasks) > TOP * 2:
            lines.append(f"... and {plural(len(ptasks) - TOP * 2, 'more task')} (structured content has them all; "
                         "the page lists them).")
    else:
        note = d.get("paired_note") if isinstance(d.get("paired_note"), str) else None
        if note is None and len(runs) != 2:
            note = f"The paired comparison by task needs exactly two runs; {len(runs)} are compared."
        if note:
            data["paired_note"] = note
            lines.append(note)
        changed = [t for t in tasks if t.get("delta") is not None]
        if changed:
            lines.append("Tasks with the largest change in mean reward (last − first run): " + "; ".join(
                f"{t['task']} {num(t.get('delta'))}" for t in changed[:TOP]) + ".")
        elif tasks:
            lines.append("No task has a mean reward in both the first and the last run "
                         f"({plural(len(tasks), 'task')}).")
    lines.append(f"Page: {page}")
    return Answer(_lines(*lines), data)


def _compare_url(ids: list, steps: Any) -> str:
    from app import urls

    return urls.compare([str(i) for i in ids], steps=steps or None)
