"""Container runtime log files: CRI (containerd, CRI-O) and Docker json-file, through the real tail
source, processors and sinks, on lines the runtimes and their parsers' own tests write.

Sources of the runtime lines:
- K8S: kubernetes/kubernetes ``pkg/kubelet/kuberuntime/logs/logs_test.go`` (``TestParseLog``), the
  lines kubelet's ``parseCRILog`` / ``parseDockerJSONLog`` are tested on.
- OTELCOL: open-telemetry/opentelemetry-collector-contrib ``pkg/stanza/docs/operators/container.md``,
  the ``container`` parser's examples (its path, and the split "multiline containerd line").
- DOCKER: moby/moby ``daemon/logger/jsonfilelog`` writes ``{"log":...,"stream":...,"time":...}`` and
  splits lines longer than 16 KiB into entries whose ``log`` lacks the trailing newline.
- ENGINE: lines Docker Engine 20.10.24 (Debian's docker.io 20.10.24+dfsg1) wrote to a json-file log,
  copied as they are, from ``sh -c`` in a busybox container printing a JSON line, ``to stderr`` on
  stderr, ``printf "%16383s\r\n" x`` (a CRLF line whose ``\r`` is the 16384th byte) and a last JSON
  line without a newline; and from ``printf x``, 8192 times "é" and a newline (a split inside a character).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import orjson
import pytest

from obsbox.exporters.bridge.record import Origin
from obsbox.exporters.bridge.sources.containers import Joiner, detect_format, kubernetes_resource
from obsbox.local.receiver import Receiver
from tests.bridge.harness import Running

K8S_CRI_STDOUT = b"2016-10-20T18:39:20.57606443Z stdout F cri stdout test log"
K8S_CRI_STDERR = b"2016-10-20T18:39:20.57606443Z stderr F cri stderr test log"
K8S_CRI_TAGS = b"2016-10-20T18:39:20.57606443Z stdout F:tag1:tag2 cri stdout test log"
K8S_DOCKER_STDOUT = b'{"log":"docker stdout test log","stream":"stdout","time":"2016-10-20T18:39:20.57606443Z"}'
OTELCOL_PARTS = (
    b"2023-06-22T10:27:25.813799277Z stdout P multiline containerd line that i",
    b"2023-06-22T10:27:25.813799277Z stdout F s super awesomne",
)
ENGINE_SERVED = (
    b'{"log":"{\\"level\\":\\"info\\",\\"msg\\":\\"served\\",\\"traceparent\\":'
    b'\\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\\"}\\n","stream":"stdout",'
    b'"time":"2026-12-01T20:10:17.270956488Z"}'
)
# the 16384 bytes of the CRLF line up to its "\r" fill the copier's buffer: one entry, 16454 bytes long
ENGINE_CRLF_SPLIT = b'{"log":"' + b" " * 16382 + b'x\\r","stream":"stdout","time":"2026-12-01T20:10:17.271010805Z"}'
ENGINE_CRLF_END = b'{"log":"\\n","stream":"stdout","time":"2026-12-01T20:10:17.271010805Z"}'
ENGINE_STDERR = b'{"log":"to stderr\\n","stream":"stderr","time":"2026-12-01T20:10:17.282891491Z"}'
ENGINE_LAST = (  # the stream ended without a newline: the copier logged the rest, and no entry follows
    b'{"log":"{\\"level\\":\\"warn\\",\\"msg\\":\\"bye\\"}","stream":"stdout","time":"2026-12-01T20:10:17.361208801Z"}'
)
ENGINE_LINES = (ENGINE_SERVED, ENGINE_CRLF_SPLIT, ENGINE_CRLF_END, ENGINE_STDERR, ENGINE_LAST)
ENGINE_CUT_CHARACTER = (  # printf x, then 8192 times "é" and a newline: the split falls inside the last "é"
    b'{"log":"x' + "é".encode() * 8191 + b'\\ufffd","stream":"stdout","time":"2026-12-01T20:07:35.194257648Z"}',
    b'{"log":"\\ufffd\\n","stream":"stdout","time":"2026-12-01T20:07:35.194257648Z"}',
)
OTELCOL_POD = "some_kube-controller-kind-control-plane_49cc7c1fd3702c40b2686ea7486091d6"
TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
APP_LINE = orjson.dumps({"level": "info", "msg": "served", "traceparent": f"00-{TRACE}-{SPAN}-01"})
ORIGIN = Origin("/var/log/pods/x/y/0.log", b"\x01" * 16)


def pod_log(tmp_path, container: str = "kube-controller", restart: int = 1):
    folder = tmp_path / "var" / "log" / "pods" / OTELCOL_POD / container
    folder.mkdir(parents=True)
    return folder / f"{restart}.log"


def cri(content: bytes, tag: str = "F", stream: str = "stdout", time_: str = "2026-11-30T12:00:00.123456789Z") -> bytes:
    return f"{time_} {stream} {tag} ".encode() + content + b"\n"


def docker(text: str, stream: str = "stdout") -> bytes:
    return orjson.dumps({"log": text, "stream": stream, "time": "2026-11-30T12:00:00.5Z"}) + b"\n"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (K8S_CRI_STDOUT, "cri"),
        (K8S_CRI_TAGS, "cri"),
        (K8S_DOCKER_STDOUT, "docker"),
        (OTELCOL_PARTS[0], "cri"),
        (APP_LINE, "json"),
        (b"plain text", "json"),
    ],
)
def test_the_format_is_detected_from_the_first_line(line, expected):
    assert detect_format("/srv/app.log", line + b"\n") == expected


def test_kubelet_lines_unwrap_as_kubelet_parses_them():
    joiner, out = Joiner("cri", 1 << 20), []
    for offset, line in enumerate((K8S_CRI_STDOUT, K8S_CRI_STDERR, K8S_CRI_TAGS)):
        joiner.feed(line, offset * 100, ORIGIN, out)
    assert [r.raw for r in out] == [b"cri stdout test log", b"cri stderr test log", b"cri stdout test log"]
    assert [r.attributes["log.iostream"] for r in out] == ["stdout", "stderr", "stdout"]
    assert out[0].attributes["obsbox.runtime_time"] == "2016-10-20T18:39:20.57606443Z"
    assert out[0].time_ns() == 1476988760_576064430, "the runtime's time when the line has none"
    docker_joiner, docker_out = Joiner("docker", 1 << 20), []
    docker_joiner.feed(K8S_DOCKER_STDOUT, 0, ORIGIN, docker_out)
    # kubelet's test line has no newline in its "log": shorter than Docker's 16 KiB split, it is what
    # Docker writes for a stream that ended without one, a whole line
    assert [r.raw for r in docker_out] == [b"docker stdout test log"] and docker_joiner.pending_start() is None
    assert docker_out[0].attributes == {
        "log.iostream": "stdout",
        "obsbox.runtime_time": "2016-10-20T18:39:20.57606443Z",
    }


def test_the_collectors_split_containerd_line_is_joined_with_the_offset_of_its_first_entry():
    joiner, out = Joiner("cri", 1 << 20), []
    joiner.feed(OTELCOL_PARTS[0], 0, ORIGIN, out)
    assert out == [] and joiner.pending_start() == 0
    joiner.feed(OTELCOL_PARTS[1], len(OTELCOL_PARTS[0]) + 1, ORIGIN, out)
    (joined,) = out
    # container.md prints the output as "... that is super awesome"; the input's two bodies concatenate
    # to "awesomne" (the document's typo), and the concatenation is what a join must give
    assert joined.raw == b"multiline containerd line that is super awesomne" and joined.offset == 0
    assert joiner.pending_start() is None


def test_kubernetes_metadata_comes_from_kubelets_paths():
    pods = dict(kubernetes_resource(f"/var/log/pods/{OTELCOL_POD}/kube-controller/1.log"))
    assert pods == {  # the attributes container.md lists for this path
        "k8s.namespace.name": "some",
        "k8s.pod.name": "kube-controller-kind-control-plane",
        "k8s.pod.uid": "49cc7c1fd3702c40b2686ea7486091d6",
        "k8s.container.name": "kube-controller",
        "k8s.container.restart_count": "1",
        "service.name": "kube-controller",
    }
    cid = "a" * 64
    containers = dict(kubernetes_resource(f"/var/log/containers/gateway-7d9f_prod_server-{cid}.log"))
    assert containers["container.id"] == cid and containers["k8s.container.name"] == "server"
    assert containers["k8s.pod.name"] == "gateway-7d9f" and containers["k8s.namespace.name"] == "prod"
    assert kubernetes_resource("/srv/logs/app.log") == ()


def test_a_pod_log_ships_the_apps_own_line_with_its_ids_joined_and_with_kubernetes_attributes(tmp_path):
    log = pod_log(tmp_path)
    half = len(APP_LINE) // 2
    log.write_bytes(
        cri(b'{"level": "warn", "msg": "first"}')
        + cri(APP_LINE[:half], "P")
        + cri(b"to stderr", stream="stderr")
        + cri(APP_LINE[half:], "F")
        + cri(b"plain text from the app")
    )
    out = tmp_path / "out.jsonl"
    rx = Receiver().start()
    try:
        running = Running(
            [str(tmp_path / "var/log/pods/*/*/*.log")],
            tmp_path / "state",
            once=True,
            sinks={"file": {"path": str(out)}, "otlp": {"endpoint": rx.url}, "loki": {"url": rx.url}},
            processors=["parse", "trace"],
        )
        running.thread.join(30)
        assert not running.thread.is_alive()
        written = out.read_bytes().splitlines()
        assert len(written) == 4
        app = orjson.loads(written[2])
        assert (app["trace_id"], app["span_id"]) == (TRACE, SPAN), "the app's own IDs, not derived ones"
        assert app["msg"] == "served" and "stream" not in app, "the app's line, not the runtime's wrapper"
        assert written[1].startswith(b"to stderr") and written[3] == b"plain text from the app"
        resource, record = next((r, rec) for r, rec in rx.log_records if rec.trace_id.hex() == TRACE)
        assert record.body.string_value == APP_LINE.decode()
        assert resource["k8s.pod.name"] == "kube-controller-kind-control-plane"
        assert resource["k8s.container.restart_count"] == "1" and resource["service.name"] == "kube-controller"
        attributes = {kv.key: kv.value.string_value for kv in record.attributes}
        assert attributes["log.iostream"] == "stdout" and attributes["obsbox.runtime_time"].startswith("2026-11-30T")
        loki = next(e for e in rx.loki if e.metadata["trace_id"] == TRACE)
        assert loki.labels["k8s_namespace_name"] == "some" and loki.labels["k8s_pod_name"].startswith("kube-")
        assert "k8s_pod_uid" not in loki.labels and loki.metadata["k8s_pod_uid"] == "49cc7c1fd3702c40b2686ea7486091d6"
        assert loki.labels["service_name"] == "kube-controller"
    finally:
        rx.stop()


def test_docker_json_file_lines_split_at_16_kib_are_joined(tmp_path):
    log = tmp_path / "var/lib/docker/containers/abc/abc-json.log"
    log.parent.mkdir(parents=True)
    big = orjson.dumps({"msg": "x" * 40_000, "trace_id": TRACE, "span_id": SPAN}).decode()
    chunks = [big[i : i + 16384] for i in range(0, len(big), 16384)]
    log.write_bytes(
        b"".join(docker(c) for c in chunks[:-1]) + docker(chunks[-1] + "\n") + docker("after\n", stream="stderr")
    )
    out = tmp_path / "out.jsonl"
    running = Running([str(log)], tmp_path / "state", once=True, sinks={"file": {"path": str(out)}})
    running.thread.join(30)
    first, second = out.read_bytes().splitlines()
    joined = orjson.loads(first)
    assert joined["msg"] == "x" * 40_000 and (joined["trace_id"], joined["span_id"]) == (TRACE, SPAN)
    assert second.startswith(b"after")


def engine_log(tmp_path, *lines: bytes):
    """A json-file log where Docker keeps it, holding ``lines`` (each with its newline)."""
    log = tmp_path / "var/lib/docker/containers/53e4/53e4-json.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as handle:
        handle.write(b"".join(line + b"\n" for line in lines))
    return log


def test_the_engines_lines_unwrap_with_a_crlf_split_between_entries_and_a_last_line_without_newline():
    joiner, out, offset = Joiner("docker", 1 << 20), [], 0
    for line in ENGINE_LINES:
        joiner.feed(line, offset, ORIGIN, out)
        offset += len(line) + 1
    assert [r.raw for r in out] == [
        b'{"level":"info","msg":"served","traceparent":"00-' + TRACE.encode() + b"-" + SPAN.encode() + b'-01"}',
        b" " * 16382 + b"x",  # the "\r" ends the split entry, the "\n" is the next one: a CRLF all the same
        b"to stderr",
        b'{"level":"warn","msg":"bye"}',
    ]
    assert [r.attributes["log.iostream"] for r in out] == ["stdout", "stdout", "stderr", "stdout"]
    assert out[3].offset == offset - len(ENGINE_LAST) - 1 and joiner.pending_start() is None


def test_a_split_that_cut_a_character_still_waits_for_the_entry_that_ends_its_line():
    """Docker wrote each of the cut character's two bytes as a U+FFFD: the split entry holds 16386
    bytes of text, not fewer than 16 KiB, so it is still a split."""
    joiner, out = Joiner("docker", 1 << 20), []
    joiner.feed(ENGINE_CUT_CHARACTER[0], 0, ORIGIN, out)
    assert out == [] and joiner.pending_start() == 0
    joiner.feed(ENGINE_CUT_CHARACTER[1], len(ENGINE_CUT_CHARACTER[0]) + 1, ORIGIN, out)
    assert [r.raw for r in out] == [("x" + "é" * 8191 + "\ufffd\ufffd").encode()]


def test_once_twice_over_a_containers_last_line_without_newline_ships_it_once(tmp_path):
    log = engine_log(tmp_path, ENGINE_SERVED, ENGINE_STDERR, ENGINE_LAST)
    first = Running([str(log)], tmp_path / "state", once=True)
    first.thread.join(30)
    assert [orjson.loads(r.raw)["msg"] for r in first.sink.records() if r.raw.startswith(b"{")] == ["served", "bye"]
    again = Running([str(log)], tmp_path / "state", once=True)
    again.thread.join(30)
    assert not again.thread.is_alive() and again.sink.records() == [], "the second run has nothing new"


def test_a_last_line_without_newline_is_shipped_at_once_and_not_joined_to_the_next_run_of_the_container(tmp_path):
    log = engine_log(tmp_path, ENGINE_SERVED, ENGINE_LAST)
    running = Running([str(log)], tmp_path / "state")
    try:
        got = running.wait_for(2, timeout=10)
        assert [r.raw for r in got][1:] == [b'{"level":"warn","msg":"bye"}'], "not held back for a next entry"
        engine_log(tmp_path, ENGINE_SERVED)  # the container started again: its first line
        got = running.wait_for(3, timeout=10)
    finally:
        running.stop()
    assert [orjson.loads(r.raw)["msg"] for r in got] == ["served", "bye", "served"]
    assert all(r.trace_id for r in got) and got[1].trace_id != got[2].trace_id


def test_a_utf8_bom_at_the_start_of_a_file_is_not_part_of_the_first_line(tmp_path):
    log = tmp_path / "dotnet.json"  # System.Text.Encoding.UTF8 writes a BOM; so do .NET's file loggers
    log.write_bytes(b"\xef\xbb\xbf" + APP_LINE + b"\n" + APP_LINE + b"\n")
    out = tmp_path / "out.jsonl"
    running = Running([str(log)], tmp_path / "state", once=True, sinks={"file": {"path": str(out)}})
    running.thread.join(30)
    first, second = (orjson.loads(line) for line in out.read_bytes().splitlines())
    assert first["trace_id"] == second["trace_id"] == TRACE and first["msg"] == "served"


def test_the_format_each_file_is_read_as_is_in_the_metrics(tmp_path):
    log = pod_log(tmp_path)
    log.write_bytes(cri(APP_LINE))
    plain = tmp_path / "plain.json"
    plain.write_bytes(APP_LINE + b"\n")
    running = Running([str(log), str(plain)], tmp_path / "state")
    try:
        running.wait_for(2, timeout=10)
        registry = running.bridge.metrics.registry
        assert registry.get_sample_value("obsbox_bridge_file_format", {"path": str(log), "format": "cri"}) == 1
        assert registry.get_sample_value("obsbox_bridge_file_format", {"path": str(plain), "format": "json"}) == 1
    finally:
        running.stop()


def test_the_format_can_be_forced(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(cri(b"looks like CRI but is the app's own text"))
    running = Running([str(log)], tmp_path / "state", once=True, format="json")
    running.thread.join(30)
    (record,) = running.sink.records()
    assert record.raw.startswith(b"2026-11-30T12:00:00"), "format: json keeps the line as it is"


def test_kill_9_in_the_middle_of_a_partial_sequence_loses_and_duplicates_nothing(tmp_path):
    """The bridge acknowledges every complete line before the partials, is killed while the join is
    open, and the rest of the line is written while it is down: the line comes out once, whole."""
    log = pod_log(tmp_path)
    out, positions = tmp_path / "out.jsonl", tmp_path / "positions.json"
    complete = [orjson.dumps({"seq": i}) for i in range(3)]
    log.write_bytes(b"".join(cri(line) for line in complete) + cri(APP_LINE[:20], "P") + cri(APP_LINE[20:40], "P"))
    args = [str(log), "--to", f"file:{out}", "--positions", str(positions), "--state-dir", str(tmp_path / "s")]
    bridge = subprocess.Popen([sys.executable, "-m", "obsbox", "bridge", *args], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
            positions.exists() and out.exists() and out.read_bytes().count(b"\n") == 3
        ):
            time.sleep(0.05)
        time.sleep(0.3)  # let it poll the open join a few times
        saved = orjson.loads(positions.read_bytes())["files"][0]["offset"]
        assert saved == sum(len(cri(line)) for line in complete), "the saved position is where the join starts"
    finally:
        bridge.send_signal(signal.SIGKILL)
        bridge.wait(10)
    with open(log, "ab") as fh:
        fh.write(cri(APP_LINE[40:], "F") + cri(b'{"seq": 3}'))
    finished = subprocess.run(
        [sys.executable, "-m", "obsbox", "bridge", *args, "--once"], capture_output=True, timeout=60, check=False
    )
    assert finished.returncode == 0, finished.stderr
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [line.get("seq") for line in lines] == [0, 1, 2, None, 3]
    assert lines[3]["msg"] == "served" and lines[3]["trace_id"] == TRACE
    assert os.path.getsize(positions) > 0


def test_partials_of_stdout_and_stderr_interleaved_are_joined_per_stream():
    """Runtimes interleave the two streams entry by entry; a joiner keyed only by file would splice a
    stderr line into a stdout one (a bug parsers have shipped). Each stream is joined on its own."""
    joiner, out = Joiner("cri", 1 << 20), []
    entries = [
        cri(b"stdout first half, ", "P"),
        cri(b"stderr whole line", stream="stderr"),
        cri(b"stderr first, ", "P", stream="stderr"),
        cri(b"stdout second half"),
        cri(b"stderr second", stream="stderr"),
    ]
    offset = 0
    for entry in entries:
        joiner.feed(entry.rstrip(b"\n"), offset, ORIGIN, out)
        offset += len(entry)
    assert [(r.attributes["log.iostream"], r.raw) for r in out] == [
        ("stderr", b"stderr whole line"),
        ("stdout", b"stdout first half, stdout second half"),
        ("stderr", b"stderr first, stderr second"),
    ]
    assert [r.offset for r in out] == [len(entries[0]), 0, len(entries[0]) + len(entries[1])]


def test_a_partial_sequence_longer_than_max_line_bytes_is_cut_and_flagged_not_held_in_memory():
    joiner, out = Joiner("cri", 100), []
    for i in range(50):
        joiner.feed(cri(b"x" * 40, "P").rstrip(b"\n"), i * 100, ORIGIN, out)
    assert out == [] and sum(len(c) for c in joiner.open["stdout"].chunks) == 100
    joiner.feed(cri(b"end").rstrip(b"\n"), 5000, ORIGIN, out)
    (line,) = out
    assert line.truncated and line.raw == b"x" * 100


def test_an_entry_that_is_not_in_the_files_format_passes_through_as_it_is():
    joiner, out = Joiner("cri", 1 << 20), []
    joiner.feed(b"not a CRI entry at all", 0, ORIGIN, out)
    assert [r.raw for r in out] == [b"not a CRI entry at all"] and joiner.malformed == 1
