"""Receivers: endpoints that take traces in a wire protocol specified elsewhere (OTLP/HTTP
`/v1/traces`), check the request, decode it and hand the spans on; nothing else. The body
reader they share with `POST /api/v1/ingest` is `app.receivers.body`."""
