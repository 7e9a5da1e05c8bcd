"""A local HTTPS server on 127.0.0.1 that misbehaves on request, for download fault tests.

The first part of the path says how to answer; the rest names a file registered
in ``server.files``:

``/ok/<name>``        the file, with its Content-Length
``/slow/<name>``      the file in 16 pieces, 0.05 s apart (so that two clients overlap)
``/hang/<name>``      reads the request, then never answers
``/drip/<name>``      announces the full length, then sends one byte every 0.2 s
``/dripheaders/<name>`` sends its status line and headers one byte every 0.2 s (a
                      long header makes that about a minute), then the file
``/truncate/<name>``  announces the full length, sends half, closes
``/wrong/<name>``     the right length, wrong bytes
``/missing/<name>``   HTTP 404

Its certificate comes from a throw-away CA made with ``trustme``; a client trusts
it when ``REQUESTS_CA_BUNDLE`` names ``server.ca_file`` (set by the fixture).

:class:`StalledHandshake` is a port where TCP connections are accepted and the
TLS ClientHello is never answered.
"""

from __future__ import annotations

import http.server
import socket
import ssl
import threading
import time
from pathlib import Path


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - the http.server API
        _, mode, name = self.path.split("/", 2)
        self.server.requests.append(self.path)
        body = self.server.files.get(name)
        if mode == "missing" or body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if mode == "hang":
            self.server.stop.wait(60)
            return
        if mode == "dripheaders":
            head = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nX-Padding: {'x' * 250}\r\n\r\n")
            try:
                for byte in head.encode():
                    if self.server.stop.wait(0.2):
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            if mode == "ok":
                self.wfile.write(body)
            elif mode == "wrong":
                self.wfile.write(bytes(b ^ 0x5A for b in body))
            elif mode == "truncate":
                self.wfile.write(body[: len(body) // 2])
                self.close_connection = True
            elif mode == "slow":
                step = max(1, len(body) // 16)
                for i in range(0, len(body), step):
                    self.wfile.write(body[i:i + step])
                    self.wfile.flush()
                    time.sleep(0.05)
            elif mode == "drip":
                for i in range(len(body)):
                    if self.server.stop.wait(0.2):
                        return
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client gave up, as it should


class FaultServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, folder: Path):
        import trustme

        super().__init__(("127.0.0.1", 0), _Handler)
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = Path(folder) / "fault-ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(context)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    def url(self, mode: str, name: str) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}/{mode}/{name}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.shutdown()
        self.server_close()


class StalledHandshake:
    """A TCP port on 127.0.0.1 that accepts connections and never answers the TLS ClientHello.

    Connections wait in the listen backlog, where the system has completed the TCP
    handshake for them; nothing ever reads what the client sends.
    """

    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0), backlog=16)

    def url(self, name: str = "data.bin") -> str:
        return f"https://127.0.0.1:{self.socket.getsockname()[1]}/ok/{name}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.socket.close()
