"""Rollscope web app: storage, queries and the dashboard."""
