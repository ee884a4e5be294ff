"""The tail source against real files: rotation while writing, restarts, partial and overlong lines."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from obsbox.config import build
from obsbox.exporters.bridge.metrics import BridgeMetrics
from obsbox.exporters.bridge.sources import watch
from obsbox.exporters.bridge.sources.finder import (
    COMPRESSED,
    LIVE,
    find_files,
    find_rotated,
    may_name,
    rotation_place,
    watched_folders,
)
from obsbox.exporters.bridge.sources.fingerprint import digest
from obsbox.exporters.bridge.sources.tail import TailConfig, TailSource
from obsbox.exporters.bridge.sources.watch import FolderWatch, Seen
from tests.bridge.harness import Running, context
from tests.faults.docker import BUF_SIZE, entry


def seqs(records) -> Counter:
    return Counter(orjson.loads(r.raw)["seq"] for r in records)


def assert_exactly_once(records, total: int) -> None:
    counts = seqs(records)
    missing = sorted(set(range(total)) - set(counts))
    dups = sorted(s for s, n in counts.items() if n > 1)
    assert not missing, f"{len(missing)} lines lost, first {missing[:10]}"
    assert not dups, f"{len(dups)} lines duplicated, first {dups[:10]}"
    assert len(records) == total


class Writer(threading.Thread):
    """Writes ``total`` JSON lines to ``path``, rotating every ``every`` lines the way logrotate does."""

    def __init__(self, path: Path, total: int, *, every: int, mode: str, keep: int = 2, late_writes: int = 3) -> None:
        super().__init__(daemon=True)
        self.path, self.total, self.every, self.mode, self.keep, self.late = path, total, every, mode, keep, late_writes
        self.rotations = 0

    def shift(self) -> None:
        """app.log.N-1 → app.log.N ... (the oldest is deleted)."""
        oldest = self.path.with_name(f"{self.path.name}.{self.keep}")
        if oldest.exists():
            oldest.unlink()
        for n in range(self.keep - 1, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{n}")
            if src.exists():
                src.rename(self.path.with_name(f"{self.path.name}.{n + 1}"))

    def run(self) -> None:
        fh = open(self.path, "ab", buffering=0)  # noqa: SIM115 - reopened on rotation
        pending_late = 0
        for seq in range(self.total):
            fh.write(orjson.dumps({"seq": seq, "msg": "x" * (seq % 50), "ts": "2026-11-30T12:00:00Z"}) + b"\n")
            if pending_late:
                pending_late -= 1
                if pending_late == 0:  # the application reopens its log after a few more lines
                    fh.close()
                    fh = open(self.path, "ab", buffering=0)  # noqa: SIM115
            if seq and seq % self.every == 0:
                self.rotations += 1
                self.shift()
                if self.mode == "rename":
                    self.path.rename(self.path.with_name(self.path.name + ".1"))
                    self.path.touch()
                    pending_late = self.late
                else:  # copytruncate: the writer keeps its fd (O_APPEND) and continues at 0
                    shutil.copyfile(self.path, self.path.with_name(self.path.name + ".1"))
                    os.truncate(self.path, 0)
            if seq % 200 == 0:
                time.sleep(0.01)
        fh.close()


@pytest.mark.parametrize(
    ("mode", "pattern"), [("rename", "app.log"), ("rename", "app.log*"), ("copytruncate", "app.log*")]
)
def test_rotation_while_writing_delivers_every_line_once(tmp_path, mode, pattern):
    log = tmp_path / "app.log"
    log.touch()
    total = 12_000
    running = Running([str(tmp_path / pattern)], tmp_path / "state")
    writer = Writer(log, total, every=1_500, mode=mode)
    writer.start()
    writer.join(60)
    running.wait_for(total)
    time.sleep(0.3)
    running.stop()
    assert writer.rotations >= 7
    assert running.bridge.metrics.rotations.labels("copytruncate")._value.get() >= (mode == "copytruncate")
    assert_exactly_once(running.sink.records(), total)


def test_partial_line_is_held_until_complete(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b'{"seq": 0}\n{"seq": ')
    running = Running([str(log)], tmp_path / "state")
    assert len(running.wait_for(1)) == 1
    time.sleep(0.3)
    assert len(running.sink.records()) == 1, "a partial line must not be emitted while its file is live"
    with open(log, "ab") as fh:
        fh.write(b'1, "late": true}\n')
    records = running.wait_for(2)
    running.stop()
    assert [r.raw for r in records] == [b'{"seq": 0}', b'{"seq": 1, "late": true}']


def test_once_emits_the_trailing_partial_line_and_keeps_its_offset(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b'{"seq": 0}\n{"seq": 1')
    running = Running([str(log)], tmp_path / "state", once=True)
    running.thread.join(10)
    assert [r.raw for r in running.sink.records()] == [b'{"seq": 0}', b'{"seq": 1']
    saved = orjson.loads((tmp_path / "state" / "positions.json").read_bytes())
    assert saved["files"][0]["offset"] == len(b'{"seq": 0}\n'), "the partial line is read again next time"


def test_overlong_lines_are_truncated_flagged_and_the_next_line_survives(tmp_path):
    log = tmp_path / "app.log"
    huge = b'{"blob": "' + b"a" * 300_000 + b'"}'
    log.write_bytes(b'{"seq": 0}\n' + huge + b'\n{"seq": 2}\n')
    running = Running([str(log)], tmp_path / "state", once=True, max_line_bytes=100_000, read_chunk_bytes=65_536)
    running.thread.join(10)
    recs = running.sink.records()
    assert [len(r.raw) for r in recs] == [10, 100_000, 10]
    assert recs[1].truncated and recs[1].parse_error == "truncated" and recs[1].raw == huge[:100_000]
    assert recs[2].offset == 11 + len(huge) + 1
    assert running.bridge.metrics.truncated._value.get() == 1


def test_restart_resumes_from_acknowledged_positions(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(100)))
    first = Running([str(log)], tmp_path / "state", once=True)
    first.thread.join(10)
    with open(log, "ab") as fh:
        fh.write(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(100, 150)))
    second = Running([str(log)], tmp_path / "state", once=True)
    second.thread.join(10)
    assert sorted(seqs(first.sink.records())) == list(range(100))
    assert sorted(seqs(second.sink.records())) == list(range(100, 150))


def test_new_files_matching_the_glob_are_picked_up(tmp_path):
    running = Running([str(tmp_path / "*.json")], tmp_path / "state")
    time.sleep(0.2)
    for n in range(3):
        (tmp_path / f"svc{n}.json").write_bytes(orjson.dumps({"seq": n}) + b"\n")
    records = running.wait_for(3)
    running.stop()
    assert sorted(seqs(records)) == [0, 1, 2]


def test_rename_while_stopped_drains_the_rotated_file_even_outside_the_glob(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(10)))
    first = Running([str(log)], tmp_path / "state", once=True)
    first.thread.join(10)
    with open(log, "ab") as fh:  # written after the first run, then rotated away while the bridge is down
        fh.write(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(10, 20)))
    log.rename(tmp_path / "app.log-20261130")
    log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(20, 25)))
    second = Running([str(log)], tmp_path / "state", once=True)
    second.thread.join(10)
    assert sorted(seqs(second.sink.records())) == list(range(10, 25))


def test_copytruncate_while_stopped_reads_the_rest_from_the_copy(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(orjson.dumps({"seq": i, "gen": 1}) + b"\n" for i in range(10)))
    first = Running([str(tmp_path / "app.log*")], tmp_path / "state", once=True)
    first.thread.join(10)
    with open(log, "ab") as fh:
        fh.write(b"".join(orjson.dumps({"seq": i, "gen": 1}) + b"\n" for i in range(10, 20)))
    shutil.copyfile(log, tmp_path / "app.log.1")
    log.write_bytes(b"".join(orjson.dumps({"seq": i, "gen": 2}) + b"\n" for i in range(20, 23)))
    second = Running([str(tmp_path / "app.log*")], tmp_path / "state", once=True)
    second.thread.join(10)
    assert sorted(seqs(second.sink.records())) == list(range(10, 23))


def test_a_file_sharing_only_its_first_line_is_not_mistaken_for_a_copy(tmp_path):
    header = b'{"event": "start"}\n'
    (tmp_path / "a.log").write_bytes(header + b'{"seq": 1}\n')
    running = Running([str(tmp_path / "*.log")], tmp_path / "state")
    running.wait_for(2)
    (tmp_path / "b.log").write_bytes(
        header
        + b'{"seq": 2, "other": "content beyond the first line, long enough"}\n'
        + b'{"seq": 3, "pad": "'
        + b"p" * 80
        + b'"}\n'
    )
    records = running.wait_for(5, timeout=10)
    running.stop()
    assert len(records) == 5, [r.raw for r in records]


def test_two_fresh_runs_give_byte_identical_output(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(orjson.dumps({"seq": i, "request_id": f"r{i % 7}"}) + b"\n" for i in range(500)))
    outputs = []
    for run in range(2):
        out = tmp_path / f"out{run}.jsonl"
        running = Running(
            [str(log)],
            tmp_path / f"state{run}",
            once=True,
            sinks={"file": {"path": str(out)}},
            processors=["parse", "trace", "redact"],
        )
        running.thread.join(20)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] and outputs[0].count(b"\n") == 500


def test_copytruncate_regrowing_to_exactly_the_old_offset_is_still_seen(tmp_path):
    """The new generation ends exactly where the old one was read to: size alone cannot tell."""
    log = tmp_path / "app.log"
    first = [orjson.dumps({"seq": i, "gen": 1}) + b"\n" for i in range(4)]
    log.write_bytes(b"".join(first))
    running = Running([str(tmp_path / "app.log*")], tmp_path / "state")
    running.wait_for(4)
    with open(log, "ab", buffering=0) as fh:  # more lines, the copy and the truncation, between two reads
        fh.write(orjson.dumps({"seq": 4, "gen": 1}) + b"\n")
        shutil.copyfile(log, tmp_path / "app.log.1")
        os.truncate(log, 0)
        size = sum(map(len, first))
        filler = orjson.dumps({"seq": 5, "gen": 2, "pad": ""})
        pad = size - len(filler) - 1
        fh.write(orjson.dumps({"seq": 5, "gen": 2, "pad": "p" * pad}) + b"\n")
    assert log.stat().st_size == size
    records = running.wait_for(6, timeout=10)
    running.stop()
    assert sorted(seqs(records)) == [0, 1, 2, 3, 4, 5]


def test_a_copy_taking_over_mid_batch_is_acknowledged_only_through_that_batch(tmp_path):
    """Lines read before a copytruncate can still be in flight; the copy must not count them as
    acknowledged until their batch is, or a copy closed early would drop them."""
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(5)))
    config = build(
        TailConfig,
        {"include": [str(tmp_path / "app.log*")], "positions": str(tmp_path / "pos.json"), "multiline": "none"},
    )
    source = TailSource(config, context(state_dir=tmp_path))
    try:
        in_flight = source.poll(100, 1 << 20)  # read, not yet acknowledged
        assert len(in_flight.lines) == 5
        shutil.copyfile(log, tmp_path / "app.log.1")
        os.truncate(log, 0)
        with open(log, "ab") as fh:
            fh.write(orjson.dumps({"seq": 5, "gen": 2}) + b"\n")
        source.scan()
        source.poll(100, 1 << 20)  # sees the truncation; the copy takes over at the end of what was read
        (copy,) = [f for f in source.files.values() if f.path.endswith(".1")]
        assert copy.emitted == log.with_name("app.log.1").stat().st_size
        assert copy.acked == 0, "the in-flight lines are not acknowledged yet"
        source.commit(in_flight.checkpoint)
        assert copy.acked == copy.emitted, "the in-flight batch's acknowledgement carries over to the copy"
    finally:
        source.shutdown()


def test_a_copy_taking_over_is_acknowledged_when_one_batch_also_carries_the_new_generation(tmp_path):
    """A batch gathers several polls and merges their checkpoints (``Pipeline._gather``): the old
    generation's lines and the first lines written after the truncation can share one batch. Its
    acknowledgement must still reach the copy, which has nothing else to read (it was copied where
    the original was read to), or the copy is never drained: held open and linked for ever after a
    later rotation deletes it, and read again from its stale position at the next start."""
    log, copy_path = tmp_path / "app.log", tmp_path / "app.log.1"
    log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(5)))
    positions = tmp_path / "pos.json"
    # hold_files: true, as with logrotate's allowhardlink: the links are what this test counts
    options = {
        "include": [str(tmp_path / "app.log*")],
        "positions": str(positions),
        "multiline": "none",
        "rotate_wait": 0,
        "hold_files": True,
    }
    source = TailSource(build(TailConfig, options), context(state_dir=tmp_path))
    try:
        old = source.poll(100, 1 << 20)  # the old generation, read to its end
        shutil.copyfile(log, copy_path)  # as logrotate's copytruncate: copy, then truncate
        os.truncate(log, 0)
        with open(log, "ab") as fh:
            fh.write(orjson.dumps({"seq": 5}) + b"\n")
        source.scan()  # the copy appears: parked on the original
        assert source.poll(100, 1 << 20) is None  # sees the truncation: the copy takes over at its end
        new = source.poll(100, 1 << 20)  # the new generation's first line
        assert seqs(old.lines.records()) + seqs(new.lines.records()) == Counter(range(6))
        merged = dict(old.checkpoint)
        merged.update(new.checkpoint)  # one batch, as the pipeline gathers it
        source.commit(merged)
        saved = {Path(e["path"]).name: e["offset"] for e in orjson.loads(positions.read_bytes())["files"]}
        assert saved == {"app.log.1": copy_path.stat().st_size, "app.log": log.stat().st_size}
        held = sorted(tmp_path.glob("*.held/*"))
        assert len(held) == 2
        copy_path.unlink()  # the next rotation replaces it
        source.scan()
        assert [Path(f.path).name for f in source.files.values()] == ["app.log"], "the drained copy is closed"
        assert len(sorted(tmp_path.glob("*.held/*"))) == 1, "and its link released"
    finally:
        source.shutdown()


def test_a_copy_taking_over_is_acknowledged_after_its_original_was_closed(tmp_path):
    """The original, truncated and then deleted (its service gone), is closed while the batch that
    carried its last lines still waits for a sink; that batch's acknowledgement still reaches the copy."""
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(5)))
    options = {
        "include": [str(tmp_path / "app.log*")],
        "positions": str(tmp_path / "pos.json"),
        "multiline": "none",
        "rotate_wait": 0,
    }
    source = TailSource(build(TailConfig, options), context(state_dir=tmp_path))
    try:
        in_flight = source.poll(100, 1 << 20)
        shutil.copyfile(log, tmp_path / "app.log.1")
        os.truncate(log, 0)
        source.scan()
        assert source.poll(100, 1 << 20) is None  # sees the truncation: the copy takes over
        log.unlink()
        source.scan()
        (copy,) = source.files.values()
        assert copy.path.endswith(".1"), "the emptied original left the globs and was closed"
        source.commit(in_flight.checkpoint)
        assert copy.acked == copy.emitted == copy.reader.current_size()
    finally:
        source.shutdown()


def test_a_file_that_grew_unread_while_rotated_away_is_not_closed_as_drained(tmp_path):
    """Seen empty, then written and rotated away while nothing was read (a sink was down): the size
    it had when opened must not make it look drained."""
    log = tmp_path / "app.log"
    log.touch()
    config = build(
        TailConfig,
        {"include": [str(log)], "positions": str(tmp_path / "pos.json"), "multiline": "none", "rotate_wait": 0},
    )
    source = TailSource(config, context(state_dir=tmp_path))
    try:
        source.scan()  # opened while empty
        log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(3)))
        source.scan()  # its first line is complete: active, nothing read yet
        log.rename(tmp_path / "app.log.1")
        log.touch()
        time.sleep(0.01)
        source.scan()  # rotated away and idle, but unread
        batch = source.poll(100, 1 << 20)
        assert batch is not None and sorted(seqs(batch.lines.records())) == [0, 1, 2]
    finally:
        source.shutdown()


def test_lag_and_age_count_lines_read_but_not_acknowledged_on_every_scan(tmp_path):
    """A batch read and held (by a worker, or a sink that is down) is not acknowledged: lag is the
    file's size minus what was acknowledged, measured at every scan, not only at commit."""
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(50)))
    config = build(TailConfig, {"include": [str(log)], "positions": str(tmp_path / "pos.json"), "multiline": "none"})
    source = TailSource(config, context(state_dir=tmp_path))
    registry = source.metrics.registry
    path = {"path": str(log)}
    try:
        held = source.poll(100, 1 << 20)
        assert held is not None and len(held.lines) == 50
        source.scan()
        assert registry.get_sample_value("obsbox_bridge_lag_bytes", path) == log.stat().st_size
        time.sleep(0.2)
        with open(log, "ab") as fh:
            fh.write(orjson.dumps({"seq": 50}) + b"\n")
        source.scan()
        assert registry.get_sample_value("obsbox_bridge_lag_bytes", path) == log.stat().st_size
        assert registry.get_sample_value("obsbox_bridge_oldest_unacked_age_seconds", path) >= 0.2
        source.commit(held.checkpoint)  # the first 50 lines acknowledged: the 51st waits, seen just now
        assert registry.get_sample_value("obsbox_bridge_lag_bytes", path) == len(orjson.dumps({"seq": 50})) + 1
        assert registry.get_sample_value("obsbox_bridge_oldest_unacked_age_seconds", path) < 0.2
        source.commit(source.poll(100, 1 << 20).checkpoint)
        assert registry.get_sample_value("obsbox_bridge_lag_bytes", path) == 0
        assert registry.get_sample_value("obsbox_bridge_oldest_unacked_age_seconds", path) == 0
    finally:
        source.shutdown()


def test_the_folder_watch_wakes_at_once_on_a_new_file_and_not_without_one(tmp_path):
    metrics = BridgeMetrics()
    watch = FolderWatch(metrics)
    try:
        assert watch.enabled, "inotify is there on Linux"
        folder = tmp_path / "logs"
        folder.mkdir()
        watch.watch({str(folder)})
        assert watch.wait(0.05) == Seen()
        (folder / "app.log").write_bytes(b"{}\n")
        started = time.monotonic()
        assert watch.wait(5) == Seen([str(folder / "app.log")])
        assert time.monotonic() - started < 1
        (folder / "app.log").rename(folder / "app.log.1")
        assert watch.wait(5).paths == [str(folder / "app.log"), str(folder / "app.log.1")]
        shutil.rmtree(folder)  # the kernel drops the watch; asked again, the folder is watched anew
        assert watch.wait(5).everything
        assert str(folder) not in watch.folders
        folder.mkdir()
        watch.watch({str(folder)})
        (folder / "app.log").touch()
        assert watch.wait(5).paths == [str(folder / "app.log")]
        assert may_name(str(folder / "app.log.1"), [str(folder / "*.log")])
        assert not may_name(str(folder / ".positions.json.tmp"), [str(folder / "*.log")])
        watch.watch({str(tmp_path / "missing")})  # a folder that does not exist yet is no error
        assert metrics.errors.labels("inotify")._value.get() == 0
    finally:
        watch.close()


def test_a_file_created_long_before_the_next_scan_is_read_at_once(tmp_path):
    running = Running([str(tmp_path / "*.log")], tmp_path / "state", scan_interval=60)
    time.sleep(0.3)  # the first scan has run; the next periodic one is a minute away
    (tmp_path / "app.log").write_bytes(orjson.dumps({"seq": 0}) + b"\n")
    records = running.wait_for(1, timeout=5)
    running.stop()
    assert [r.raw for r in records] == [b'{"seq":0}']


def test_the_runtimes_rotated_names_and_their_order(tmp_path):
    docker = "/var/lib/docker/containers/c1/c1-json.log"
    assert rotation_place(docker) == (docker, LIVE)
    assert rotation_place(docker + ".2") < rotation_place(docker + ".1") < rotation_place(docker)
    assert rotation_place(docker + ".1.gz")[0] == docker
    kubelet = "/var/log/pods/ns_pod_uid/app/0.log"
    older, newer = kubelet + ".20240102-150405", kubelet + ".20240102-150410.gz"
    assert rotation_place(older)[0] == rotation_place(newer)[0] == kubelet
    assert rotation_place(older) < rotation_place(newer) < rotation_place(kubelet)
    assert rotation_place(kubelet + ".20240102-150405.tmp")[1] == LIVE  # kubelet's temporary file: not a generation
    assert rotation_place("/srv/app.json.1")[1] == LIVE  # only .log files are known to rotate so

    for name in ("a.log", "a.log.1", "a.log.2", "a.log.1.gz", "a.log.old", "b.txt.1"):
        (tmp_path / name).write_bytes(b"{}\n")
    found = find_files([str(tmp_path / "*.log")], COMPRESSED)
    rotated = find_rotated([str(tmp_path / "*.log")], COMPRESSED, found)
    assert sorted(os.path.basename(p) for p in rotated.values()) == ["a.log.1", "a.log.2"]
    assert watched_folders([str(tmp_path / "*" / "x" / "*.log")]) == {str(tmp_path)}


def docker_files(folder: Path) -> tuple[list[bytes], Path, Path]:
    """A json-file generation that ends in the first 16 KiB piece of a line, and the live file that
    holds the rest of it (as Docker writes them when max-size falls between two pieces)."""
    moment = datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=UTC)
    lines = [orjson.dumps({"seq": n}) for n in range(3)]
    long_line = orjson.dumps({"seq": 3, "blob": hashlib.shake_256(b"blob").hexdigest(12_000)})
    lines += [long_line, orjson.dumps({"seq": 4})]
    older, live = folder / "c-json.log.1", folder / "c-json.log"
    older.write_bytes(
        b"".join(entry(line + b"\n", "stdout", moment) for line in lines[:3])
        + entry(long_line[:BUF_SIZE], "stdout", moment)
    )
    live.write_bytes(entry(long_line[BUF_SIZE:] + b"\n", "stdout", moment) + entry(lines[4] + b"\n", "stdout", moment))
    return lines, older, live


def test_a_line_cut_across_a_rotation_keeps_the_older_position_until_it_is_acknowledged(tmp_path):
    lines, older, live = docker_files(tmp_path)
    positions = tmp_path / "pos.json"
    config = build(
        TailConfig, {"include": [str(live)], "positions": str(positions), "multiline": "none", "hold_files": False}
    )
    source = TailSource(config, context(state_dir=tmp_path))
    try:
        first = source.poll(100, 1 << 20)
        assert [r.raw for r in first.lines.records()] == lines[:3]  # the cut line waits for its end
        second = source.poll(100, 1 << 20)
        joined = second.lines.records()
        assert [r.raw for r in joined] == lines[3:]
        assert joined[0].origin.path == str(older), "the line is where it began: the older file, its offset"
        assert joined[0].offset == sum(len(line) for line in older.read_bytes().splitlines(True)[:3])
        source.commit(first.checkpoint)
        saved = {Path(e["path"]).name: e["offset"] for e in orjson.loads(positions.read_bytes())["files"]}
        assert saved == {"c-json.log.1": joined[0].offset, "c-json.log": 0}, "a restart reads the cut line again"
        source.commit(second.checkpoint)
        saved = {Path(e["path"]).name: e["offset"] for e in orjson.loads(positions.read_bytes())["files"]}
        assert saved == {"c-json.log.1": older.stat().st_size, "c-json.log": live.stat().st_size}
    finally:
        source.shutdown()


def test_two_runs_over_a_line_cut_across_a_rotation_give_it_the_same_identity(tmp_path):
    _, _, live = docker_files(tmp_path)
    ids = []
    for run in range(2):
        running = Running([str(live)], tmp_path / f"state{run}", once=True)
        running.thread.join(20)
        ids.append([(r.origin.key, r.offset, r.trace_id, r.span_id) for r in running.sink.records()])
    assert len(ids[0]) == 5 and ids[0] == ids[1]


def test_positions_saved_before_they_said_how_many_bytes_their_fingerprint_covers_still_resume(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(orjson.dumps({"seq": i}) + b"\n" for i in range(10)))
    state = tmp_path / "state"
    state.mkdir()
    st_ = log.stat()
    first_line = log.read_bytes().split(b"\n")[0] + b"\n"
    old_entry = {"path": str(log), "dev": st_.st_dev, "ino": st_.st_ino, "fingerprint": digest(first_line).hex()}
    old_entry["offset"] = len(first_line) * 4
    (state / "positions.json").write_bytes(orjson.dumps({"version": 1, "files": [old_entry]}))
    running = Running([str(log)], state, once=True)
    running.thread.join(20)
    assert sorted(seqs(running.sink.records())) == list(range(4, 10))
    assert running.bridge.metrics.resumes.labels("resumed")._value.get() == 1
    saved = orjson.loads((state / "positions.json").read_bytes())["files"][0]
    assert saved["fingerprint_bytes"] == min(1024, log.stat().st_size)


def test_a_generation_deleted_while_stopped_and_held_by_a_link_is_read_before_its_successor(tmp_path):
    live = tmp_path / "c-json.log"
    moment = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)

    def docker_lines(seqs: range) -> bytes:
        return b"".join(entry(orjson.dumps({"seq": n}) + b"\n", "stdout", moment) for n in seqs)

    live.write_bytes(docker_lines(range(5)))
    config = build(
        TailConfig, {"include": [str(live)], "positions": str(tmp_path / "state" / "pos.json"), "multiline": "none"}
    )
    first = TailSource(config, context(state_dir=tmp_path / "state"))
    first.commit(first.poll(100, 1 << 20).checkpoint)
    with open(live, "ab") as fh:  # written, then rotated away and deleted, while the bridge is down
        fh.write(docker_lines(range(5, 10)))
    first.scan()
    first.shutdown()
    live.rename(tmp_path / "c-json.log.1")
    live.write_bytes(docker_lines(range(10, 15)))
    (tmp_path / "c-json.log.1").unlink()
    second = TailSource(config, context(state_dir=tmp_path / "state"))
    try:
        got = []
        while (batch := second.poll(2, 1 << 20)) is not None:  # small batches: files take turns
            got += [orjson.loads(r.raw)["seq"] for r in batch.lines.records()]
        assert got == list(range(5, 15))
    finally:
        second.shutdown()


def test_a_cri_line_cut_across_kubelet_rotation_arrives_whole(tmp_path):
    """containerd cuts a line at 16 KiB into ``P`` entries; kubelet renames ``0.log`` to
    ``0.log.<time>`` and has the runtime reopen it, so the ``F`` entry may open the new file."""
    folder = tmp_path / "pods" / "shop_cart-7d4b9_1f0e" / "cart"
    folder.mkdir(parents=True)
    stamp = "2026-12-01T09:00:00.123456789Z stdout"
    blob = hashlib.shake_256(b"cart").hexdigest(10_000)
    (folder / "0.log.20261201-090000").write_bytes(
        f'{stamp} F {{"seq":0}}\n{stamp} P {{"seq":1,"blob":"{blob[:16384]}\n'.encode()
    )
    (folder / "0.log").write_bytes(f'{stamp} F {blob[16384:]}"}}\n{stamp} F {{"seq":2}}\n'.encode())
    running = Running([str(folder / "0.log")], tmp_path / "state", once=True)
    running.thread.join(20)
    records = running.sink.records()
    assert [orjson.loads(r.raw)["seq"] for r in records] == [0, 1, 2]
    assert orjson.loads(records[1].raw)["blob"] == blob
    assert records[1].origin.path.endswith("0.log.20261201-090000")


def test_without_inotify_the_periodic_scan_still_finds_new_files(tmp_path, monkeypatch):
    monkeypatch.setattr(watch, "_libc", lambda: None)  # as on a platform without inotify
    assert not FolderWatch(BridgeMetrics()).enabled
    running = Running([str(tmp_path / "*.log")], tmp_path / "state", scan_interval=0.2)
    time.sleep(0.3)
    (tmp_path / "app.log").write_bytes(orjson.dumps({"seq": 0}) + b"\n")
    records = running.wait_for(1, timeout=5)
    running.stop()
    assert [r.raw for r in records] == [b'{"seq":0}']
