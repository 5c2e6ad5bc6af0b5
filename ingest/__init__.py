"""Ingest: collector files → native rollouts → the store."""
