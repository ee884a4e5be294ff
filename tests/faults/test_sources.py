"""Faults at the sources: a file that fails with EIO, a symlink planted to a secret, a folder the
bridge may not list, a pattern that matches nothing, a sink that is down while lag is watched.

Every test writes known lines with the ledger and checks the healthy files at the receiver: lost 0.
The permission tests need root (to chown, and to drop to another user): CI runs as root.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from obsbox.exporters.bridge import config as bridge_config
from obsbox.exporters.bridge.runner import Bridge
from obsbox.local.receiver import Receiver
from tests.bridge.harness import Running
from tests.faults.ledger import Ledger
from tests.waiting import wait_until

NOBODY = 65534  # a user of every Debian system (nobody:nogroup)
IMAGE_USER = 10001  # the uid the bridge's image runs as (see the Dockerfile)


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("this test needs root: it chowns files and drops to another user (CI runs as root)")


def sample(running: Running, name: str, labels: dict[str, str] | None = None) -> float | None:
    return running.bridge.metrics.registry.get_sample_value(name, labels or {})


def warnings_naming(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and text in r.getMessage()]


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder other users may search (pytest's tmp_path is under a root-only 0700 folder), so that
    permission bits below it are what decides."""
    folder = Path(tempfile.mkdtemp(prefix="obsbox-sources-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- one bad file


class FailingDisk:
    """EIO from every read and fstat of one file's descriptors, while ``failing`` is set.

    This machine can make no real failing block device: its kernel has no device-mapper
    (``dmsetup`` says "/dev/mapper/control: No such device", so no ``error`` target over a loop
    device), and a FUSE filesystem would need libfuse and a binding the project does not depend
    on. So the error is injected at the syscall boundary, ``os.pread`` and ``os.fstat``, for the
    descriptors of that one inode only: every other file, and every other call, is real."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
        self.ino = path.stat().st_ino
        self.failing = threading.Event()
        self.failing.set()
        real_pread, real_fstat = os.pread, os.fstat

        def check(fd: int) -> None:
            if self.failing.is_set() and real_fstat(fd).st_ino == self.ino:
                raise OSError(errno.EIO, os.strerror(errno.EIO))

        def pread(fd: int, n: int, offset: int) -> bytes:
            check(fd)
            return real_pread(fd, n, offset)

        def fstat(fd: int) -> os.stat_result:
            check(fd)
            return real_fstat(fd)

        monkeypatch.setattr(os, "pread", pread)
        monkeypatch.setattr(os, "fstat", fstat)


def test_a_file_failing_with_eio_is_said_once_and_the_others_go_on(tmp_path, monkeypatch, caplog):
    """EIO on the very first read (the fingerprint), then again in the middle of the file: the
    healthy files keep shipping, the watcher lives, the bad file is reported once per episode and
    read to its end once the disk answers again."""
    caplog.set_level(logging.INFO)
    healthy, sick = Ledger("healthy"), Ledger("sick")
    good = [tmp_path / "a.json", tmp_path / "c.json"]
    bad = tmp_path / "b.json"
    for path in good:
        healthy.append(path, 100)
    sick.append(bad, 50)
    disk = FailingDisk(monkeypatch, bad)
    running = Running([str(tmp_path / "*.json")], tmp_path / "state")
    try:
        wait_until(lambda: len(healthy.check(running.received()).lost) == 0, 20, "every line of the healthy files")
        for path in good:
            healthy.append(path, 100)
        wait_until(lambda: len(healthy.check(running.received()).lost) == 0, 20, "the healthy files stopped")
        source = running.bridge.pipelines[0].sources[0]
        assert source.watcher is not None and source.watcher.is_alive(), "the watcher thread died"
        assert running.thread.is_alive(), "the bridge died of one file"
        assert sample(running, "obsbox_bridge_errors_total", {"kind": "read"}) == 1
        assert sample(running, "obsbox_bridge_source_problems", {"kind": "read"}) == 1
        assert len(warnings_naming(caplog, str(bad))) == 1, warnings_naming(caplog, str(bad))

        disk.failing.clear()  # the disk answers again: the file is read from where it stood
        wait_until(
            lambda: not sick.check(running.received()).lost, 20, "every line of the failing file, once it reads again"
        )
        wait_until(
            lambda: sample(running, "obsbox_bridge_source_problems", {"kind": "read"}) == 0,
            20,
            "the read problem to clear",
        )

        disk.failing.set()  # broken again, in the middle of the file: said again, once
        sick.append(bad, 50)
        for path in good:
            healthy.append(path, 100)
        wait_until(lambda: not healthy.check(running.received()).lost, 20, "the healthy files stopped")
        wait_until(
            lambda: sample(running, "obsbox_bridge_errors_total", {"kind": "read"}) == 2,
            20,
            "a second read error episode",
        )
        disk.failing.clear()
        wait_until(
            lambda: not sick.check(running.received()).lost, 20, "every line of the failing file, once it reads again"
        )
    finally:
        disk.failing.clear()
        running.stop()
    healthy.check(running.received()).assert_delivered()
    sick.check(running.received()).assert_delivered()
    assert len(warnings_naming(caplog, str(bad))) == 2


def test_a_file_rotated_away_while_stopped_and_failing_at_restart_waits_and_the_others_go_on(tmp_path, monkeypatch):
    """The first scan after a restart drains files rotated away meanwhile; EIO on one of them must
    not stop that scan, nor the files after it: it is drained once it reads again."""
    ledger = Ledger("restart")
    log, other = tmp_path / "app.json", tmp_path / "other.json"
    ledger.append(log, 10)
    ledger.append(other, 10)
    include = [str(log), str(other)]
    first = Running(include, tmp_path / "state", once=True)
    first.thread.join(30)
    ledger.append(log, 10)  # written after the first run, then rotated away while the bridge is down
    log.rename(tmp_path / "app.json.1")
    disk = FailingDisk(monkeypatch, tmp_path / "app.json.1")
    ledger.append(log, 5)
    ledger.append(other, 5)
    second = Running(include, tmp_path / "state")
    try:
        fresh = set(range(30, 40))  # the lines of the new app.json and other.json, written last

        def fresh_arrived() -> bool:
            return fresh.isdisjoint(ledger.check(first.received() + second.received()).lost)

        wait_until(fresh_arrived, 20, "the healthy files stopped")
        disk.failing.clear()
        wait_until(lambda: not ledger.check(first.received() + second.received()).lost, 20, "the rotated file waits")
    finally:
        disk.failing.clear()
        second.stop()
    ledger.check(first.received() + second.received()).assert_delivered()


# ---------------------------------------------------------------- symlinks


def test_a_symlink_planted_by_a_user_to_a_root_only_file_is_not_read(open_tmp, caplog):
    """``z.json -> shadow``, the link owned by nobody, the target root's 0600: a root bridge must not
    ship it; nor through a chain of links, nor through a link to a folder in the glob's path. Root's
    own links (kubelet's ``/var/log/containers``) and a link to a file its owner may read are read."""
    require_root()
    caplog.set_level(logging.INFO)
    watched, secret = open_tmp / "watched", open_tmp / "secret"
    watched.mkdir()
    secret.mkdir(mode=0o755)
    shadow = secret / "shadow"  # the shape of /etc/shadow's lines (shadow(5))
    shadow.write_bytes(b"root:$y$j9T$Fq0SOl1lGkZ6k4kKWp8ln/$Q2bm2i0Hq.3:20000:0:99999:7:::\n")
    shadow.chmod(0o600)
    gshadow = secret / "gshadow"  # gshadow(5)
    gshadow.write_bytes(b"root:*::\n")
    gshadow.chmod(0o600)
    private = open_tmp / "private"  # a folder only root may search
    private.mkdir(mode=0o700)
    (private / "a.json").write_bytes(b'{"private": true}\n')
    (private / "a.json").chmod(0o644)
    ledger = Ledger("links")
    ledger.append(watched / "app.json", 10)
    shared = open_tmp / "shared.json"  # a file nobody may read, linked by nobody: no escalation
    ledger.append(shared, 5)
    shared.chmod(0o644)
    grouped = open_tmp / "grouped.json"  # root:nogroup 0640: nobody may read it through its group
    ledger.append(grouped, 5)
    os.chown(grouped, 0, NOBODY)
    grouped.chmod(0o640)
    kubelet = open_tmp / "pod.json"  # root's own link to a root-only file, as kubelet makes them
    ledger.append(kubelet, 5)
    kubelet.chmod(0o600)

    def link(name: str, target: Path, owner: int) -> Path:
        path = watched / name
        path.symlink_to(target)
        os.lchown(path, owner, owner)
        return path

    link("z.json", shadow, NOBODY)
    rooted = link("rooted.lnk", gshadow, 0)  # root's link, not matched by the glob
    link("chain.json", rooted, NOBODY)  # nobody's link to root's link to the secret
    link("sub", private, NOBODY)  # a link to a folder in the glob's path
    link("shared.json", shared, NOBODY)
    link("grouped.json", grouped, NOBODY)
    link("pod.json", kubelet, 0)

    running = Running([str(watched / "*.json"), str(watched / "*" / "*.json")], open_tmp / "state", once=True)
    running.thread.join(30)
    got = running.received()
    assert not [line for line in got if b"root:" in line or b"private" in line], "a secret was shipped"
    ledger.check(got).assert_delivered()
    refused = [r.getMessage() for r in caplog.records if "a symlink never gives" in r.getMessage()]
    assert len(refused) == 3, refused
    assert any(f"the link {watched / 'z.json'} belongs to nobody" in m for m in refused)
    assert any(f"not reading {watched / 'chain.json'}" in m for m in refused)
    assert any(f"the link {watched / 'sub'} belongs to nobody" in m for m in refused)
    assert sample(running, "obsbox_bridge_errors_total", {"kind": "symlink"}) == 3
    assert sample(running, "obsbox_bridge_source_problems", {"kind": "symlink"}) == 3


# ---------------------------------------------------------------- nothing readable, something said


def run_as(uid: int, groups: list[int], data: dict, seconds: float) -> dict:
    """Run a Bridge of ``data`` as ``uid`` (in ``groups``) for ``seconds`` in a forked child; what it
    logged, shipped and counted. The bridge is built as root (every module imported: the Python
    in use may live where that user cannot read) and runs after the privileges are dropped."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            messages: list[str] = []
            handler = logging.Handler(logging.INFO)
            handler.emit = lambda record: messages.append(f"{record.levelname} {record.getMessage()}")  # type: ignore[method-assign]
            logging.getLogger().addHandler(handler)
            logging.getLogger().setLevel(logging.INFO)
            bridge = Bridge(bridge_config.from_data(data))
            os.setgroups(groups)
            os.setgid(groups[0] if groups else uid)
            os.setuid(uid)
            thread = threading.Thread(target=bridge.run, daemon=True)
            thread.start()
            thread.join(seconds)
            bridge.request_stop()
            thread.join(10)
            registry = bridge.metrics.registry
            values = {
                kind: (
                    registry.get_sample_value("obsbox_bridge_errors_total", {"kind": kind}),
                    registry.get_sample_value("obsbox_bridge_source_problems", {"kind": kind}),
                )
                for kind in ("permission", "no_match")
            }
            matched = {
                pattern: registry.get_sample_value("obsbox_bridge_files_matched", {"pattern": pattern})
                for pattern in data["sources"]["tail"]["include"]
            }
            shipped = [r.raw.decode() for r in bridge.pipelines[0].sinks[0].records()]
            result = {"messages": messages, "metrics": values, "matched": matched, "shipped": shipped}
            os.write(write, orjson.dumps(result))
        except BaseException as exc:
            os.write(write, orjson.dumps({"error": repr(exc)}))
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 16):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    result = orjson.loads(b"".join(chunks))
    assert "error" not in result, result
    return result


def bridge_data(include: list[str], state: Path, *, once: bool) -> dict:
    state.mkdir(mode=0o700)
    os.chown(state, IMAGE_USER, IMAGE_USER)
    return {
        "sources": {"tail": {"include": include, "scan_interval": 0.05}},
        "processors": {},
        "sinks": {"memory": {}},
        "pipelines": {"logs": {"sources": ["tail"], "processors": [], "sinks": ["memory"], "batch": {"timeout": 0.05}}},
        "settings": {"state_dir": str(state), "once": once, "progress": False, "workers": 0, "poll_interval": 0.01},
    }


def docker_layout(root: Path, lines: list[bytes]) -> Path:
    """Docker's own layout and modes: ``containers/`` drwx--x--- root:root, each container's folder
    drwx--x--- and its json-file log -rw-r----- root:root (moby's daemon creates them so)."""
    cid = "4f1b7c5a0e2d" * 5 + "9a3c"
    folder = root / "containers" / cid
    folder.mkdir(parents=True)
    log = folder / f"{cid}-json.log"
    log.write_bytes(
        b"".join(
            orjson.dumps({"log": line.decode() + "\n", "stream": "stdout", "time": "2026-12-01T20:00:00.000000001Z"})
            + b"\n"
            for line in lines
        )
    )
    log.chmod(0o640)
    folder.chmod(0o710)
    (root / "containers").chmod(0o710)
    return log


def test_a_docker_folder_the_image_user_cannot_list_is_said_once_and_counted(open_tmp):
    """The image's user (10001) given Docker's ``containers/``: nothing can be read, and the bridge
    says what it lacks in one line, counts it and shows it, instead of shipping 0 lines in silence."""
    require_root()
    docker_layout(open_tmp, Ledger("docker").lines(3))
    pattern = str(open_tmp / "containers" / "*" / "*-json.log")
    result = run_as(IMAGE_USER, [], bridge_data([pattern], open_tmp / "state", once=False), seconds=1.0)
    folder = open_tmp / "containers"
    said = [m for m in result["messages"] if str(folder) in m]
    assert said == [f"WARNING cannot list {folder} (drwx--x--- root:root): run the bridge as root"], result["messages"]
    assert result["metrics"]["permission"] == [1.0, 1.0]
    assert result["matched"] == {pattern: 0.0}
    assert result["shipped"] == []


def test_a_log_the_user_may_not_open_is_said_once_then_read_in_the_group_it_names(open_tmp):
    """kubelet's ``/var/log/pods/<ns>_<pod>_<uid>/<container>/0.log``: folders open, the log
    -rw-r----- root:root. As 10001 the open fails every scan, and is said once; in the group the
    line names, the same bridge reads it."""
    require_root()
    folder = open_tmp / "pods" / "default_gateway-7d9f_0c6ab3e4-1f2a-4c3b-9d8e-5f6a7b8c9d0e" / "gateway"
    folder.mkdir(parents=True)
    for parent in (folder, folder.parent, folder.parent.parent):
        parent.chmod(0o755)
    log = folder / "0.log"
    ledger = Ledger("pods")
    log.write_bytes(b"".join(b"2026-12-01T20:00:00.000000001Z stdout F " + line + b"\n" for line in ledger.lines(5)))
    log.chmod(0o640)
    pattern = str(open_tmp / "pods" / "*" / "*" / "*.log")
    denied = run_as(IMAGE_USER, [], bridge_data([pattern], open_tmp / "state", once=False), seconds=1.0)
    said = [m for m in denied["messages"] if str(log) in m]
    assert said == [f"WARNING cannot read {log} (-rw-r----- root:root): run the bridge as root or in group root"], (
        denied["messages"]
    )
    assert denied["metrics"]["permission"] == [1.0, 1.0]
    assert denied["shipped"] == []
    in_group = run_as(IMAGE_USER, [0], bridge_data([pattern], open_tmp / "state2", once=True), seconds=10.0)
    assert not [m for m in in_group["messages"] if m.startswith("WARNING")], in_group["messages"]
    ledger.check(in_group["shipped"]).assert_delivered()


# ---------------------------------------------------------------- patterns that match nothing


def test_patterns_that_match_nothing_or_name_a_folder_are_said_once_and_again_on_change(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    ledger = Ledger("patterns")
    ledger.append(tmp_path / "app.json", 5)
    later = tmp_path / "later"
    later.mkdir()
    folder = tmp_path / "logs"
    folder.mkdir()
    loop = tmp_path / "loop.json"  # a link loop: stat fails with ELOOP
    loop.symlink_to(tmp_path / "loop2.json")
    (tmp_path / "loop2.json").symlink_to(loop)
    include = [str(tmp_path / "*.json"), str(later / "*.json"), str(folder)]
    running = Running(include, tmp_path / "state")
    try:
        running.wait_for(5)
        time.sleep(0.5)  # ten scans
        assert warnings_naming(caplog, str(later)) == [f"{later / '*.json'} matches no file (yet)"]
        assert warnings_naming(caplog, str(folder)) == [
            f"{folder} names a folder, not files: give a glob such as {folder}/*.log"
        ]
        assert warnings_naming(caplog, str(loop)) == [f"cannot look at {loop}: Too many levels of symbolic links"]
        matched = {p: sample(running, "obsbox_bridge_files_matched", {"pattern": p}) for p in include}
        assert matched == {include[0]: 1, include[1]: 0, include[2]: 0}
        assert sample(running, "obsbox_bridge_source_problems", {"kind": "no_match"}) == 1
        assert sample(running, "obsbox_bridge_errors_total", {"kind": "not_a_file"}) == 1
        assert sample(running, "obsbox_bridge_errors_total", {"kind": "stat"}) == 2  # loop.json and loop2.json

        ledger.append(later / "svc.json", 5)  # the pattern matches now: said, and shown
        wait_until(
            lambda: sample(running, "obsbox_bridge_files_matched", {"pattern": include[1]}) == 1,
            20,
            "the pattern to match one file",
        )
        assert sample(running, "obsbox_bridge_source_problems", {"kind": "no_match"}) == 0
        running.wait_for(10)
        (later / "svc.json").unlink()  # and nothing again: said again
        wait_until(
            lambda: sample(running, "obsbox_bridge_errors_total", {"kind": "no_match"}) == 2,
            20,
            "a second no_match episode",
        )
    finally:
        running.stop()
    assert len(warnings_naming(caplog, str(later))) == 2
    ledger.check(running.received()).assert_delivered()


# ---------------------------------------------------------------- lag that shows trouble


def test_lag_and_unacked_age_grow_while_the_sink_is_down_and_fall_to_zero_when_it_is_back(tmp_path):
    """The Loki sink's receiver answers 503: lag (bytes) and the oldest unacknowledged byte's age
    grow on every scan while the pipeline thread is blocked in retries; once the receiver accepts,
    both fall to 0 and every line arrives."""
    receiver = Receiver().start()
    receiver.refuse(503)
    ledger = Ledger("lag")
    log = tmp_path / "app.json"
    ledger.append(log, 20)
    retry = {"initial_interval": 0.05, "max_interval": 0.2, "max_elapsed_time": 0}
    running = Running([str(log)], tmp_path / "state", sinks={"loki": {"url": receiver.url, "retry": retry}})
    path = {"path": str(log)}
    try:
        wait_until(lambda: (sample(running, "obsbox_bridge_lag_bytes", path) or 0) > 0, 20, "no lag while down")
        assert sample(running, "obsbox_bridge_lag_bytes", path) == log.stat().st_size
        first_age = sample(running, "obsbox_bridge_oldest_unacked_age_seconds", path)
        ledger.append(log, 20)
        wait_until(
            lambda: sample(running, "obsbox_bridge_lag_bytes", path) == log.stat().st_size,
            20,
            "lag to reach the file's size",
        )
        time.sleep(0.5)
        assert sample(running, "obsbox_bridge_oldest_unacked_age_seconds", path) > (first_age or 0) + 0.3
        wait_until(lambda: receiver.requests, 20, "the sink never tried")
        assert all(status == 503 for _, _, status in receiver.requests)

        receiver.accept()
        wait_until(lambda: sample(running, "obsbox_bridge_lag_bytes", path) == 0, 20, "lag stayed up")
        wait_until(
            lambda: sample(running, "obsbox_bridge_oldest_unacked_age_seconds", path) == 0,
            20,
            "the unacknowledged age to fall to 0",
        )
    finally:
        running.stop()
        receiver.stop()
    ledger.check(entry.line for entry in receiver.loki).assert_delivered()
