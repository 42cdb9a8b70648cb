#!/usr/bin/env python3
"""The conformance fixture site: conformance/pages/ as static files, and POST /order, the shop's
order form (a form_submission rule judges the POST it sends, so the form must post).

    python3 -u conformance/pages_server.py PORT   (0: any free port)

Prints "Serving HTTP on 127.0.0.1 port N" once it listens, as `python3 -m http.server` does.
"""
from __future__ import annotations

import functools
import http.server
import os
import sys
import urllib.parse

PAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pages")


class Handler(http.server.SimpleHTTPRequestHandler):
    """Static files, and the order form's POST: 303 to the thank-you page with the name."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        if urllib.parse.urlsplit(self.path).path != "/order":
            self.send_error(404)
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1 << 16:
            self.send_error(413)
            return
        form = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
        name = form.get("name", [""])[0]
        self.send_response(303)
        self.send_header("Location", "thanks.html?" + urllib.parse.urlencode({"name": name}))
        self.send_header("Content-Length", "0")
        self.end_headers()


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Handler, directory=PAGES))
    print(f"Serving HTTP on 127.0.0.1 port {server.server_address[1]} (http://127.0.0.1:{server.server_address[1]}/) ...", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
