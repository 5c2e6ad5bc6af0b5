"""Every URL the app emits: pages, their JSON twins, full-text views, static files.

One builder per resource (datasette's `url_builder.py` is the model), so a route and the links
to it change together. Ids are percent-encoded as one path segment (`/` → `%2F`; the app routes
on a path where `%2F` and `%25` stay encoded, see app.main.routing_path). Query parameters keep
the order given and drop `None` values; `json=True` gives the JSON twin (`.json` after the path).

Templates reach these builders as the Jinja global `urls` (app.render).
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request


def q(value: Any) -> str:
    """One path segment: every reserved character encoded, `/` included."""
    return quote(str(value), safe="")


def _url(path: str, json: bool, params: dict[str, Any]) -> str:
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return path + (".json" if json else "") + (f"?{query}" if query else "")


def runs(*, json: bool = False) -> str:
    """The runs list."""
    return _url("/runs", json, {})


def run(run_id: str, *, json: bool = False) -> str:
    """A run's page (steps table and charts)."""
    return _url(f"/runs/{q(run_id)}", json, {})


def rollouts(run_id: str, *, json: bool = False, **params: Any) -> str:
    """A run's rollouts list; `params` are its filters and cursor (`step`, `ending`, `after`, ...)."""
    return _url(f"/runs/{q(run_id)}/rollouts", json, params)


def rollout(run_id: str, rollout_id: str, *, json: bool = False, **params: Any) -> str:
    """A rollout's page; `params`: `attempt` (else the latest attempt), `branch`, `offset`,
    `tokens`."""
    return _url(f"/runs/{q(run_id)}/rollouts/{q(rollout_id)}", json, params)


def group(run_id: str, group_id: str, *, json: bool = False) -> str:
    """A group's page (siblings and both baselines)."""
    return _url(f"/runs/{q(run_id)}/groups/{q(group_id)}", json, {})


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


def api_findings(run_id: str, **params: Any) -> str:
    """The API's findings list of a run."""
    return _url(f"/api/v1/runs/{q(run_id)}/findings", False, params)


def static(path: str) -> str:
    """A file under static/ (vendored libraries included)."""
    return f"/static/{path}"


def twin(request: Request) -> str:
    """The JSON twin of the page being served: the path as the client sent it (ids keep their
    escapes), then `.json`, then the query string."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(request.url.path)
    return path + ".json" + (("?" + request.url.query) if request.url.query else "")
