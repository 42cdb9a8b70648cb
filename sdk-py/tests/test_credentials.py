"""Tests of the client credentials option against a fake token endpoint and API (stdlib)."""

import base64
import http.server
import json
import os
import socketserver
import sys
import threading
import unittest
from urllib.parse import parse_qsl, unquote_plus

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import bap  # noqa: E402


class FakeAS:
    def __init__(self):
        self.issued = 0
        self.forms = []
        self.revoked = set()
        self.lifetime = 900
        self.lock = threading.Lock()

    def handler(self):
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, status, ctype, doc):
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                auth = self.headers.get("Authorization", "")
                ident = base64.b64decode(auth[6:]).decode() if auth.startswith("Basic ") else ":"
                cid, _, secret = ident.partition(":")
                with fake.lock:
                    if unquote_plus(cid) != "cli_1" or unquote_plus(secret) != "s3cret/+ x":
                        self._reply(401, "application/json", {"error": "invalid_client", "error_description": "client authentication failed"})
                        return
                    fake.forms.append(dict(parse_qsl(data)))
                    fake.issued += 1
                    self._reply(200, "application/json", {"access_token": "tok-%d" % fake.issued, "token_type": "bearer", "expires_in": fake.lifetime})

            def do_GET(self):
                token = self.headers.get("Authorization", "")[7:]
                with fake.lock:
                    if not token or token in fake.revoked:
                        self._reply(401, "application/problem+json", {"type": "urn:bap:problem:unauthenticated", "title": "Unauthenticated",
                                                                      "status": 401, "detail": "no valid token", "code": "unauthenticated"})
                        return
                self._reply(200, "application/json", {"task": {"task_id": "tsk_1", "state": "admitted", "goal": token}})

        return Handler


class ClientCredentialsTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeAS()
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), self.fake.handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = "http://127.0.0.1:%d" % self.server.server_address[1]

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def test_cached_until_near_expiry_and_refreshed_after_401(self):
        now = [1_800_000_000.0]
        cc = bap.ClientCredentials(self.base + "/oauth2/token", "cli_1", "s3cret/+ x", resource=self.base,
                                   scope=["bap:tasks.read", "bap:tasks.write"], clock=lambda: now[0])
        self.assertNotIn("s3cret", repr(cc))
        client = bap.Client(self.base, client_credentials=cc)

        def goal():
            return client.get_task("tsk_1")["task"]["goal"]

        self.assertEqual(goal(), "tok-1")
        now[0] += 869  # 900 s lifetime, renewed 30 s early
        self.assertEqual(goal(), "tok-1")
        now[0] += 2
        self.assertEqual(goal(), "tok-2")
        self.assertEqual(self.fake.forms[0], {"grant_type": "client_credentials", "resource": self.base,
                                              "scope": "bap:tasks.read bap:tasks.write"})
        self.fake.revoked.add("tok-2")
        self.assertEqual(goal(), "tok-3")  # a 401 drops the cached token and retries once
        self.fake.revoked.update({"tok-3", "tok-4"})
        with self.assertRaises(bap.ProblemError) as ctx:
            goal()
        self.assertEqual((ctx.exception.status, ctx.exception.code), (401, "unauthenticated"))
        self.assertEqual(self.fake.issued, 4)

    def test_dict_form_and_token_errors(self):
        client = bap.Client(self.base, max_attempts=1, client_credentials={
            "token_url": self.base + "/oauth2/token", "client_id": "cli_1", "client_secret": "wrong"})
        with self.assertRaises(bap.TokenError) as ctx:
            client.get_task("tsk_1")
        self.assertEqual((ctx.exception.status, ctx.exception.code), (401, "invalid_client"))
        self.assertNotIn("wrong", str(ctx.exception))
        ok = bap.Client(self.base, client_credentials={
            "token_url": self.base + "/oauth2/token", "client_id": "cli_1", "client_secret": "s3cret/+ x"})
        self.assertEqual(ok.get_task("tsk_1")["task"]["goal"], "tok-1")
        self.assertEqual(self.fake.forms[-1], {"grant_type": "client_credentials"})
        with self.assertRaises(ValueError):
            bap.Client(self.base, token="t", client_credentials={"token_url": "x", "client_id": "a", "client_secret": "b"})


if __name__ == "__main__":
    unittest.main()
