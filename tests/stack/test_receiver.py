"""The local mode's OTLP receiver (``obsbox.local.receiver``), also the soak's and the benchmarks'."""

from __future__ import annotations

import http.client
import socket
import struct
import time

from obsbox.local.receiver import Receiver


def test_a_sender_killed_mid_request_costs_no_traceback(capfd):
    """A bridge killed while its request is answered (the soak kills it every few seconds) leaves a
    connection reset under the reply: the sender will send again, and nothing is printed."""
    receiver = Receiver().start()
    try:
        for _ in range(20):
            client = socket.create_connection(("127.0.0.1", receiver.port))
            body = b"\x00" * 200_000  # not a protobuf: answered 400, the reply written all the same
            client.sendall(b"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # a reset, as from a killed process: the reply's write fails
        deadline = time.monotonic() + 5
        while receiver.connections and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # a handler that raised prints after its connection is dropped
        assert not receiver.connections
    finally:
        receiver.stop()
    assert "Traceback" not in capfd.readouterr().err


def test_a_body_that_does_not_decode_is_refused_with_a_400_saying_why(capfd):
    """Not protobuf, not gzip, not JSON: a 400 naming the decoder's complaint, as the collector and
    Loki answer, and the receiver goes on."""
    receiver = Receiver().start()
    try:
        answers = []
        for path, headers, body in (
            ("/v1/logs", {}, b"\x00" * 64),
            ("/v1/traces", {"Content-Encoding": "gzip"}, b"not gzip"),
            ("/loki/api/v1/push", {}, b"{"),
        ):
            connection = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=5)
            connection.request("POST", path, body, {"Content-Type": "application/x-protobuf", **headers})
            response = connection.getresponse()
            answers.append((response.status, response.read().decode()))
            connection.close()
    finally:
        receiver.stop()
    assert [status for status, _ in answers] == [400, 400, 400]
    assert answers[0][1].startswith("DecodeError: ") and answers[1][1].startswith("BadGzipFile: ")
    assert "Traceback" not in capfd.readouterr().err
