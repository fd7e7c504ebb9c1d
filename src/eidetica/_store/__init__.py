"""The embedded store's services behind the ``Memory`` facade (``memory.py``): context, search, audit,
revert, erasure and compaction, as-of views, re-embedding and re-extraction, items, pending writes,
read-only handles, export and import. The facade imports them; they never import the facade.
"""
