"""The jupyter_server side of jupyter_gpuqueue.

- ``app.GpuQueueApp``: the ExtensionApp (configuration traits, service lifecycle);
- ``handlers``: the REST API under ``{base_url}gpuqueue/api/`` (docs/rest-api.md);
- ``events``: the websocket event stream ``gpuqueue/api/events``;
- ``openapi.yaml``: the OpenAPI 3 document, served at ``gpuqueue/api/openapi.json``.
"""
