"""The operators' REST API. `v1/` is the only version; its OpenAPI document is at
`/api/openapi.json` and browsable at `/api/docs`."""
