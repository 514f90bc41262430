"""Serving an index over HTTP (``race serve``): the server's start and stop, the index service
behind the routes, the ASGI application, the uvicorn transport, and the bounds it keeps."""
