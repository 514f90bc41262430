"""Serving an index over HTTP (``race serve``): the index service, the ASGI application,
the uvicorn transport, and admission limits."""
