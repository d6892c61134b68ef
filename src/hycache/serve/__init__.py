"""``hycache serve``: an OpenAI-compatible HTTP server on the reference engine.

Needs the ``[serve]`` extra (FastAPI, uvicorn, prometheus_client, tokenizers) on top of
``[engine]``. Importing this package imports none of them; its modules do.

Modules:

* ``config``: ``ServeConfig``, the settings of one server;
* ``tokenizer``: the checkpoint's tokenizer, the chat template, incremental detokenizing and
  stop strings;
* ``schemas``: the request bodies (pydantic) and the response payloads;
* ``runtime``: ``Runtime``, what a server holds (model, cache, engine on its scheduler thread,
  sessions, metrics) and the request ids;
* ``stream``: ``RequestStream``, one request's events carried from the scheduler thread to
  the event loop;
* ``sessions``: sessions (``user`` or ``X-Session-Id``) ended after an idle gap;
* ``metrics``: ``/metrics`` in the vLLM style, KV and state hits apart;
* ``routes``: ``/v1/completions`` and ``/v1/chat/completions`` (SSE streaming and not);
* ``app``: the FastAPI application, error mapping, ``/v1/models``, ``/health``, ``/metrics``,
  ``/admin/check``;
* ``server``: running it under uvicorn; SIGTERM drains in-flight requests and exits 0.
"""
