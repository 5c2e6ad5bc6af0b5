"""Python clients of a Rollscope server, for training code and scripts: standard library and
httpx only. `api.Client` reads (and labels, notes, deletes) through /api/v1."""
from app.client.api import ApiError, Client

__all__ = ["ApiError", "Client"]
