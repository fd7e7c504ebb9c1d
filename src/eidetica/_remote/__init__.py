"""The client side of the server: ``connect()`` (``client``), the async faces (``aio``, ``aclient``) and what crosses the wire (``wire``)."""
