"""Bases of the plain ASGI middlewares (app.main, app.routes.status). Plain ASGI rather than
`@app.middleware("http")`, which wraps every request in a task group and memory streams: a cost
per request that bench/load.py measures under load."""
from __future__ import annotations

import time
from abc import ABC, abstractmethod


class HttpMiddleware:
    """Passes every non-HTTP scope (lifespan) straight through; subclasses implement `http`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope, receive, send):
        await self.app(scope, receive, send)


class Observed(HttpMiddleware, ABC):
    """Calls `observe(scope, status, seconds)` after each HTTP request: the response's status
    (500 when none was sent) and the time from the request to the end of the response."""

    @abstractmethod
    def observe(self, scope, status: int, seconds: float) -> None:
        """What to record of one request (each subclass: a log line, a latency histogram)."""

    async def http(self, scope, receive, send):
        started = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.observe(scope, status, time.perf_counter() - started)
