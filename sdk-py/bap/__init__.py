"""BAP SDK for Python: a client of the Browser Agent Protocol (stdlib only).

    import bap
    client = bap.Client("http://127.0.0.1:7777")
    created = client.create_task({"goal": "…", "policy": {"allowed_origins": ["https://example.com"]}})
    try:
        client.navigate(session_id, {"url": "https://example.com/"})
    except bap.ProblemError as e:
        print(e.status, e.code, e.detail)

Methods are the operationIds; path parameters come first, then the body dict, then keyword
options (``idempotency_key=`` on mutating operations, ``timeout=``). They return the decoded JSON
(dicts shaped as the TypedDicts of this package say); ``get_artifact`` returns a ``Blob``.
"""

from ._client import Blob, Client, DigestMismatchError, ProblemError, new_idempotency_key
from ._credentials import ClientCredentials, TokenError
from ._generated import *  # noqa: F401,F403 (the wire types, Operations, events)
from ._generated import __all__ as _generated_all

__version__ = "1.0.0"

__all__ = [
    "Blob",
    "Client",
    "ClientCredentials",
    "DigestMismatchError",
    "ProblemError",
    "TokenError",
    "new_idempotency_key",
    *_generated_all,
]
