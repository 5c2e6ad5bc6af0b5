"""Where the API's routes live: every `/api/v1` route is served by a module of app/api/v1/ (none
by the pages, ops or receivers' routers) and declares the bearer token (the read check is on the
router, app/api/v1/__init__.py): required by a write, optional on an open read (what the
document says of each: tests/api/test_http_semantics.py)."""
from __future__ import annotations


def test_every_api_route_lives_in_api_v1_and_declares_the_token(client):
    from app.receivers import otlp
    from app.routes import analytics, pages, status

    for router in (analytics.router, pages.router, status.router, otlp.router):
        assert not [r.path for r in router.routes if r.path.startswith("/api/")], router
    spec = client.app.openapi()
    ops = [(m, p, op) for p, o in spec["paths"].items() if p.startswith("/api/v1") for m, op in o.items()]
    assert len(ops) > 20
    for method, path, op in ops:
        assert {"HTTPBearer": []} in op.get("security", []), (method, path)
