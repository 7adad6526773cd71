"""Local HTTP servers that stand in for the monitors runs check in with.

No test reaches the network: Sentry's envelope endpoint, a healthchecks.io
style ping server and a webhook are each a ``Receiver`` on 127.0.0.1 that
records what it was sent, and judges it as the real service would: which of
a monitor's expected check-ins never came (``SentryView.missed()``,
``PingView.state()``). A receiver can also hang (accept, never answer) to
play a monitor that is down without saying so.
"""

from __future__ import annotations

import datetime
import gzip
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """One request as it arrived, and when (``time.time()``)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """A threaded HTTP server on a free port of 127.0.0.1 that answers 200,
    or never answers while ``hanging`` is set."""

    received: list[Received] = field(default_factory=list)
    hanging: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._take()

            def do_POST(self) -> None:
                self._take()

            def _take(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                url = urllib.parse.urlsplit(self.path)
                receiver.received.append(
                    Received(
                        self.command,
                        url.path,
                        dict(urllib.parse.parse_qsl(url.query)),
                        dict(self.headers),
                        body,
                        time.time(),
                    )
                )
                if receiver.hanging.is_set():
                    receiver.stopped.wait(60)  # Hold the connection open, answer nothing.
                    return
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.stopped = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        port = self.server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()


def sentry_dsn(receiver: Receiver) -> str:
    """A DSN whose envelopes sentry-sdk posts to ``receiver`` (project 1)."""
    return receiver.url.replace("http://", "http://public@") + "/1"


def check_ins(receiver: Receiver) -> list[dict[str, Any]]:
    """The check-ins in the envelopes Sentry's endpoint received, in order,
    each with when it arrived (``_at``, ``time.time()``).

    An envelope is a header line, then items: a header line each (its
    ``type``, and ``length`` when given) and its payload.
    """
    found = []
    for request in receiver.received:
        if not request.path.endswith("/envelope/"):
            continue
        lines = request.body.split(b"\n")
        position = 1
        while position < len(lines) and lines[position]:
            header = json.loads(lines[position])
            payload = lines[position + 1]
            if header.get("type") == "check_in":
                found.append({**json.loads(payload), "_at": request.at})
            position += 2
    return found


@dataclass(frozen=True)
class SentryView:
    """What Sentry Crons tells from one monitor's check-ins and the schedule
    its ``monitor_config`` gave: an expected check-in that did not come
    within the margin is missed."""

    check_ins: list[dict[str, Any]]

    def last_check_in(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.check_ins[-1]["_at"], datetime.timezone.utc)

    def missed(self, now: datetime.datetime) -> list[datetime.datetime]:
        """The expected check-in whose margin was over by ``now`` with none:
        an interval's next is due one interval after the last check-in."""
        config = self.check_ins[0]["monitor_config"]
        schedule = config["schedule"]
        assert schedule["type"] == "interval", "the tests' monitors are told intervals"
        margin = datetime.timedelta(minutes=config["checkin_margin"])
        interval = datetime.timedelta(**{f"{schedule['unit']}s": schedule["value"]})
        due = self.last_check_in() + interval
        return [due] if due + margin < now else []


@dataclass(frozen=True)
class PingView:
    """What a healthchecks.io check tells from its pings, with the period and
    grace set on the server (a ping carries neither)."""

    pings: list[Received]
    period: datetime.timedelta
    grace: datetime.timedelta

    def state(self, at: float) -> str:
        """``new`` before any ping; ``down`` after a failure, or once
        ``period + grace`` passed since the last success with none since
        (healthchecks' "down": a missed run); else ``up``."""
        pings = [ping for ping in self.pings if ping.at <= at]
        ends = [ping for ping in pings if not ping.path.endswith("/start")]
        if not ends:
            return "new"
        last = ends[-1]
        if last.path.endswith("/fail"):
            return "down"
        late = (self.period + self.grace).total_seconds()
        return "down" if at - last.at > late else "up"
