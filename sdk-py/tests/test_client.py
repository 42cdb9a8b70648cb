"""Tests of the Python SDK's transport against a stdlib http.server fake (no real server)."""

import base64
import hashlib
import http.server
import json
import os
import socketserver
import sys
import tempfile
import threading
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import bap  # noqa: E402


class Fake:
    """Records requests and answers them from a queue of (status, headers, body) tuples."""

    def __init__(self):
        self.requests = []
        self.replies = []
        self.lock = threading.Lock()

    def handler(self):
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def address_string(self):
                return "fake"

            def _serve(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with fake.lock:
                    fake.requests.append(
                        {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    status, headers, out = fake.replies.pop(0) if fake.replies else (200, {}, b"{}")
                if isinstance(out, (dict, list)):
                    out = json.dumps(out).encode()
                    headers = {"Content-Type": "application/json", **headers}
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = _serve
            do_POST = _serve

        return Handler


class TCPCase(unittest.TestCase):
    def setUp(self):
        self.fake = Fake()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self.fake.handler())
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.client = bap.Client(self.url, max_attempts=3)
        self.client._backoff = lambda n: 0.0

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def reply(self, status, body, headers=None):
        self.fake.replies.append((status, headers or {}, body))


def problem(status, code, detail="d"):
    return (
        status,
        {"Content-Type": "application/problem+json"},
        json.dumps(
            {"type": "urn:bap:problem:" + code, "title": code.title(), "status": status, "detail": detail, "code": code}
        ).encode(),
    )


class MutatingTests(TCPCase):
    def test_generated_key_is_uuid7_and_reused_on_retry(self):
        self.fake.replies += [problem(503, "overloaded"), problem(409, "idempotency_in_flight")]
        self.fake.replies[0][1]["Retry-After"] = "0"
        self.reply(200, {"task": {"task_id": "tsk_1"}, "receipt": {"receipt_id": "rcp_1"}})
        out = self.client.cancel_task("tsk_1", {"reason": "stop"})
        self.assertEqual(out["task"]["task_id"], "tsk_1")
        keys = [r["headers"].get("Idempotency-Key") for r in self.fake.requests]
        self.assertEqual(len(keys), 3)
        self.assertEqual(len(set(keys)), 1, keys)
        u = uuid.UUID(keys[0])
        self.assertEqual(u.version, 7)
        self.assertEqual(u.variant, uuid.RFC_4122)

    def test_given_key_is_sent(self):
        self.reply(201, {"task": {}, "receipt": {}})
        self.client.create_task({"goal": "g", "policy": {"allowed_origins": []}}, idempotency_key="my-key-1")
        self.assertEqual(self.fake.requests[0]["headers"]["Idempotency-Key"], "my-key-1")

    def test_each_call_gets_a_new_key(self):
        self.client.close_task("tsk_1")
        self.client.close_task("tsk_1")
        k1, k2 = (r["headers"]["Idempotency-Key"] for r in self.fake.requests)
        self.assertNotEqual(k1, k2)

    def test_body_sent_verbatim(self):
        body = {"goal": "ünïcode ✓", "policy": {"allowed_origins": ["https://a.example"]}, "unknown_field": [1, None]}
        self.reply(201, {"task": {}, "receipt": {}})
        self.client.create_task(body)
        req = self.fake.requests[0]
        self.assertEqual(req["method"], "POST")
        self.assertEqual(req["path"], "/bap/v1/tasks")
        self.assertEqual(req["headers"]["Content-Type"], "application/json")
        self.assertEqual(json.loads(req["body"]), body)

    def test_empty_body_defaults_to_object(self):
        self.client.close_browser_session("bs_1")
        self.assertEqual(self.fake.requests[0]["body"], b"{}")
        self.assertEqual(self.fake.requests[0]["path"], "/bap/v1/browser-sessions/bs_1/close")

    def test_not_retried_past_max_attempts(self):
        for _ in range(5):
            self.fake.replies.append((429, {"Retry-After": "0", "Content-Type": "application/problem+json"}, b'{"status":429,"code":"rate_limited"}'))
        with self.assertRaises(bap.ProblemError) as cm:
            self.client.navigate("bs_1", {"url": "https://a.example/"})
        self.assertEqual(cm.exception.status, 429)
        self.assertEqual(cm.exception.code, "rate_limited")
        self.assertEqual(len(self.fake.requests), 3)

    def test_long_retry_after_is_not_waited(self):
        self.fake.replies.append((503, {"Retry-After": "3600"}, b""))
        with self.assertRaises(bap.ProblemError):
            self.client.navigate("bs_1", {"url": "https://a.example/"})
        self.assertEqual(len(self.fake.requests), 1)


class ProblemTests(TCPCase):
    def test_problem_decoded(self):
        self.fake.replies.append(problem(403, "origin_not_allowed", "https://evil.example is outside the policy"))
        with self.assertRaises(bap.ProblemError) as cm:
            self.client.navigate("bs_1", {"url": "https://evil.example/"})
        e = cm.exception
        self.assertEqual((e.status, e.code, e.title), (403, "origin_not_allowed", "Origin_Not_Allowed"))
        self.assertEqual(e.detail, "https://evil.example is outside the policy")
        self.assertEqual(e.type, "urn:bap:problem:origin_not_allowed")
        self.assertEqual(e.problem["code"], "origin_not_allowed")
        self.assertIn(b"origin_not_allowed", e.body)
        self.assertIn("403 origin_not_allowed", str(e))
        self.assertEqual(len(self.fake.requests), 1)  # 403 is not retried

    def test_non_problem_error(self):
        self.fake.replies.append((502, {"Content-Type": "text/html"}, b"<h1>bad gateway</h1>"))
        with self.assertRaises(bap.ProblemError) as cm:
            self.client.get_task("tsk_1")
        self.assertEqual(cm.exception.status, 502)
        self.assertIsNone(cm.exception.code)
        self.assertEqual(cm.exception.body, b"<h1>bad gateway</h1>")


class ReadTests(TCPCase):
    def test_read_only_sends_no_key_and_escapes_path(self):
        self.reply(200, {"task": {"task_id": "tsk_a/b"}})
        self.client.get_task("tsk_a/b")
        req = self.fake.requests[0]
        self.assertEqual(req["path"], "/bap/v1/tasks/tsk_a%2Fb")
        self.assertNotIn("Idempotency-Key", req["headers"])
        self.assertNotIn("Content-Type", req["headers"])

    def test_query_parameters(self):
        self.reply(200, {"events": [], "next_after": None})
        out = self.client.list_task_events("tsk_1", after=5, limit=10)
        self.assertEqual(out, {"events": [], "next_after": None})
        self.client.list_task_events("tsk_1")
        self.assertEqual(self.fake.requests[0]["path"], "/bap/v1/tasks/tsk_1/events?after=5&limit=10")
        self.assertEqual(self.fake.requests[1]["path"], "/bap/v1/tasks/tsk_1/events")

    def test_token(self):
        c = bap.Client(self.url, token="t0k")
        c.get_task("tsk_1")
        calls = []
        c2 = bap.Client(self.url, token=lambda: calls.append(1) or "fresh")
        c2.get_task("tsk_1")
        self.assertEqual(self.fake.requests[0]["headers"]["Authorization"], "Bearer t0k")
        self.assertEqual(self.fake.requests[1]["headers"]["Authorization"], "Bearer fresh")
        self.assertEqual(calls, [1])

    def test_get_artifact(self):
        data = b"\x89PNG fake bytes"
        digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
        self.reply(200, data, {"Content-Type": "image/png", "Repr-Digest": f"sha-256=:{digest}:"})
        blob = self.client.get_artifact("art_1")
        self.assertEqual(blob.body, data)
        self.assertEqual(blob.media_type, "image/png")
        self.assertEqual(blob.sha256, hashlib.sha256(data).hexdigest())
        self.assertEqual(self.fake.requests[0]["headers"]["Accept"], "*/*")

    def test_get_artifact_digest_mismatch(self):
        wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
        self.reply(200, b"bytes", {"Content-Type": "text/plain", "Repr-Digest": f"sha-256=:{wrong}:"})
        with self.assertRaises(bap.DigestMismatchError):
            self.client.get_artifact("art_1")

    def test_network_error_retried(self):
        dead = bap.Client("http://127.0.0.1:1", max_attempts=2)
        dead._backoff = lambda n: 0.0
        with self.assertRaises(ConnectionError):
            dead.get_task("tsk_1")


class UnixSocketTests(unittest.TestCase):
    def test_unix_socket(self):
        fake = Fake()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bap.sock")

            class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
                daemon_threads = True

            server = Server(path, fake.handler())
            t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
            t.start()
            try:
                fake.replies.append((201, {}, {"task": {"task_id": "tsk_9"}, "receipt": {}}))
                client = bap.Client(unix_socket=path)
                out = client.create_task({"goal": "g", "policy": {"allowed_origins": []}})
                self.assertEqual(out["task"]["task_id"], "tsk_9")
                self.assertEqual(fake.requests[0]["path"], "/bap/v1/tasks")
                self.assertEqual(fake.requests[0]["headers"]["Host"], "localhost")
            finally:
                server.shutdown()
                server.server_close()


class InterruptedReplayTests(TCPCase):
    """The replay of a key whose command a crash interrupted (200 with only the receipt) is told
    from the operation's result by bap.is_interrupted_command_response."""

    @staticmethod
    def receipt(outcome):
        return {
            "receipt_id": "rcp_1",
            "command_id": "cmd_1",
            "task_id": "tsk_1",
            "operation": "act",
            "outcome": outcome,
            "issued_at": "2026-11-20T09:15:02Z",
        }

    def test_interrupted_and_normal_answers(self):
        act = lambda c: c.act("bs_1", {"action": "click", "node_id": "nd_1"})  # noqa: E731
        cancel = lambda c: c.cancel_task("tsk_1")  # noqa: E731
        cases = [
            ("act interrupted", 200, {"receipt": self.receipt("reconciliation_required")}, act, True),
            ("act result", 200, {"receipt": self.receipt("applied"), "epoch_id": "ep_1", "navigated": False}, act, False),
            ("act held", 202, {"approval": {"approval_id": "apr_1"}, "receipt": self.receipt("pending_approval")}, act, False),
            ("cancel_task interrupted", 200, {"receipt": self.receipt("unknown_outcome")}, cancel, True),
            ("cancel_task result", 200, {"task": {"task_id": "tsk_1"}, "receipt": self.receipt("applied")}, cancel, False),
            ("empty object", 200, {}, cancel, False),
        ]
        for name, status, body, call, interrupted in cases:
            with self.subTest(name):
                self.reply(status, body)
                answer = call(self.client)
                self.assertIs(bap.is_interrupted_command_response(answer), interrupted)
                if interrupted:
                    self.assertEqual(answer["receipt"]["outcome"], body["receipt"]["outcome"])


class GeneratedTests(unittest.TestCase):
    def test_operations(self):
        ops = [n for n in dir(bap.Operations) if not n.startswith("_")]
        self.assertEqual(len(ops), 23, ops)
        for name in ("create_task", "navigate", "get_artifact", "list_task_events", "resolve_approval", "replay_task"):
            self.assertIn(name, ops)

    def test_events(self):
        self.assertIn("task.state_changed", bap.EVENT_TYPES)
        self.assertEqual(set(bap.EVENT_TYPES), set(bap.EVENT_DATA_TYPES))
        self.assertIs(bap.EVENT_DATA_TYPES["task.state_changed"], bap.TaskStateChangedData)
        self.assertEqual(bap.TaskStateChangedData.__required_keys__, frozenset({"from", "to"}))


if __name__ == "__main__":
    unittest.main()
