"""API keys: ``ek_<id>_<secret>``, stored only as a salted hash in ``<store>/keys.json`` (0600).

The key id is public (it names the record, so a lookup needs no scan); the secret is
256 random bits, so one round of salted SHA-256 is enough (a slow KDF guards guessable
passwords, not random keys) and keeps verification off the request's critical path.
Hashes are compared with ``hmac.compare_digest``. The file is re-read when it changes,
so a key revoked by ``eidetica keys revoke`` is refused by a running server at once.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any

from .._util.fs import write_atomic
from ..actors._text import check_id
from ..errors import InvalidInput, NotFound, Unauthorized

__all__ = ["KeyStore", "KEYS_FILE"]

KEYS_FILE = "keys.json"


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


class KeyStore:
    """The store's API keys: create, list, revoke, and verify a bearer key to its tenant."""

    def __init__(self, store: str | os.PathLike[str]) -> None:
        self.path = Path(store) / KEYS_FILE
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._records: dict[str, dict[str, Any]] = {}

    # -- the file ----------------------------------------------------------------------
    def _load(self) -> dict[str, dict[str, Any]]:
        """The records, re-read only when the file changed (a stat per request)."""
        try:
            st = os.stat(self.path)
            sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            sig = None
        with self._lock:
            if sig != self._seen:
                self._records = json.loads(self.path.read_text()) if sig else {}
                self._seen = sig
            return self._records

    def _update(self, change: Any) -> Any:
        """Apply ``change(records)`` under an exclusive file lock; write atomically with mode 0600."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.path.with_suffix(".lock"), "a") as lockf:
            fcntl.flock(lockf, fcntl.LOCK_EX)
            records = json.loads(self.path.read_text()) if self.path.exists() else {}
            out = change(records)
            write_atomic(self.path, json.dumps(records, indent=1), mode=0o600)
        return out

    # -- operations --------------------------------------------------------------------
    def create(self, tenant: str, name: str = "", *, operator: bool = False) -> tuple[str, str]:
        """Make a key for ``tenant``; returns (key id, the key). The key is not stored anywhere.

        ``operator``: the key also reads store-wide figures (``/metrics``) from anywhere; as an
        API key it still acts in its own tenant only.
        """
        check_id("tenant", tenant)
        if not isinstance(name, str) or len(name) > 200:
            raise InvalidInput("name", "must be a string of at most 200 characters", name)
        if not isinstance(operator, bool):
            raise InvalidInput("operator", "must be a bool", operator)
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_hex(16)
        record = {"tenant": tenant, "name": name, "salt": salt, "hash": _digest(salt, secret),
                  "created": dt.datetime.now(dt.timezone.utc).isoformat()}
        if operator:
            record["operator"] = True
        self._update(lambda r: r.__setitem__(key_id, record))
        return key_id, f"ek_{key_id}_{secret}"

    def list(self) -> list[dict[str, Any]]:
        """Key ids with their tenant, name and creation time (never a hash or a key)."""
        return [{"id": k, "tenant": r["tenant"], "name": r.get("name", ""), "created": r.get("created", ""),
                 "operator": bool(r.get("operator", False))}
                for k, r in sorted(self._load().items(), key=lambda kv: kv[1].get("created", ""))]

    def revoke(self, key_id: str) -> None:
        """Remove a key (by its id, or the whole key); requests with it get 401 from now on."""
        kid = key_id.split("_")[1] if key_id.startswith("ek_") and key_id.count("_") >= 2 else key_id

        def drop(records: dict[str, Any]) -> None:
            if kid not in records:
                raise NotFound("key", kid)
            del records[kid]

        self._update(drop)

    def active(self) -> bool:
        """True when at least one key exists (then every request must carry one)."""
        return bool(self._load())

    def name_of(self, key: str | None) -> str:
        """The name of an (already authenticated) key, else its public id; "" without one."""
        parts = (key or "").split("_", 2)
        if len(parts) != 3 or parts[0] != "ek":
            return ""
        record = self._load().get(parts[1]) or {}
        return record.get("name") or parts[1]

    def tenant_of(self, key: str | None) -> str:
        """The tenant a bearer key acts for; ``Unauthorized`` when it is missing, unknown or revoked."""
        return self._record(key)["tenant"]

    def is_operator(self, key: str | None) -> bool:
        """Whether a valid key is an operator's (may read ``/metrics``); ``Unauthorized`` when it is not valid."""
        return bool(self._record(key).get("operator", False))

    def _record(self, key: str | None) -> dict[str, Any]:
        """The record of a valid bearer key; ``Unauthorized`` when it is missing, unknown or revoked."""
        if not key:
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        parts = key.split("_", 2)
        record = self._load().get(parts[1]) if len(parts) == 3 and parts[0] == "ek" else None
        # compare even for an unknown id, so timing does not tell which ids exist
        salt, want = (record["salt"], record["hash"]) if record else ("00" * 16, "0" * 64)
        ok = hmac.compare_digest(_digest(salt, parts[-1]), want)
        if record is None or not ok:
            raise Unauthorized("unknown or revoked API key")
        return record
