"""Rotation faults: files rotated faster than a scan, inodes reused at once, lines split across a
rotation, and a new file on an old inode while the bridge was stopped. Counted with the ledger."""

from __future__ import annotations

from pathlib import Path

from tests.bridge.harness import Running
from tests.faults.ledger import Ledger

# The first line Spring Boot 3.4's ECS structured logging writes on every start: the same in each run
BANNER = (
    b'{"@timestamp":"2026-12-01T09:00:00.000Z","log.level":"INFO","process.pid":1,'
    b'"process.thread.name":"main","service.name":"gateway","log.logger":"com.example.GatewayApplication",'
    b'"message":"Starting GatewayApplication v1.4.2 using Java 21.0.5 with PID 1","ecs.version":"8.11"}\n'
)


def write_on_inode(path: Path, data: bytes, inode: int, tries: int = 5000) -> None:
    """Delete ``path`` and write ``data`` to a new file there that gets ``inode`` back. ext4 hands out
    the lowest free inode of the folder's group, so new files fill any lower holes first and then take
    the freed one (tmpfs never does: it counts up). Bounded: fails if it never comes back."""
    path.unlink()
    spares = []
    try:
        for n in range(tries):
            spare = path.with_name(f".spare-{n}")
            spare.write_bytes(data)
            if spare.stat().st_ino == inode:
                spare.rename(path)
                return
            spares.append(spare)
    finally:
        for spare in spares:
            spare.unlink()
    raise AssertionError(f"the filesystem of {path} did not reuse inode {inode} in {tries} new files")


def received(running: Running) -> list[bytes]:
    return [record.raw for record in running.sink.records()]


def test_a_new_file_on_a_reused_inode_with_the_same_banner_is_read_from_its_start(tmp_path):
    log = tmp_path / "gateway.log"
    old = Ledger("before")
    log.write_bytes(BANNER + b"".join(line + b"\n" for line in old.lines(30)))
    first = Running([str(log)], tmp_path / "state", once=True)
    first.thread.join(20)
    old.check(received(first)).assert_delivered()

    new = Ledger("after")
    write_on_inode(log, BANNER + b"".join(line + b"\n" for line in new.lines(40)), log.stat().st_ino)
    second = Running([str(log)], tmp_path / "state", once=True)
    second.thread.join(20)
    new.check(received(second)).assert_delivered()
    resumes = second.bridge.metrics.resumes
    assert resumes.labels("new_content")._value.get() == 1
    assert resumes.labels("resumed")._value.get() == 0


def test_a_file_that_only_grew_while_stopped_resumes_where_it_was(tmp_path):
    log = tmp_path / "gateway.log"
    ledger = Ledger("grown")
    log.write_bytes(BANNER)
    ledger.append(log, 30)
    first = Running([str(log)], tmp_path / "state", once=True)
    first.thread.join(20)
    ledger.append(log, 10)
    second = Running([str(log)], tmp_path / "state", once=True)
    second.thread.join(20)
    ledger.check(received(first) + received(second)).assert_delivered()
    assert second.bridge.metrics.resumes.labels("resumed")._value.get() == 1
