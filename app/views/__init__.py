"""Page models: each page's data as one typed pydantic model, built from the queries (app/queries)
and the trace library (ingest). The HTML template renders the model, the htmx block renders part
of it, and the JSON twin is its JSON dump; /api/v1 serves the same models.

No HTML and no SQL here: URLs come from app.urls, rows from app.queries. One module per page
family: runs (runs list, run page), rollouts (the list), rollout (one rollout), groups,
quarantine; `common` holds the shared row model and number helpers.
"""
