"""No secret leaks: the bridge, with its default processors, ships lines that carry secrets to the
file, OTLP and Loki sinks, and not one secret reaches a receiver or any file the bridge writes.

The secrets are the corpus's (tests/bridge/corpus/secrets.yaml): lines curl, requests, urllib3,
http.server and botocore wrote, and every Gitleaks shape, in JSON fields and in text lines. Known
lines around them (the ledger's) show nothing else was lost on the way.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml

from obsbox.exporters.bridge.config import DEFAULT_PROCESSORS
from obsbox.local.receiver import Receiver
from tests.bridge.harness import Running
from tests.faults.ledger import Ledger, lines_of

CORPUS = yaml.safe_load((Path(__file__).parents[1] / "bridge" / "corpus" / "secrets.yaml").read_text("utf-8"))


def secret_lines() -> tuple[list[bytes], list[str]]:
    """Lines that carry secrets, and the secrets, each as it would appear in a line (escaped)."""
    lines = [entry["line"].encode() for entry in CORPUS["lines"]]
    secrets = [secret for entry in CORPUS["lines"] for secret in entry["secrets"]]
    for shape in CORPUS["shapes"]:
        secret = shape["sample"][len(shape.get("keeps", "")) :]
        lines.append(orjson.dumps({"level": "error", "msg": f"upstream refused {shape['sample']}"}))
        lines.append(b"WARN retrying with " + shape["sample"].replace("\n", "\\n").encode())
        secrets.append(secret.replace("\n", "\\n"))
    lines.append(orjson.dumps({"msg": "login", "user": "ann", "db_password": 12345, "creds": {"pwd": ["a", "b"]}}))
    secrets += ["12345", '"a"']
    return lines, secrets


@pytest.mark.parametrize("workers", [0, 2])
def test_no_secret_reaches_a_sink_or_a_file(tmp_path, workers):
    leaky, secrets = secret_lines()
    ledger = Ledger("leaks")
    log = tmp_path / "app.log"
    with open(log, "wb") as handle:
        for line in leaky:
            handle.write(b"\n".join([*ledger.lines(3), line]) + b"\n")
    out, state = tmp_path / "out" / "lines.jsonl", tmp_path / "state"
    rx = Receiver().start()
    try:
        running = Running(
            [str(log)],
            state,
            once=True,
            sinks={"file": {"path": str(out)}, "otlp": {"endpoint": rx.url}, "loki": {"url": rx.url}},
            processors=list(DEFAULT_PROCESSORS),
            workers=workers,
        )
        running.thread.join(60)
        assert not running.thread.is_alive(), "the bridge did not finish its --once run"
    finally:
        rx.stop()
    written = lines_of(out)
    ledger.check(w for w in written if b'"leaks"' in w).assert_delivered()  # the known lines, whole
    assert len(written) == ledger.next_seq + len(leaky)
    bodies = [
        (resource, record.body.string_value, {kv.key: kv.value.string_value for kv in record.attributes})
        for resource, record in rx.log_records
    ]
    assert len(bodies) == len(written) and len(rx.loki) == len(written)
    received = {
        "file sink": b"\n".join(written).decode(),
        "OTLP": orjson.dumps(bodies).decode(),
        "Loki": orjson.dumps([(e.labels, e.line, e.metadata) for e in rx.loki]).decode(),
        **{str(p.relative_to(tmp_path)): p.read_text("utf-8", "replace") for p in state.rglob("*") if p.is_file()},
    }
    for where, text in received.items():
        leaked = [secret for secret in secrets if secret in text]
        assert not leaked, f"{len(leaked)} secrets reached {where}: {leaked[:3]}"
    assert sum(line.count(b"[REDACTED]") for line in written) >= len(secrets) - 2
