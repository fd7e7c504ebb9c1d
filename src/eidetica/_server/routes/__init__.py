"""The HTTP API's routes: one ``APIRouter`` per resource, each built by ``router(api)`` (``common.Api``:
the served memory, the keys, the tenant's memory per request); ``_app.create_app`` assembles them.
``append`` is the lean path of a session's append (the hot path), outside FastAPI's machinery.
"""
