"""The alerts webhook: a JSON POST to `alerts.webhook_url` (ROLLSCOPE_ALERTS__WEBHOOK_URL).

Placeholder of the `alerts` branch with the interface the `workers` branch implements (that
version is kept at merge): `deliver(engine, settings, kind, key, payload) -> bool` sends each
(kind, key) once, from a daemon thread, and never blocks the caller.
"""
from __future__ import annotations

import json
import threading
import urllib.request

_sent: set[tuple[str, str]] = set()
_lock = threading.Lock()


def deliver(engine, settings, kind: str, key: str, payload: dict) -> bool:
    """POST `{"kind": kind, "key": key, **payload}` as JSON to the webhook, once per (kind, key)
    in this process, in a daemon thread. True when a delivery was started; False when no webhook
    is set or this (kind, key) was already sent. Errors of the POST are swallowed (logged by
    the real implementation)."""
    url = getattr(getattr(settings, "alerts", None), "webhook_url", None)
    if not url:
        return False
    with _lock:
        if (kind, key) in _sent:
            return False
        _sent.add((kind, key))
    timeout = getattr(settings.alerts, "webhook_timeout_seconds", 5.0)
    body = json.dumps({"kind": kind, "key": key, **payload}).encode()

    def post() -> None:
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
        try:
            urllib.request.urlopen(req, timeout=timeout).close()
        except Exception:  # noqa: BLE001 - a receiver that is down never affects ingest
            pass

    threading.Thread(target=post, name="rollscope-webhook", daemon=True).start()
    return True
