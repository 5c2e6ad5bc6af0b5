"""Alerts sent out: each recorded once and POSTed to the webhook (webhook.py); the serve
process's watcher of stale spool workers (watcher.py)."""
