"""A client process for the many-writers and crash tests.

argv: url, key, writer id, count, ack file, sessions. Appends ``count`` messages
round-robin into the shared sessions, each with an event id derived from (writer, i).
Every 10th append is first sent on a raw socket that is closed before the answer (the
answer is lost, the write may or may not have happened), then retried through the client
with the same event id. A write acknowledged with a 2xx is recorded in the ack file.
The client keeps retrying the same write while the server is down (a crash test restarts it).
"""

import socket
import sys
import time
import uuid
from urllib.parse import urlparse

import httpx
import msgspec

import eidetica

url, key, writer, count, ack_path, sessions = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
NS = uuid.UUID("6f1c2a8e-0000-4000-8000-000000000000")


def lost_answer(path: str, body: dict) -> None:
    """Send the request, then hang up before reading the answer."""
    u = urlparse(url)
    data = msgspec.json.encode(body)
    req = (f"POST {path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nAuthorization: Bearer {key}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data
    try:
        with socket.create_connection((u.hostname, u.port), timeout=5) as s:
            s.sendall(req)
    except OSError:
        pass


def main() -> None:
    m = None
    with open(ack_path, "a") as acks:
        for i in range(count):
            sid = f"shared-{i % sessions}"
            content = f"w{writer} m{i}"
            eid = uuid.uuid5(NS, f"{writer}-{i}")
            if i % 10 == 5:
                lost_answer(f"/v1/users/u/sessions/{sid}/messages",
                            {"messages": [{"role": "user", "content": content, "event_id": str(eid)}]})
            deadline = time.monotonic() + 180
            while True:
                try:
                    if m is None:
                        m = eidetica.connect(url, api_key=key, retries=2)
                    m.session(sid, user="u").append("user", content, event_id=eid)
                    break
                except (httpx.TransportError, eidetica.EideticaError) as e:
                    if time.monotonic() > deadline or isinstance(e, eidetica.InvalidInput):
                        raise
                    time.sleep(0.2)  # the server is restarting: resume when it is back
            acks.write(content + "\n")
            acks.flush()


main()
