"""Read-your-writes with a read replica: a client that just wrote (a label, a note, an ingest, a
delete) never reads a page older than its write.

Every successful write response (any method but GET, HEAD and OPTIONS, status below 400) carries
the primary's WAL position taken after the write committed, `pg_current_wal_insert_lsn()`, as the
`Rollscope-LSN` header and the `rollscope_lsn` cookie (`Path=/`, HttpOnly, `SameSite=Lax`,
`COOKIE_SECONDS`). A later read that sends either back (the header wins) is served by the replica
only once it has replayed that far (app.db.replica), else by the primary. Browsers and
`rollscope.client.Client` (an httpx client keeps cookies) send the cookie by themselves; other
API clients may copy the header. Only with `ROLLSCOPE_DB__READ_URL` set: without a replica every
read is on the primary and nothing is added.
"""
from __future__ import annotations

import logging

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from app.asgi import HttpMiddleware
from app.db.replica import ReadRouting, format_lsn, parse_lsn

LSN_HEADER = "Rollscope-LSN"
LSN_COOKIE = "rollscope_lsn"
COOKIE_SECONDS = 3600  # past this a replica lagging so far is skipped for its lag anyway
READS = ("GET", "HEAD", "OPTIONS")
log = logging.getLogger("rollscope.replica")


def client_lsn(request: Request) -> int | None:
    """The WAL position of the client's last write, from the `Rollscope-LSN` header or else the
    `rollscope_lsn` cookie; None when it sent neither, or text that is no LSN."""
    return parse_lsn(request.headers.get(LSN_HEADER)) or parse_lsn(request.cookies.get(LSN_COOKIE))


class StampWrites(HttpMiddleware):
    """ASGI middleware: a successful write's response gets the primary's LSN (module docstring).
    The LSN is read when the response starts, after the endpoint returned: its transaction has
    committed by then (app.deps.Writer commits before it returns; ingest writes batch by batch)."""

    def __init__(self, app, *, routing: ReadRouting):
        super().__init__(app)
        self.routing = routing

    async def http(self, scope, receive, send):
        if scope["method"] in READS:
            await self.app(scope, receive, send)
            return

        async def send_stamped(message):
            if message["type"] == "http.response.start" and message["status"] < 400:
                try:
                    lsn = format_lsn(await run_in_threadpool(self.routing.primary_lsn))
                except Exception as exc:  # noqa: BLE001 - the write stands; only the stamp is lost
                    log.warning("no LSN for the write's response: %s", exc)
                else:
                    cookie = f"{LSN_COOKIE}={lsn}; Path=/; Max-Age={COOKIE_SECONDS}; HttpOnly; SameSite=Lax"
                    message = {**message, "headers": [*message.get("headers", []),
                                                      (LSN_HEADER.lower().encode(), lsn.encode()),
                                                      (b"set-cookie", cookie.encode())]}
            await send(message)

        await self.app(scope, receive, send_stamped)

