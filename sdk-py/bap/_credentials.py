"""OAuth 2.0 client credentials for the remote profile (RFC 6749 §4.4, RFC 8707 ``resource``)."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from typing import Callable, Iterable, Optional, Union
from urllib.parse import quote_plus, urlencode

__all__ = ["ClientCredentials", "TokenError"]


class TokenError(Exception):
    """An error answer of the token endpoint (RFC 6749 §5.2): ``status``, the OAuth error
    ``code`` (``"invalid_client"``, ``"invalid_target"``, …) and ``description``."""

    def __init__(self, status: int, code: Optional[str] = None, description: Optional[str] = None) -> None:
        self.status = status
        self.code = code
        self.description = description
        text = f"bap: token endpoint: {status}"
        if code:
            text += f" {code}"
        if description:
            text += f": {description}"
        super().__init__(text)


class ClientCredentials:
    """A cached client credentials token source.

    Calling it (or ``token()``) returns the cached access token, or asks ``token_url`` for a new one
    (client_secret_basic, ``resource`` and ``scope`` in the form) when none is cached or it expires
    within a quarter of its lifetime (at most 30 s). Thread-safe. Pass it, or a dict of its
    arguments, as ``bap.Client(base_url, client_credentials=...)``::

        client = bap.Client("https://bap.example.com", client_credentials={
            "token_url": "https://bap.example.com/oauth2/token",
            "client_id": client_id, "client_secret": secret,
            "resource": "https://bap.example.com"})
    """

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: str,
        resource: Optional[str] = None,
        scope: Union[str, Iterable[str], None] = None,
        *,
        timeout: float = 30,
        ssl_context: Optional[ssl.SSLContext] = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.token_url = token_url
        self.client_id = client_id
        self._secret = client_secret
        self.resource = resource
        self.scope = scope if scope is None or isinstance(scope, str) else " ".join(scope)
        self.timeout = timeout
        self._ssl_context = ssl_context
        self._clock = clock
        self._lock = threading.Lock()
        self._token: Optional[str] = None
        self._refresh_at = 0.0

    def __repr__(self) -> str:  # never the secret
        return f"ClientCredentials(token_url={self.token_url!r}, client_id={self.client_id!r}, resource={self.resource!r})"

    def __call__(self) -> str:
        return self.token()

    def token(self) -> str:
        """Return the cached access token, or fetch a new one when none is cached or it expires
        within a quarter of its lifetime (at most 30 s)."""
        with self._lock:
            now = self._clock()
            if self._token is not None and now < self._refresh_at:
                return self._token
            token, lifetime = self._fetch()
            self._token = token
            self._refresh_at = now + lifetime - min(lifetime / 4, 30.0)
            return token

    def invalidate(self) -> None:
        """Drop the cached token: the next call asks for a new one."""
        with self._lock:
            self._token = None
            self._refresh_at = 0.0

    def _fetch(self) -> "tuple[str, float]":
        form = {"grant_type": "client_credentials"}
        if self.resource:
            form["resource"] = self.resource
        if self.scope:
            form["scope"] = self.scope
        # RFC 6749 §2.3.1: the client id and secret are form-urlencoded before Basic encoding.
        basic = base64.b64encode(f"{quote_plus(self.client_id)}:{quote_plus(self._secret)}".encode()).decode()
        req = urllib.request.Request(
            self.token_url,
            data=urlencode(form).encode(),
            method="POST",
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
                "Authorization": "Basic " + basic,
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl_context) as resp:
                status, data = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        try:
            doc = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            doc = None
        if not isinstance(doc, dict):
            doc = {}
        if status != 200:
            code = doc.get("error") if isinstance(doc.get("error"), str) else None
            desc = doc.get("error_description") if isinstance(doc.get("error_description"), str) else None
            raise TokenError(status, code, desc)
        token = doc.get("access_token")
        token_type = doc.get("token_type")
        if not isinstance(token, str) or not token or (isinstance(token_type, str) and token_type.lower() != "bearer"):
            raise TokenError(status, None, "the answer holds no bearer access_token")
        expires_in = doc.get("expires_in")
        lifetime = float(expires_in) if isinstance(expires_in, (int, float)) and expires_in > 0 else 60.0
        return token, lifetime
