"""Tests of the resuming event subscriptions against a stdlib SSE fake."""

import http.server
import json
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import bap  # noqa: E402


def sse(*chunks):
    def step(handler):
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        for c in chunks:
            handler.wfile.write(c.encode())
            handler.wfile.flush()

    return step


def problem(status, code, retry_after=None):
    def step(handler):
        body = json.dumps({"status": status, "code": code}).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/problem+json")
        if retry_after is not None:
            handler.send_header("Retry-After", retry_after)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return step


def event(seq, cursor=None):
    body = {"event_id": f"evt_{seq}", "task_id": "tsk_a", "seq": seq, "type": "task.state_changed",
            "time": "2026-11-29T12:00:00Z", "data": {}}
    if cursor:
        body["cursor"] = cursor
    return f"id: {cursor or seq}\nevent: task.state_changed\ndata: {json.dumps(body)}\n\n"


class SubscribeCase(unittest.TestCase):
    def setUp(self):
        self.script = []
        self.last_ids = []
        case = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                case.last_ids.append(self.headers.get("Last-Event-ID", ""))
                step = case.script.pop(0) if case.script else problem(503, "overloaded", "0")
                step(self)
                self.close_connection = True

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.client = bap.Client(f"http://127.0.0.1:{self.server.server_address[1]}")
        self.client._backoff = lambda n: 0.0

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def test_resumes_with_last_seq_and_drops_repeats(self):
        self.script = [
            sse("retry: 1000\n: stream open\n\n", event(1), event(2)),
            problem(503, "overloaded", "0"),
            sse(event(2), ": keep-alive\n\n", event(3), event(4)),
        ]
        seqs = []
        for e in self.client.subscribe("tsk_a"):
            seqs.append(e["seq"])
            if e["seq"] == 4:
                break
        self.assertEqual(seqs, [1, 2, 3, 4])
        self.assertEqual(self.last_ids, ["0", "2", "2"])

    def test_raises_a_problem_a_reconnect_cannot_fix(self):
        self.script = [problem(404, "not_found")]
        with self.assertRaises(bap.ProblemError) as cm:
            for _ in self.client.subscribe("tsk_gone", after=3):
                self.fail("no event expected")
        self.assertEqual(cm.exception.code, "not_found")
        self.assertEqual(self.last_ids, ["3"])

    def test_subscribe_all_keeps_the_announced_cursor(self):
        self.script = [sse("retry: 1000\nid: c1.a.0.0\n: stream open\n\n"), sse(event(1, "c1.b.1.1"))]
        gen = self.client.subscribe_all()
        first = next(gen)
        gen.close()
        self.assertEqual(first["cursor"], "c1.b.1.1")
        self.assertEqual(self.last_ids, ["", "c1.a.0.0"])


if __name__ == "__main__":
    unittest.main()
