"""Alerts sent out of Rollscope (the webhook)."""
