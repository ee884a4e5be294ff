"""Faults at the outputs the bridge writes: the file sink's output rotated away by the real
logrotate, and a real full filesystem under the file sink and under the dead-letter file.

The receiver is the file itself: every generation of it that logrotate rotated is archived as a
collector would ship it, before the next rotation deletes it; the ledger counts what all of them
hold together."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from obsbox.config import build
from obsbox.exporters.bridge.component import ExportResult
from obsbox.exporters.bridge.deadletter import DeadLetter
from obsbox.exporters.bridge.record import Origin, Record
from obsbox.exporters.bridge.sinks.otlp import OtlpConfig, OtlpSink
from obsbox.local.receiver import Receiver
from tests.bridge.harness import Running, context
from tests.faults.ledger import Ledger, dead_lettered, lines_of
from tests.faults.mounts import fill, small_tmpfs
from tests.waiting import wait_until

ROUND = 300  # lines a round


def logrotate(conf: Path, state: Path) -> None:
    """One forced rotation by the real logrotate (``-f``), with its own state file."""
    if shutil.which("logrotate") is None:
        pytest.fail("this test runs the real logrotate: apt-get install logrotate")
    subprocess.run(["logrotate", "-f", "-s", str(state), str(conf)], check=True, capture_output=True, timeout=30)


@pytest.mark.parametrize("create", ["create 0640", "nocreate"])
def test_an_output_rotated_away_by_logrotate_loses_nothing(tmp_path, create):
    """logrotate renames out.jsonl to out.jsonl.1 (``create``: and makes a new out.jsonl itself;
    ``nocreate``: the bridge makes it, 0600) and, with ``rotate 1``, deletes that generation at the
    next rotation. Each generation is archived right after its rotation: a line written into it
    later, as a writer that keeps its old descriptor does, would be deleted with it."""
    ledger = Ledger("rotate")
    app, out = tmp_path / "app.json", tmp_path / "out" / "out.jsonl"
    out.parent.mkdir(mode=0o700)
    conf = tmp_path / "logrotate.conf"
    conf.write_text(f"{out} {{\n    rotate 1\n    {create}\n    missingok\n    nocompress\n}}\n")
    archived: list[bytes] = []
    rotated = out.with_name("out.jsonl.1")
    run = Running([str(app)], tmp_path / "state", sinks={"file": {"path": str(out)}})
    try:
        for _ in range(3):
            ledger.append(app, ROUND)
            wait_until(
                lambda: not ledger.check([*archived, *lines_of(out), *lines_of(rotated)]).lost,
                30,
                "every line written so far is in the output",
            )
            logrotate(conf, tmp_path / "logrotate.state")
            archived.extend(lines_of(rotated))  # the generation just rotated; the next rotation deletes it
        ledger.append(app, ROUND)
        wait_until(lambda: not ledger.check([*archived, *lines_of(out)]).lost, 10, "the last round is in the output")
    except AssertionError:
        pass  # the ledger below says what is missing
    finally:
        run.stop()
    ledger.check([*archived, *lines_of(out)]).assert_delivered(max_duplicates=0)
    assert stat.S_IMODE(out.stat().st_mode) == (0o640 if create.startswith("create") else 0o600)


def test_a_full_disk_under_the_file_sink_leaves_no_torn_line(tmp_path):
    """The output's filesystem (a real 256 KiB tmpfs) fills in the middle of a batch: the part that
    was written is cut back before the retry, so once space is freed every line is there once,
    and none is torn. The failure is one warning line a retry, counted, not a traceback."""
    ledger = Ledger("full")
    app = tmp_path / "app.json"
    ledger.append(app, 800, pad=60)  # ~200 bytes a line enriched: all of it fits in 256 KiB, not in 24 KiB
    with small_tmpfs(tmp_path / "disk") as disk:
        out = disk / "out.jsonl"
        filler = fill(disk, leave=24 * 1024)
        run = Running([str(app)], tmp_path / "state", sinks={"file": {"path": str(out)}})
        metrics = run.bridge.metrics
        try:
            failed = metrics.retries.labels("file", "export_failed")
            wait_until(lambda: failed._value.get() >= 2, 30, "a write failed twice")
            filler.unlink()
            wait_until(
                lambda: not ledger.check(lines_of(out)).lost, 30, "every line is in the output once space is back"
            )
        except AssertionError:
            pass  # the ledger below says what is wrong
        finally:
            run.stop()
        ledger.check(lines_of(out)).assert_delivered(max_duplicates=0)
        assert out.read_bytes().endswith(b"\n")
    assert metrics.errors.labels("file_write")._value.get() >= 2


@pytest.fixture
def receiver():
    rx = Receiver().start()
    yield rx
    rx.stop()


def test_a_dead_letter_that_does_not_fit_is_neither_torn_nor_counted(tmp_path, receiver):
    """An OTLP receiver refuses a batch for good (400) while the dead-letter file's filesystem is
    full: the write fails, the file keeps no part of it, and nothing is counted as dead-lettered
    (the sink raises, so the batch is tried again). With space back, every entry is written whole."""
    ledger = Ledger("dead")
    origin = Origin(str(tmp_path / "app.json"), b"\x02" * 16)
    recs = [Record(line, origin, seq * 300) for seq, line in enumerate(ledger.lines(100, pad=200))]
    with small_tmpfs(tmp_path / "disk") as disk:
        dead = disk / "dead-letter-otlp.jsonl"
        config = build(OtlpConfig, {"endpoint": receiver.url, "dead_letter": str(dead)})
        otlp = OtlpSink(config, context("otlp", state_dir=disk))
        counted = otlp.context.metrics.dead_letters.labels("otlp")
        filler = fill(disk, leave=8 * 1024)  # 100 entries of ~400 bytes do not fit
        receiver.refuse(400, times=1, body=b"invalid LogRecord")
        with pytest.raises(OSError, match="No space left on device"):
            otlp.export(recs)
        assert lines_of(dead) == [], "a failed dead-letter write left part of itself behind"
        assert counted._value.get() == 0
        filler.unlink()
        receiver.refuse(400, times=1, body=b"invalid LogRecord")
        assert otlp.export(recs) is ExportResult.SUCCESS
        ledger.check(dead_lettered(dead)).assert_delivered()
        assert counted._value.get() == 100
        assert stat.S_IMODE(dead.stat().st_mode) == 0o600
        otlp.shutdown()


def test_a_dead_letter_entry_cut_short_by_kill_9_is_taken_off_before_the_next(tmp_path):
    """A ``kill -9`` in the middle of a large dead-letter write leaves the pages copied so far
    (Linux's ``generic_perform_write`` stops at a pending fatal signal and keeps them): that file is
    made here by cutting a whole one short. The next write takes the torn entry off first; its records
    were never acknowledged, so they come back and are written again whole."""
    ledger = Ledger("killed")
    origin = Origin(str(tmp_path / "app.json"), b"\x03" * 16)
    recs = [Record(line, origin, seq * 300) for seq, line in enumerate(ledger.lines(20, pad=100))]
    dead = DeadLetter(tmp_path / "dead-letter-loki.jsonl")
    dead.write("loki", recs[:10], "refused", 400)
    whole = dead.path.read_bytes()
    dead.write("loki", recs[10:], "refused", 400)
    with open(dead.path, "r+b") as handle:
        handle.truncate(len(whole) + 150)  # the second write, killed 150 bytes in
    dead.write("loki", recs[10:], "refused", 400)  # the batch read again after the restart
    ledger.check(dead_lettered(dead.path)).assert_delivered()


@pytest.mark.parametrize("hold_files", [None, True], ids=["default", "hold every file"])
def test_a_followed_log_is_still_rotated_and_compressed_by_logrotate(tmp_path, hold_files):
    """logrotate 3.19 and later skip a file with another hard link ("Rotation of files with multiple
    hard links is not allowed", said only with -v, exit 0) and fail to compress one: a bridge that
    held every file it follows stopped its users' logrotate, and the log grew for ever. By default
    the bridge holds only what container runtimes rotate; ``hold_files: true`` still links every file
    (for logrotate's ``allowhardlink``), and logrotate then refuses as it did."""
    ledger, app = Ledger("logrotate"), tmp_path / "logs" / "app.log"
    app.parent.mkdir()
    conf = tmp_path / "logrotate.conf"
    conf.write_text(f"{app} {{\n    rotate 3\n    compress\n    delaycompress\n    missingok\n}}\n")
    out = tmp_path / "out.jsonl"
    options = {} if hold_files is None else {"hold_files": hold_files}
    run = Running([str(app)], tmp_path / "state", sinks={"file": {"path": str(out)}}, **options)
    try:
        for _ in range(3):
            ledger.append(app, ROUND)
            wait_until(lambda: not ledger.check(lines_of(out)).lost, 30, "every line written so far is in the output")
            subprocess.run(
                ["logrotate", "-f", "-s", str(tmp_path / "state.lr"), str(conf)],
                check=False,
                capture_output=True,
                timeout=30,
            )
    finally:
        run.stop()
    rotated = sorted(p.name for p in app.parent.iterdir())
    if hold_files is True:
        assert rotated == ["app.log"], "logrotate refuses a file with another link"
        return
    assert rotated == ["app.log.1", "app.log.2.gz", "app.log.3.gz"], (
        rotated
    )  # three rotations, compressed but the newest
    ledger.check(lines_of(out)).assert_delivered(max_duplicates=0)
