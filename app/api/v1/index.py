"""`GET /api/v1`: where to start: the OpenAPI document, the browsable docs and the top-level
resources, so a person or a script that opens the API's root is not met by a 404."""
from __future__ import annotations

from pydantic import BaseModel


class ApiIndex(BaseModel):
    """Links (paths on this server) to the API's description and its top-level resources."""

    version: str = "v1"
    openapi: str = "/api/openapi.json"
    docs: str = "/api/docs"
    runs: str = "/api/v1/runs"


def api_index() -> ApiIndex:
    """The API's root: links to its OpenAPI description, its docs page and the runs."""
    return ApiIndex()
