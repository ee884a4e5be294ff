"""Faults in the state dir: a read-only or immutable state, modes that let others read what the
bridge keeps, and positions files of the wrong shape. Each is refused, or mended, before a line is
shipped; the file sink's output is the receiver the ledger counts."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
import yaml

from obsbox.config import ConfigError
from obsbox.exporters.bridge import config as bridge_config
from obsbox.exporters.bridge import registry
from obsbox.exporters.bridge.deadletter import DeadLetter, default_path
from obsbox.exporters.bridge.runner import Bridge
from obsbox.exporters.bridge.sources.positions import Position, PositionsError, PositionsFile
from tests.bridge.harness import Running
from tests.bridge.test_components import DeadSink  # a sink that always returns FAILURE
from tests.faults.ledger import Ledger, dead_lettered, lines_of
from tests.faults.mounts import fill, need_root, read_only, small_tmpfs
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def config_data(app: Path, state: Path, out: Path, once: bool = True) -> dict:
    """A tail → file pipeline whose positions are the default ones, in the state dir."""
    return {
        "sources": {"tail": {"include": [str(app)], "scan_interval": 0.05}},
        "processors": {"parse": {}, "trace": {}},
        "sinks": {"file": {"path": str(out)}},
        "pipelines": {"logs": {"sources": ["tail"], "processors": ["parse", "trace"], "sinks": ["file"]}},
        "settings": {"state_dir": str(state), "once": once, "progress": False, "workers": 0},
    }


def run_bridge(tmp_path: Path, data: dict) -> subprocess.CompletedProcess:
    """``python -m obsbox bridge --config FILE`` as a user runs it."""
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml.safe_dump(data))
    return subprocess.run(
        [sys.executable, "-m", "obsbox", "bridge", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )


def one_line(result: subprocess.CompletedProcess) -> str:
    """The CLI's refusal: exit 2, a single line on stderr, no traceback."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_a_read_only_state_dir_is_refused_before_a_line_is_shipped(tmp_path):
    """A first run saves positions; the state dir is then mounted read-only (even root gets EROFS).
    The second run must not ship the new lines it could never commit: one line, exit 2. Once the
    state dir is writable again, every line is delivered once."""
    ledger = Ledger("ro")
    app, state, out = tmp_path / "app.json", tmp_path / "state", tmp_path / "out.jsonl"
    data = config_data(app, state, out)
    ledger.append(app, 100)
    assert run_bridge(tmp_path, data).returncode == 0
    ledger.append(app, 100)
    with read_only(state):
        refused = one_line(run_bridge(tmp_path, data))
    assert f"{state}" in refused and "Read-only file system" in refused and "settings.state_dir" in refused
    assert ledger.check(lines_of(out)).lost == list(range(100, 200)), "lines were shipped before the refusal"
    assert run_bridge(tmp_path, data).returncode == 0
    ledger.check(lines_of(out)).assert_delivered(max_duplicates=0)


def test_an_immutable_positions_file_is_refused_before_a_line_is_shipped(tmp_path):
    """``chattr +i`` on the positions file: the state dir is writable, the file cannot be replaced."""
    need_root("make a file immutable (chattr +i)")
    ledger = Ledger("immutable")
    app, state, out = tmp_path / "app.json", tmp_path / "state", tmp_path / "out.jsonl"
    ledger.append(app, 10)
    data = config_data(app, state, out)
    Bridge(bridge_config.from_data(data)).run()
    positions = state / "positions-logs-tail.json"
    ledger.append(app, 10)
    subprocess.run(["chattr", "+i", str(positions)], check=True)
    try:
        with pytest.raises(ConfigError, match=rf"{positions} cannot be written \(Operation not permitted\)"):
            Bridge(bridge_config.from_data(data))
    finally:
        subprocess.run(["chattr", "-i", str(positions)], check=True)
    assert ledger.check(lines_of(out)).lost == list(range(10, 20))


def test_what_the_bridge_keeps_is_its_owners_only(tmp_path):
    """State dir and held-links folder 0700; positions, dead letters and the output 0600: whatever
    the umask (0 here), since they hold the source logs' lines."""
    ledger = Ledger("modes")
    app, state, out = tmp_path / "app.json", tmp_path / "state", tmp_path / "out" / "out.jsonl"
    ledger.append(app, 10)
    old_umask = os.umask(0)
    try:
        run = Running([str(app)], state, sinks={"file": {"path": str(out)}}, hold_files=True)
        try:
            wait_until(lambda: not ledger.check(lines_of(out)).lost, 30, "the lines are in the output")
            wait_until((state / "positions.json").exists, 30, "positions are saved")
        finally:
            run.stop()
        DeadLetter(default_path(state, "otlp")).write("otlp", [], "refused", 400)
    finally:
        os.umask(old_umask)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (state, state / "positions.json", out)}
    modes["held"] = stat.S_IMODE((state / "positions.held").stat().st_mode)
    modes["dead"] = stat.S_IMODE(default_path(state, "otlp").stat().st_mode)
    assert modes == {"state": 0o700, "positions.json": 0o600, "out.jsonl": 0o600, "held": 0o700, "dead": 0o600}


def test_an_older_state_dir_open_to_others_is_tightened_once_and_the_held_logs_keep_their_mode(tmp_path, caplog):
    """0755 / 0644 as an older version made them: the bridge takes group and other access away from
    its own files (and says so in one warning), but a held link *is* the source log: its mode stays."""
    app, state, out = tmp_path / "app.json", tmp_path / "state", tmp_path / "out.jsonl"
    app.write_bytes(b'{"msg": "held"}\n')
    app.chmod(0o644)
    held = state / "positions-logs-tail.held"
    held.mkdir(parents=True)
    os.link(app, held / "1-2")
    (state / "positions-logs-tail.json").write_bytes(orjson.dumps({"version": 1, "files": []}))
    (state / "dead-letter-loki.jsonl").write_bytes(b"{}\n")
    (state / ".positions-logs-tail.json.tmp").write_bytes(b"{")  # a save that a kill -9 cut short
    for path, mode in ((state, 0o755), (held, 0o755), *((p, 0o644) for p in state.glob("*.json*"))):
        path.chmod(mode)
    with caplog.at_level(logging.WARNING):
        Bridge(bridge_config.from_data(config_data(app, state, out))).close()
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (state, held, *state.glob("*.json*"))}
    assert modes == {
        "state": 0o700,
        "positions-logs-tail.held": 0o700,
        "positions-logs-tail.json": 0o600,
        "dead-letter-loki.jsonl": 0o600,
        ".positions-logs-tail.json.tmp": 0o600,
    }
    assert stat.S_IMODE(app.stat().st_mode) == 0o644, "the held link is the log itself: its mode is not ours"
    tightened = [r for r in caplog.records if "tightened" in r.getMessage()]
    assert len(tightened) == 1 and "0755 → 0700" in tightened[0].getMessage()


ENTRY = {"path": "/var/log/app.json", "dev": 2049, "ino": 131, "fingerprint": "ab" * 16, "offset": 120}


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ([ENTRY], "is not an object with a list of 'files'"),
        ({"version": 1, "files": {"a": ENTRY}}, "is not an object with a list of 'files'"),
        ({"files": [ENTRY]}, "has unsupported version None"),
        ({"version": 1, "files": [ENTRY, {**ENTRY, "offset": -5}]}, "files[1] (/var/log/app.json): offset is -5"),
        ({"version": 1, "files": [{**ENTRY, "offset": "abc"}]}, "files[0] (/var/log/app.json): offset is 'abc'"),
        ({"version": 1, "files": [{**ENTRY, "ino": True}]}, "files[0] (/var/log/app.json): ino is True"),
        ({"version": 1, "files": [{**ENTRY, "path": 7}]}, "files[0]: path is 7, not a string"),
        ({"version": 1, "files": [ENTRY, "app.json"]}, "files[1] is not an object"),
        ({"version": 1, "files": [{"path": "/var/log/app.json"}]}, "missing keys ['dev', 'ino', 'fingerprint', 'off"),
        ({"version": 1, "files": [{**ENTRY, "inode": 3}]}, "files[0] (/var/log/app.json) has unknown keys ['inode']"),
    ],
)
def test_a_positions_file_of_the_wrong_shape_is_one_line_naming_the_entry(tmp_path, content, said):
    app, state, out = tmp_path / "app.json", tmp_path / "state", tmp_path / "out.jsonl"
    app.write_bytes(b'{"msg": "x"}\n')
    positions = state / "positions-logs-tail.json"
    state.mkdir()
    positions.write_bytes(orjson.dumps(content))
    with pytest.raises(PositionsError) as caught:
        Bridge(bridge_config.from_data(config_data(app, state, out)))
    message = str(caught.value)
    assert message.startswith(f"positions file {positions} ") and said in message, message
    assert message.endswith("move it aside to start from the beginning of every file")
    assert isinstance(caught.value, ConfigError)


def test_the_cli_refuses_a_positions_file_of_the_wrong_shape_in_one_line(tmp_path):
    app, state, out = tmp_path / "app.json", tmp_path / "state", tmp_path / "out.jsonl"
    app.write_bytes(b'{"msg": "x"}\n')
    state.mkdir()
    (state / "positions-logs-tail.json").write_bytes(orjson.dumps({"version": 1, "files": [{**ENTRY, "offset": -5}]}))
    said = one_line(run_bridge(tmp_path, config_data(app, state, out)))
    assert "files[0] (/var/log/app.json): offset is -5, not a whole number of at least 0" in said
    assert not out.exists() or out.read_bytes() == b""


def saved_offset(positions: Path) -> int | None:
    """The offset saved for the first file, or None before the first save (or mid-rename)."""
    try:
        return orjson.loads(positions.read_bytes())["files"][0]["offset"]
    except (OSError, orjson.JSONDecodeError, IndexError, KeyError):
        return None


def test_positions_edited_while_running_are_not_read_again_but_refused_at_the_next_start(tmp_path):
    """Someone drops a key from the positions file of a running bridge: the run goes on (the file
    is not read again) and the next start names the entry instead of failing halfway."""
    ledger = Ledger("edited")
    app, state = tmp_path / "app.json", tmp_path / "state"
    out = tmp_path / "out.jsonl"
    ledger.append(app, 20)
    run = Running([str(app)], state, sinks={"file": {"path": str(out)}})
    positions = state / "positions.json"
    try:
        wait_until(lambda: saved_offset(positions) == app.stat().st_size, 30, "the lines are committed")
        saved = orjson.loads(positions.read_bytes())
        del saved["files"][0]["offset"]
        positions.write_bytes(orjson.dumps(saved))
        time.sleep(0.3)
        assert run.thread.is_alive()
    finally:
        run.stop()
    ledger.check(lines_of(out)).assert_delivered()
    data = config_data(app, state, out)
    data["sources"]["tail"]["positions"] = str(positions)
    with pytest.raises(PositionsError, match=r"files\[0\] \(.*app.json\) has missing keys \['offset'\]"):
        Bridge(bridge_config.from_data(data))


def test_positions_that_do_not_fit_on_a_full_disk_leave_the_saved_ones_whole(tmp_path):
    """The state dir's filesystem (a real tmpfs) is full when positions are saved: the temp file
    takes part of them, and a short write renamed into place would be a torn positions file. The
    save fails instead, and the positions saved before are still there, whole."""
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        positions = PositionsFile(disk / "positions.json")
        before = [Position("/var/log/app.json", 1, 2, "ab" * 16, 10)]
        positions.save(before)
        filler = fill(disk, leave=8 * 1024)
        many = [Position(f"/var/log/app-{n}.json", 1, n, "cd" * 16, n) for n in range(200)]  # ~34 KB
        try:
            with pytest.raises(OSError, match="No space left on device"):
                positions.save(many)
            assert PositionsFile(positions.path).load() == before
        finally:
            filler.unlink()
        positions.save(many)
        assert PositionsFile(positions.path).load() == many


def test_positions_that_cannot_be_saved_mid_run_are_said_once_and_saved_when_the_disk_has_room(tmp_path):
    """The state dir's disk fills up while the bridge runs: lines keep arriving at the sink, the
    failed save is said once and counted (not a traceback that stops the pipeline), and the first
    commit after space is back saves positions up to every acknowledged line."""
    ledger = Ledger("positions")
    app = tmp_path / "app.json"
    ledger.append(app, 50)
    with small_tmpfs(tmp_path / "state") as state:
        running = Running([str(app)], state)
        try:
            assert len(running.wait_for(50)) == 50
            filler = fill(state)
            ledger.append(app, 50)
            assert len(running.wait_for(100)) == 100, "the bridge stopped delivering when positions could not be saved"
            errors = running.bridge.metrics.registry.get_sample_value
            wait_until(lambda: errors("obsbox_bridge_errors_total", {"kind": "positions"}) == 1, 10, "one error")
            assert running.thread.is_alive()
            filler.unlink()
            ledger.append(app, 50)
            assert len(running.wait_for(150)) == 150
        finally:
            running.stop()
        ledger.check(rec.raw for rec in running.sink.records()).assert_delivered()
        (saved,) = PositionsFile(state / "positions.json").load()
        assert saved.offset == app.stat().st_size, "the positions saved after the disk had room again"


def test_a_dead_letter_file_on_a_full_disk_is_written_once_there_is_room_and_only_then_acknowledged(tmp_path):
    """A sink gives up on a batch while the state dir's disk is full: the dead-letter write is retried
    (said in one line each time, no traceback), and once there is room every line is there whole;
    positions move only after that."""
    registry.register("sinks", DeadSink)
    ledger = Ledger("buried")
    app = tmp_path / "app.json"
    ledger.append(app, 20)
    with small_tmpfs(tmp_path / "state") as state:
        data = config_data(app, state, tmp_path / "unused.jsonl", once=True)
        data["sinks"] = {"dead_test": {}}
        data["pipelines"]["logs"]["sinks"] = ["dead_test"]
        data["settings"]["retry"] = {"initial_interval": 0.01, "max_interval": 0.05, "max_elapsed_time": 0.2}
        bridge = Bridge(bridge_config.from_data(data))
        filler = fill(state)
        thread = threading.Thread(target=bridge.run, daemon=True)
        thread.start()
        sample = bridge.metrics.registry.get_sample_value
        wait_until(lambda: (sample("obsbox_bridge_errors_total", {"kind": "dead_letter"}) or 0) >= 2, 20, "retries")
        assert not (state / "positions-logs-tail.json").exists(), "positions moved before the lines were kept"
        filler.unlink()
        thread.join(30)
        assert not thread.is_alive()
        dead = default_path(state, "dead_test")
        ledger.check(dead_lettered(dead)).assert_delivered()
        assert sample("obsbox_bridge_lines_shipped_total", {"sink": "dead_test", "outcome": "dead_lettered"}) == 20
        assert PositionsFile(state / "positions-logs-tail.json").load()[0].offset == app.stat().st_size
