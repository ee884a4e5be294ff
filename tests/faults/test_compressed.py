"""Compressed rotations, made by the real logrotate (``compress``, ``delaycompress``): every line
shipped once, none of them binary; a compressed history present at start read once, and not again
after a restart; a compressed file that is cut short, corrupt or of a form not read is said once,
counted, and nothing of it is shipped."""

from __future__ import annotations

import gzip
import importlib.util
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from obsbox.exporters.bridge.sources.positions import Position, PositionsFile
from tests.bridge.harness import Running
from tests.bridge.test_tail import assert_exactly_once
from tests.waiting import wait_until

ROUND = 2000  # lines written between two rotations


def logrotate(conf: Path, state: Path) -> None:
    """One forced rotation by the real logrotate (``-f``), with its own state file."""
    if shutil.which("logrotate") is None:
        pytest.fail("this test runs the real logrotate: apt-get install logrotate")
    subprocess.run(["logrotate", "-f", "-s", str(state), str(conf)], check=True, capture_output=True, timeout=30)


def rotation(tmp_path: Path, log: Path, options: str) -> Path:
    """A logrotate config for ``log``, as a user writes it: nothing in it for the bridge (which makes
    no hard link to a file logrotate rotates, by default)."""
    conf = tmp_path / "logrotate.conf"
    conf.write_text(f"{log} {{\n    rotate 10\n    missingok\n    {options}\n}}\n")
    return conf


def append(log: Path, start: int, count: int) -> int:
    with open(log, "ab") as fh:
        fh.write(b"".join(orjson.dumps({"seq": seq, "msg": "x" * 40}) + b"\n" for seq in range(start, start + count)))
    return start + count


def all_json(running: Running) -> None:
    """No line shipped is binary: each one is the JSON object that was written."""
    for raw in running.received():
        assert type(orjson.loads(raw)) is dict, raw[:80]


def sample(running: Running, name: str, labels: dict[str, str]) -> float | None:
    return running.bridge.metrics.registry.get_sample_value(name, labels)


def warnings_naming(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and text in r.getMessage()]


@pytest.mark.parametrize("options", ["compress", "compress\n    delaycompress"])
def test_logrotate_compress_ships_every_line_once_and_none_as_binary(tmp_path, options):
    """The bridge follows ``app.log*`` with nothing excluded, so every generation logrotate leaves,
    plain or compressed, is in the glob: each compressed one holds lines already read from its
    plain predecessor and must not be shipped again, nor as bytes."""
    log = tmp_path / "app.log"
    conf = rotation(tmp_path, log, options)
    seq = append(log, 0, ROUND)
    running = Running([str(tmp_path / "app.log*")], tmp_path / "state", exclude=[])
    try:
        for _ in range(4):
            wait_until(lambda n=seq: len(running.received()) >= n, 20, f"{seq} lines shipped")
            logrotate(conf, tmp_path / "logrotate.state")
            seq = append(log, seq, ROUND)
        wait_until(lambda: len(running.received()) >= seq, 20, f"{seq} lines shipped")
        assert list(tmp_path.glob("app.log.*.gz")), "logrotate left no compressed generation"
        time.sleep(1.5)  # a compressed copy read again would show by now
        all_json(running)
        assert_exactly_once(running.sink.records(), seq)
        tracker = running.bridge.pipelines[0].sources[0].tracker
        copies = [t.reader for t in tracker.files.values() if t.reader.compressed and t.reader.drained()]
        assert copies, "no compressed generation read to its end"
        for reader in copies:  # read and acknowledged: only its first and last bytes are kept in TMPDIR
            assert os.fstat(reader.fd).st_blocks * 512 <= 64 * 1024 < reader.current_size()
    finally:
        running.stop()


def test_a_compressed_history_present_at_start_is_read_once_in_order_and_not_after_a_restart(tmp_path):
    log = tmp_path / "app.log"
    conf = rotation(tmp_path, log, "compress")
    seq = 0
    for _ in range(2):  # app.log.2.gz, app.log.1.gz: the bridge has never run
        seq = append(log, seq, ROUND)
        logrotate(conf, tmp_path / "logrotate.state")
    seq = append(log, seq, 50)
    assert sorted(p.name for p in tmp_path.glob("app.log.*")) == ["app.log.1.gz", "app.log.2.gz"]

    first = Running([str(log)], tmp_path / "state", once=True)
    first.thread.join(20)
    all_json(first)
    assert_exactly_once(first.sink.records(), seq)
    assert [orjson.loads(raw)["seq"] for raw in first.received()] == list(range(seq)), "oldest generation first"
    saved = PositionsFile(tmp_path / "state" / "positions.json").load()
    assert {Path(p.path).name: p.compressed for p in saved} == {
        "app.log.2.gz": True,
        "app.log.1.gz": True,
        "app.log": False,
    }

    second = Running([str(log)], tmp_path / "state", once=True)
    second.thread.join(20)
    assert second.received() == []


def test_a_plain_generation_compressed_while_the_bridge_was_stopped_is_not_read_again(tmp_path):
    """delaycompress: the plain app.log.1 the first run read whole becomes app.log.2.gz while the
    bridge is down; its saved position is claimed by the compressed copy, by its decompressed head."""
    log = tmp_path / "app.log"
    conf = rotation(tmp_path, log, "compress\n    delaycompress")
    seq = append(log, 0, ROUND)
    logrotate(conf, tmp_path / "logrotate.state")  # app.log.1, plain
    seq = append(log, seq, ROUND)
    glob = [str(tmp_path / "app.log*")]
    first = Running(glob, tmp_path / "state", once=True, exclude=[])
    first.thread.join(20)
    assert_exactly_once(first.sink.records(), seq)
    logrotate(conf, tmp_path / "logrotate.state")  # app.log.1 → app.log.2.gz, app.log → app.log.1
    assert (tmp_path / "app.log.2.gz").exists() and not (tmp_path / "app.log.2").exists()
    new = append(log, seq, 30)
    second = Running(glob, tmp_path / "state", once=True, exclude=[])
    second.thread.join(20)
    all_json(second)
    assert sorted(orjson.loads(raw)["seq"] for raw in second.received()) == list(range(seq, new))


def broken_files(tmp_path: Path) -> dict[str, bytes]:
    whole = gzip.compress(b"".join(orjson.dumps({"seq": n}) + b"\n" for n in range(1000)))
    return {
        "app.log.1.gz": whole[: len(whole) // 2],  # cut short
        "app.log.2.gz": whole[:10] + b"\n" + bytes(range(256)) * 4,  # a gzip header, then no deflate stream
        "app.log.3.zst": b"\x28\xb5\x2f\xfd" + b"\x00\n" * 100,  # zstd's magic, then no frame header
    }


@pytest.mark.parametrize("once", [True, False])
def test_a_cut_short_or_corrupt_compressed_file_is_said_once_counted_and_nothing_shipped(tmp_path, caplog, once):
    caplog.set_level(logging.INFO)
    broken = broken_files(tmp_path)
    corrupt = 3 if importlib.util.find_spec("zstandard") else 2  # with its wheel, the zstd file is corrupt too
    for name, data in broken.items():
        (tmp_path / name).write_bytes(data)
    log = tmp_path / "app.log"
    seq = append(log, 0, 20)
    running = Running([str(tmp_path / "app.log*")], tmp_path / "state", once=once, exclude=[])
    try:
        if once:
            running.thread.join(20)
        else:
            wait_until(lambda: len(running.received()) >= seq, 20, "the plain file's lines")
            wait_until(
                lambda: sample(running, "obsbox_bridge_source_problems", {"kind": "compression_corrupt"}) == corrupt,
                10,
                "the broken files judged",
            )
            time.sleep(0.5)  # more scans: nothing more is said
        all_json(running)
        assert_exactly_once(running.sink.records(), seq)
        assert sample(running, "obsbox_bridge_source_problems", {"kind": "compression_corrupt"}) == corrupt
        assert sample(running, "obsbox_bridge_errors_total", {"kind": "compression_corrupt"}) == corrupt
        if corrupt == 2:
            assert sample(running, "obsbox_bridge_source_problems", {"kind": "compression_unsupported"}) == 1
        for name in broken:
            said = warnings_naming(caplog, name)
            assert len(said) == 1, said
    finally:
        if not once:
            running.stop()


def test_compression_none_reads_the_bytes_as_they_are(tmp_path):
    """For whoever wants that: ``compression: none`` reads a gzip file's bytes as lines."""
    (tmp_path / "app.log.1.gz").write_bytes(gzip.compress(b'{"seq": 0}\n' * 50))
    running = Running([str(tmp_path / "app.log*")], tmp_path / "state", once=True, exclude=[], compression="none")
    running.thread.join(20)
    assert running.received() and b'{"seq": 0}' not in b"".join(running.received())


def test_a_position_of_a_compressed_file_says_so_and_one_saved_before_loads(tmp_path):
    positions = PositionsFile(tmp_path / "positions.json")
    plain = Position("/l/app.log", 1, 2, "ab", 10, 1024)
    packed = Position("/l/app.log.1.gz", 1, 3, "cd", 20, 1024, ((0, 5),), compressed=True)
    positions.save([plain, packed])
    entries = orjson.loads((tmp_path / "positions.json").read_bytes())["files"]
    assert "compressed" not in entries[0] and entries[1]["compressed"] is True  # older versions load plain ones
    assert PositionsFile(tmp_path / "positions.json").load() == [plain, packed]


def test_bzip2_and_xz_generations_are_read_and_zstd_without_its_wheel_is_said(tmp_path, caplog):
    """Made by the real ``bzip2``, ``xz`` and ``zstd`` commands, as logrotate's ``compresscmd`` runs them."""
    caplog.set_level(logging.INFO)
    seq = 0
    for name, command in (("app.log.3", "zstd"), ("app.log.2", "bzip2"), ("app.log.1", "xz")):
        if shutil.which(command) is None:
            pytest.fail(f"this test runs the real {command}: apt-get install {command}")
        seq = append(tmp_path / name, seq, 100)
        subprocess.run([command, "-q", "--rm" if command == "zstd" else "-f", str(tmp_path / name)], check=True)
    seq = append(tmp_path / "app.log", seq, 10)
    zstd = importlib.util.find_spec("zstandard") is not None
    running = Running([str(tmp_path / "app.log")], tmp_path / "state", once=True)
    running.thread.join(20)
    all_json(running)
    shipped = [orjson.loads(raw)["seq"] for raw in running.received()]
    assert shipped == list(range(0 if zstd else 100, seq)), "every readable generation, oldest first"
    if not zstd:
        assert len(warnings_naming(caplog, "app.log.3.zst")) == 1
        assert sample(running, "obsbox_bridge_source_problems", {"kind": "compression_unsupported"}) == 1


def test_with_the_zstandard_wheel_a_zstd_file_cut_short_is_said_and_a_whole_one_read(tmp_path, caplog):
    """``zstandard``'s own ``stream_reader`` stops quietly at a cut; the bridge must not."""
    pytest.importorskip("zstandard")
    caplog.set_level(logging.INFO)
    end = append(tmp_path / "app.log.2", 0, 3000)
    subprocess.run(["zstd", "-q", "--rm", str(tmp_path / "app.log.2")], check=True)
    whole = (tmp_path / "app.log.2.zst").read_bytes()
    (tmp_path / "app.log.1.zst").write_bytes(whole[: len(whole) // 2])
    running = Running([str(tmp_path / "app.log*")], tmp_path / "state", once=True, exclude=[])
    running.thread.join(20)
    all_json(running)
    assert_exactly_once(running.sink.records(), end)
    assert len(warnings_naming(caplog, "app.log.1.zst")) == 1
