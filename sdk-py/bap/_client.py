"""Transport of the BAP SDK: HTTP over TCP or a Unix socket, retries, idempotency keys, problems.

Stdlib only (http.client). The operation methods come from ``_generated.Operations``.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import http.client
import json
import os
import random
import socket
import ssl
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional, Union
from urllib.parse import quote, urlencode, urlsplit

from ._credentials import ClientCredentials
from ._generated import Operations

__all__ = ["Blob", "Client", "ProblemError", "new_idempotency_key"]

_RETRY_STATUSES = (429, 503)
_MAX_WAIT = 30.0


class ProblemError(Exception):
    """An error answer of the server: an RFC 9457 problem (``application/problem+json``).

    ``status`` is the HTTP status; ``code`` the stable machine code (``"not_found"``, …), or
    ``None`` when the answer was not a problem document. ``problem`` is the decoded document
    (with ``errors`` or ``receipt`` when present), ``body`` the raw bytes.
    """

    def __init__(
        self,
        status: int,
        body: bytes = b"",
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers: dict[str, str] = dict(headers or {})
        self.problem: Optional[dict[str, Any]] = None
        ctype = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype in ("application/problem+json", "application/json"):
            try:
                doc = json.loads(body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                doc = None
            if isinstance(doc, dict):
                self.problem = doc
        p = self.problem or {}
        self.code: Optional[str] = p.get("code") if isinstance(p.get("code"), str) else None
        self.title: Optional[str] = p.get("title") if isinstance(p.get("title"), str) else None
        self.detail: Optional[str] = p.get("detail") if isinstance(p.get("detail"), str) else None
        self.type: Optional[str] = p.get("type") if isinstance(p.get("type"), str) else None
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"bap: {self.status}"
        if self.code:
            text += f" {self.code}"
        if self.detail:
            text += f": {self.detail}"
        elif self.title:
            text += f": {self.title}"
        return text

    def __repr__(self) -> str:
        return f"ProblemError(status={self.status!r}, code={self.code!r}, detail={self.detail!r})"


class DigestMismatchError(Exception):
    """The bytes of an artifact do not match the ``Repr-Digest`` the server sent."""


@dataclass(frozen=True)
class Blob:
    """The answer of ``get_artifact``: the bytes, their media type and SHA-256 digest."""

    body: bytes
    media_type: str
    sha256: str
    """Lowercase hex digest of ``body``, checked against ``Repr-Digest`` when present."""
    repr_digest: Optional[str] = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)


def new_idempotency_key() -> str:
    """A new RFC 9562 UUID version 7 (time-ordered, 74 random bits)."""
    ms = time.time_ns() // 1_000_000
    rnd = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rnd >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rnd & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


TokenSource = Callable[[], Optional[str]]


class Client(Operations):
    """A client of one BAP server.

    ``base_url`` is e.g. ``"http://127.0.0.1:7777"`` (a path prefix is kept); with
    ``unix_socket`` (the local profile's ``<data-dir>/bap.sock``) requests go through the socket
    and ``base_url`` may be ``""``. ``token`` is a bearer token, or a callable returning one
    before every attempt; or ``client_credentials`` (a ``bap.ClientCredentials``, or a dict of its
    arguments: ``token_url``, ``client_id``, ``client_secret``, ``resource``, ``scope``) gets and
    caches OAuth tokens itself (a 401 drops the cached token and the call is retried once).
    ``max_attempts`` bounds the client's own retries (network errors, 409
    ``idempotency_in_flight``, 429 and 503, honouring ``Retry-After``); mutating calls reuse the
    same ``Idempotency-Key`` on every attempt.
    """

    def __init__(
        self,
        base_url: str = "",
        token: Union[str, TokenSource, None] = None,
        timeout: float = 30,
        unix_socket: Optional[str] = None,
        max_attempts: int = 3,
        user_agent: str = "bap-sdk-py",
        ssl_context: Optional[ssl.SSLContext] = None,
        client_credentials: Union[ClientCredentials, Mapping[str, Any], None] = None,
    ) -> None:
        if not base_url:
            if not unix_socket:
                raise ValueError("base_url is required unless unix_socket is given")
            base_url = "http://localhost"
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._credentials: Optional[ClientCredentials] = None
        if client_credentials is not None:
            if token is not None:
                raise ValueError("give token or client_credentials, not both")
            if not isinstance(client_credentials, ClientCredentials):
                client_credentials = ClientCredentials(**dict(client_credentials), ssl_context=ssl_context)
            self._credentials = client_credentials
            token = client_credentials
        self._token = token
        self.timeout = timeout
        self.unix_socket = unix_socket
        self.max_attempts = max(1, int(max_attempts))
        self.user_agent = user_agent
        self._ssl_context = ssl_context
        # Wait before retry n (1-based) when the answer gives no Retry-After; tests shorten it.
        self._backoff: Callable[[int], float] = _default_backoff

    # -- transport -------------------------------------------------------------------------

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.unix_socket:
            return _UnixHTTPConnection(self.unix_socket, timeout)
        if self._scheme == "https":
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=self._ssl_context
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _bearer(self) -> Optional[str]:
        if self._token is None:
            return None
        if callable(self._token):
            return self._token()
        return self._token

    def _request(
        self,
        op: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        has_body: bool = False,
        query: Optional[dict[str, Any]] = None,
        mutating: bool = False,
        idempotency_key: Optional[str] = None,
        binary: bool = False,
        timeout: Optional[float] = None,
    ) -> Any:
        payload: Optional[bytes] = None
        if has_body:
            payload = json.dumps({} if body is None else body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        target = self._prefix + path
        params = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        if params:
            target += "?" + urlencode(params)
        headers = {"Accept": "*/*" if binary else "application/json", "User-Agent": self.user_agent}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if mutating:
            headers["Idempotency-Key"] = idempotency_key or new_idempotency_key()
        if self.unix_socket is None:
            headers["Host"] = self._host if self._port is None else f"{self._host}:{self._port}"
        else:
            headers["Host"] = "localhost"
        wait_timeout = self.timeout if timeout is None else timeout

        attempt = 0
        reauthenticated = False
        while True:
            attempt += 1
            token = self._bearer()
            if token:
                headers["Authorization"] = "Bearer " + token
            try:
                status, resp_headers, data = self._send(method, target, payload, headers, wait_timeout)
            except (OSError, http.client.HTTPException) as exc:
                if attempt >= self.max_attempts:
                    raise ConnectionError(f"bap: {op}: {exc}") from exc
                time.sleep(self._backoff(attempt))
                continue
            if 200 <= status < 300:
                if binary:
                    return _blob(op, data, resp_headers)
                if not data:
                    return None
                return json.loads(data.decode("utf-8"))
            err = ProblemError(status, data, resp_headers)
            if status == 401 and self._credentials is not None and not reauthenticated:
                # The cached token was revoked or expired early: once more with a fresh one.
                reauthenticated = True
                self._credentials.invalidate()
                continue
            if attempt < self.max_attempts and _retryable(err):
                delay = _retry_after(resp_headers.get("retry-after"))
                if delay is None:
                    delay = self._backoff(attempt)
                if delay <= _MAX_WAIT:
                    time.sleep(delay)
                    continue
            raise err

    # -- event streams ---------------------------------------------------------------------

    def subscribe(self, task_id: str, after: int = 0, *, read_timeout: float = 60.0) -> Iterator[dict[str, Any]]:
        """Follow one task's events with ``seq > after`` over Server-Sent Events.

        A generator that resumes by itself: when the connection drops (or stays silent longer
        than ``read_timeout``; the server sends keep-alives every 15 s) or the server restarts, it
        reconnects with the last seq it yielded (``Last-Event-ID``), so each event is yielded
        exactly once, in seq order. A problem a reconnect cannot fix (400, 401, 403, 404) is raised
        as ``ProblemError``. Stop it by leaving the loop (or ``close()``)::

            for event in client.subscribe(task_id):
                print(event["seq"], event["type"])
        """
        last = after

        def accept(_id: Optional[str], event: Optional[dict[str, Any]]) -> bool:
            nonlocal last
            if event is None or event["seq"] <= last:
                return False
            last = event["seq"]
            return True

        path = "/bap/v1/tasks/" + quote(task_id, safe="") + "/events/stream"
        yield from self._follow(path, lambda: str(last), accept, read_timeout)

    def subscribe_all(self, cursor: Optional[str] = None, *, read_timeout: float = 60.0) -> Iterator[dict[str, Any]]:
        """Follow every event of every task the caller may see, after ``cursor`` (the ``cursor``
        of an earlier event; ``None``: from now), resuming like ``subscribe``. Events of one task
        come in seq order."""
        last = cursor or ""

        def accept(event_id: Optional[str], event: Optional[dict[str, Any]]) -> bool:
            nonlocal last
            if event_id is None:
                return False
            last = event_id
            return event is not None

        yield from self._follow("/bap/v1/events/stream", lambda: last, accept, read_timeout)

    def _follow(
        self,
        path: str,
        cursor: Callable[[], str],
        accept: Callable[[Optional[str], Optional[dict[str, Any]]], bool],
        read_timeout: float,
    ) -> Iterator[dict[str, Any]]:
        failures = 0
        while True:
            progressed = False
            wait: Optional[float] = None
            conn = self._connection(read_timeout)
            try:
                conn.putrequest("GET", self._prefix + path, skip_host=True, skip_accept_encoding=True)
                conn.putheader("Host", "localhost" if self.unix_socket else (
                    self._host if self._port is None else f"{self._host}:{self._port}"))
                conn.putheader("Accept", "text/event-stream")
                conn.putheader("User-Agent", self.user_agent)
                last = cursor()
                if last:
                    conn.putheader("Last-Event-ID", last)
                token = self._bearer()
                if token:
                    conn.putheader("Authorization", "Bearer " + token)
                conn.endheaders()
                resp = conn.getresponse()
                if resp.status != 200:
                    headers = {k.lower(): v for k, v in resp.getheaders()}
                    err = ProblemError(resp.status, resp.read(), headers)
                    if resp.status != 429 and resp.status < 500:
                        raise err
                    wait = _retry_after(headers.get("retry-after"))
                else:
                    for event_id, event in _parse_sse(resp):
                        if accept(event_id, event):
                            progressed = True
                            yield event  # type: ignore[misc]
            except ProblemError:
                raise
            except (OSError, http.client.HTTPException, ValueError):
                pass  # a dropped or failed connection: reconnect below
            finally:
                conn.close()
            failures = 1 if progressed else failures + 1
            time.sleep(min(self._backoff(failures) if wait is None else wait, _MAX_WAIT))

    def _send(
        self, method: str, target: str, payload: Optional[bytes], headers: dict[str, str], timeout: float
    ) -> tuple[int, dict[str, str], bytes]:
        conn = self._connection(timeout)
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            if payload is not None:
                conn.putheader("Content-Length", str(len(payload)))
            conn.endheaders(payload)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()


def _parse_sse(resp: http.client.HTTPResponse) -> Iterator[tuple[Optional[str], Optional[dict[str, Any]]]]:
    """Yield (id, event) per Server-Sent Events message; id-only messages give event None."""
    event_id: Optional[str] = None
    data: Optional[str] = None
    while True:
        raw = resp.readline()
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if event_id is not None or data is not None:
                yield event_id, (None if data is None else json.loads(data))
            event_id, data = None, None
            continue
        if line.startswith(":"):
            continue
        field_name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field_name == "id":
            event_id = value
        elif field_name == "data":
            data = value if data is None else data + "\n" + value


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _retryable(err: ProblemError) -> bool:
    if err.status in _RETRY_STATUSES:
        return True
    return err.status == 409 and err.code == "idempotency_in_flight"


def _retry_after(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _default_backoff(n: int) -> float:
    d = min(0.25 * (2 ** min(n - 1, 5)), 5.0)
    return d + random.uniform(0, d / 4)


def _blob(op: str, data: bytes, headers: dict[str, str]) -> Blob:
    digest = hashlib.sha256(data)
    repr_digest = headers.get("repr-digest")
    if repr_digest:
        for member in repr_digest.split(","):
            key, _, val = member.strip().partition("=")
            if key.lower() != "sha-256":
                continue
            try:
                want = base64.b64decode(val.strip(":"), validate=True)
            except ValueError:
                continue
            if len(want) == 32 and want != digest.digest():
                raise DigestMismatchError(f"bap: {op}: artifact bytes do not match Repr-Digest")
    return Blob(
        body=data,
        media_type=headers.get("content-type", "application/octet-stream"),
        sha256=digest.hexdigest(),
        repr_digest=repr_digest,
        headers=headers,
    )
