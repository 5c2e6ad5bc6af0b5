"""Every URL the app emits: pages, their JSON twins, full-text views, static files.

One builder per resource (datasette's `url_builder.py` is the model), so a route and the links
to it change together. Ids are percent-encoded as one path segment (`/` → `%2F`; the app routes
on a path where `%2F`, `%2E` and `%25` stay encoded, see app.main.routing_path). Query parameters keep
the order given and drop `None` values; `json=True` gives the JSON twin (`.json` after the path).

Templates reach these builders as the Jinja global `urls` (app.render).
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote, quote_plus, urlencode

from starlette.requests import Request

from rollscope.paths import UNRESERVED, segment

q = segment  # one path segment (rollscope/paths.py): `/` encoded, an id's own trailing `.json` as `%2Ejson`


def _qv(value: Any) -> str:
    """A query value as urlencode writes it (quote_plus); most values need no quoting, and a run
    page builds thousands of links, so those skip it."""
    text = str(value)
    return text if UNRESERVED.match(text) else quote_plus(text)


def _url(path: str, json: bool, params: dict[str, Any]) -> str:
    query = "&".join(f"{_qv(k)}={_qv(x)}" for k, v in params.items() if v is not None
                     for x in (v if isinstance(v, list) else [v]))  # a list: the key repeated
    return path + (".json" if json else "") + (f"?{query}" if query else "")


def runs(*, json: bool = False) -> str:
    """The runs list."""
    return _url("/runs", json, {})


def run(run_id: str, *, json: bool = False) -> str:
    """A run's page (steps table and charts)."""
    return _url(f"/runs/{q(run_id)}", json, {})


def failures(run_id: str, *, json: bool = False) -> str:
    """A run's failure signatures (docs/failures.md)."""
    return _url(f"/runs/{q(run_id)}/failures", json, {})


def rollouts(run_id: str, *, json: bool = False, **params: Any) -> str:
    """A run's rollouts list; `params` are its filters and cursor (`step`, `ending`, `after`, ...)."""
    return _url(f"/runs/{q(run_id)}/rollouts", json, params)


def rollouts_csv(run_id: str, **params: Any) -> str:
    """Every rollout of the list with these filters and sort, as CSV."""
    return _url(f"/runs/{q(run_id)}/rollouts.csv", False, params)


def rollout(run_id: str, rollout_id: str, *, json: bool = False, **params: Any) -> str:
    """A rollout's page; `params`: `attempt` (else the latest attempt), `branch`, `offset`,
    `tokens`."""
    return _url(f"/runs/{q(run_id)}/rollouts/{q(rollout_id)}", json, params)


def group(run_id: str, group_id: str, *, json: bool = False) -> str:
    """A group's page (siblings and both baselines)."""
    return _url(f"/runs/{q(run_id)}/groups/{q(group_id)}", json, {})


def media(sha256: str) -> str:
    """`/media/{sha256}`: stored media bytes (app/routes/media.py)."""
    return f"/media/{sha256}"


def node_text(run_id: str, rollout_pk: int, idx: int, *, reveal: bool = False) -> str:
    """The full text of one message, as text/plain; `reveal=True` (`?reveal=1`, the page's "show
    full text" link) shows bidi controls and invisible characters as `⟨U+XXXX⟩` (app.text)."""
    return _url(f"/runs/{q(run_id)}/nodes/{int(rollout_pk)}/{int(idx)}.txt", False,
                {"reveal": 1 if reveal else None})


def quarantine(*, json: bool = False, **params: Any) -> str:
    """The quarantine list; `params`: `file`, `limit`, `before`."""
    return _url("/quarantine", json, params)


def ingest(*, json: bool = False) -> str:
    """The ingest status page (spool files, lag, errors)."""
    return _url("/ingest", json, {})


def api_rollouts(run_id: str, **params: Any) -> str:
    """The API's rollouts list of a run (`/api/v1/runs/{run}/rollouts`)."""
    return _url(f"/api/v1/runs/{q(run_id)}/rollouts", False, params)


def api_quarantine(**params: Any) -> str:
    """The API's quarantine list (`/api/v1/quarantine`); `params`: `file`, `limit`, `after`."""
    return _url("/api/v1/quarantine", False, params)


def api_branch_tokens(run_id: str, rollout_id: str, branch: int, **params: Any) -> str:
    """The API's token arrays of one branch (JSON, or a NumPy .npz with `Accept:
    application/x-ndarray`); `params`: `attempt`."""
    return _url(f"/api/v1/runs/{q(run_id)}/rollouts/{q(rollout_id)}/branches/{int(branch)}/tokens", False, params)


def api_findings(run_id: str, **params: Any) -> str:
    """The API's findings list of a run."""
    return _url(f"/api/v1/runs/{q(run_id)}/findings", False, params)


def step(run_id: str, step: int, *, json: bool = False) -> str:
    """A training step's story (endings with reasons, groups, tasks, no-gradient list)."""
    return _url(f"/runs/{q(run_id)}/steps/{int(step)}", json, {})


def chart(run_id: str, chart_id: str, *, ext: str = "", **params: Any) -> str:
    """One chart of a run (`ext` "" | ".json" | ".csv"); `params`: `steps`, `smooth`."""
    query = urlencode({k: v for k, v in params.items() if v not in (None, "", 1)})
    return f"/runs/{q(run_id)}/charts/{q(chart_id)}{ext}" + (f"?{query}" if query else "")


def task_changes(run_id: str, a: int, b: int, *, ext: str = "") -> str:
    """Tasks whose endings or mean reward changed between steps `a` and `b`."""
    return f"/runs/{q(run_id)}/task-changes{ext}?" + urlencode({"a": a, "b": b})


def _runs(run_ids: list[str]) -> str | list[str]:
    """The `runs` of a compare link: `a,b`, or `runs=` once per run when an id holds a comma."""
    return list(run_ids) if any("," in r for r in run_ids) else ",".join(run_ids)


def compare(run_ids: list[str], *, json: bool = False, **params: Any) -> str:
    """Runs overlaid on one step axis; `params`: `steps`, `smooth`, `paired_offset`."""
    return _url("/compare", json, {"runs": _runs(run_ids), **{k: v for k, v in params.items() if v not in ("", 1)}})


def compare_chart(chart_id: str, run_ids: list[str], suffix: str, **params: Any) -> str:
    """One chart of the runs overlaid, `suffix` `.json` (figure data) or `.csv`; `params`:
    `steps`, `smooth`."""
    return _url(f"/compare/charts/{q(chart_id)}{suffix}", False,
                {"runs": _runs(run_ids), **{k: v for k, v in params.items() if v not in (None, "", 1)}})


def compare_task(run_ids: list[str], task: str, *, json: bool = False, **params: Any) -> str:
    """Two runs' rollouts of one task side by side; `params`: `steps`."""
    return _url("/compare/task", json, {"runs": _runs(run_ids), "task": task, **params})


def search(*, json: bool = False, **params: Any) -> str:
    """The search page (docs/search.md); `params`: `q`, `run`, `steps`, `ending`, `role`, `kind`,
    `flag`, `after`, `limit`."""
    return _url("/search", json, params)


def message(run_id: str, rollout_pk: int, idx: int) -> str:
    """The deep link to one message (redirects to its branch, page and anchor)."""
    return f"/runs/{q(run_id)}/messages/{int(rollout_pk)}/{int(idx)}"


def api_docs() -> str:
    """The API's documentation (Swagger UI over the OpenAPI document)."""
    return "/api/docs"


def static(path: str) -> str:
    """A file under static/, versioned: vendored libraries carry their version in the name, our
    own files get `?v=<content hash>` (app.static_files: served with a year's immutable cache)."""
    from app.static_files import VERSIONED_DIR, version

    if path.startswith(VERSIONED_DIR):
        return f"/static/{path}"
    v = version(path)
    return f"/static/{path}" + (f"?v={v}" if v else "")


def twin(request: Request) -> str:
    """The JSON twin of the page being served: the path as the client sent it (ids keep their
    escapes), then `.json`, then the query string."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(request.url.path)
    return path + ".json" + (("?" + request.url.query) if request.url.query else "")
