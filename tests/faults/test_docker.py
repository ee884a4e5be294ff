"""Faults a real Docker engine makes: its json-file rotation under the bridge, and its partial entries.

Each container prints the ledger's lines with busybox's ``printf`` (the same bytes ``known_line``
gives, which every test checks on the first entry Docker wrote), Docker wraps and rotates them
itself (``max-size=100k``, ``max-file=3``: it removes ``.2``, renames ``.1`` to ``.2`` and the log to
``.1``, then creates a new log, which on the engine's own ext4 often gets the inode of the file just
removed), and two bridges follow the container's folder at once: one with the glob a user writes
(``*-json.log``), one with a glob that also matches the rotated files (``*-json.log*``).
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import orjson
import pytest

from obsbox.conventions import BRIDGE_ROTATIONS, BRIDGE_UNREADABLE_BYTES
from tests.bridge.harness import Running
from tests.faults.docker_engine import Container, Engine, InodeWatch, running_engine  # noqa: F401 (the fixture)
from tests.faults.ledger import Ledger, known_line

pytestmark = pytest.mark.slow
GLOBS = {"user's glob": "*-json.log", "rotated files too": "*-json.log*"}
PAD = 150  # a ledger line of about 200 bytes; Docker's entry for it is about 290


def printed(ledger: Ledger, count: int, *, pad: int = PAD, per_tick: int = 1_000_000, tick: float = 0) -> str:
    """A shell loop that prints the ledger's next ``count`` lines, ``per_tick`` of them every ``tick`` s."""
    first = ledger.next_seq
    ledger.lines(count, pad)
    line = '{"run":"%s","seq":%d,"msg":"line %d of %s","pad":"%s"}\\n'
    return (
        f'pad=$(printf "%{pad}s" "" | tr " " x); i={first}; end={first + count}; '
        "while [ $i -lt $end ]; do j=0; "
        f"while [ $j -lt {per_tick} ] && [ $i -lt $end ]; do "
        f"printf '{line}' {ledger.run} $i $i {ledger.run} \"$pad\"; i=$((i+1)); j=$((j+1)); done; "
        f"sleep {tick}; done"
    )


def run_followed(engine: Engine, script: str, tmp_path: Path) -> tuple[Container, dict[str, Running], list[int]]:
    """Run ``script`` in a container with a bridge for each of ``GLOBS`` on its folder from the start;
    the container, the bridges, still running, and the inodes its log had, in turn."""
    container = engine.create(script)
    bridges = {name: Running([str(container.log.parent / glob)], tmp_path / name) for name, glob in GLOBS.items()}
    watch = InodeWatch(container.log)
    container.start()
    assert container.wait() == 0
    return container, bridges, watch.stop()


def received(running: Running, expected: int, settle: float = 0.5) -> list[bytes]:
    """The application lines the bridge shipped, once it shipped ``expected`` (and a moment more, for
    any duplicate), or when 20 s passed; the bridge is stopped."""
    try:
        running.wait_for(expected, timeout=20)
        time.sleep(settle)
    finally:
        running.stop()
    return running.received()


def seq_of(line: bytes) -> int | None:
    """The ledger's sequence number in a shipped line; None for a torn one."""
    try:
        fields = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return fields.get("seq") if isinstance(fields, dict) else None


def outcomes(bridges: dict[str, Running], ledger: Ledger) -> dict[str, str]:
    """What each bridge delivered, in the ledger's words, with how many lines came after a later one
    and how many times a rotation was taken for a truncation (its lines then counted unreadable)."""
    out = {}
    for name, running in bridges.items():
        lines = received(running, ledger.next_seq)
        seqs = [seq for seq in map(seq_of, lines) if seq is not None]
        late = [(after, before) for before, after in itertools.pairwise(seqs) if after < before]
        registry = running.bridge.metrics.registry
        truncations = registry.get_sample_value(BRIDGE_ROTATIONS, {"kind": "copytruncate"}) or 0
        unreadable = registry.get_sample_value(BRIDGE_UNREADABLE_BYTES) or 0
        out[name] = (
            f"{ledger.check(lines)}, {len(late)} out of order, {truncations:.0f} truncations, "
            f"{unreadable:.0f} bytes unread" + (f" (line {late[0][0]} came after {late[0][1]})" if late else "")
        )
    return out


def assert_delivered(outcome: dict[str, str]) -> None:
    clean = ": 0 lost, 0 duplicates, 0 torn, 0 out of order, 0 truncations, 0 bytes unread"
    assert all(o.endswith(clean) for o in outcome.values()), "; ".join(f"{n}: {o}" for n, o in outcome.items())


def assert_printed_as_the_ledger_writes(container: Container, pad: int = PAD) -> None:
    """The first entry Docker wrote (in the oldest file left) holds the very bytes ``known_line`` gives."""
    oldest = max(container.log.parent.glob("*-json.log*"), key=lambda path: path.name)
    line = orjson.loads(oldest.read_bytes().split(b"\n", 1)[0])["log"].removesuffix("\n").encode()
    fields = orjson.loads(line)
    assert line == known_line(fields["run"], fields["seq"], pad)


def test_a_containers_last_line_without_newline_ships_once_and_apart_from_its_next_run(
    docker_engine: Engine, tmp_path: Path
):
    """Docker writes the rest of a stream that ended without a newline as an entry without one; the
    container's next run starts a new entry. Each is its own line, with IDs, shipped at once."""
    ledger = Ledger("restart")
    lines = ledger.lines(4)
    container = docker_engine.create(
        "if [ -e /ran ]; then "
        f"printf '%s\\n' '{lines[2].decode()}' '{lines[3].decode()}'; "
        f"else touch /ran; printf '%s\\n%s' '{lines[0].decode()}' '{lines[1].decode()}'; fi"
    )
    running = Running([str(container.log.parent / "*-json.log")], tmp_path / "state")
    try:
        container.start()
        assert container.wait() == 0
        shipped = running.wait_for(2, timeout=10)
        assert [r.raw for r in shipped] == lines[:2], "the last line is shipped, not held for an entry to come"
        container.start()
        assert container.wait() == 0
    finally:
        shipped = received(running, 4)
    assert container.log.read_bytes().count(b'"log":"{') == 4, "Docker wrote four entries"
    ledger.check(shipped).assert_delivered()
    assert len(shipped) == 4 and all(record.trace_id for record in running.sink.records())
    again = Running([str(container.log)], tmp_path / "state", once=True)
    again.thread.join(30)
    assert again.sink.records() == [], "a later --once run finds nothing new"


def test_at_200_kb_a_second_with_two_rotations_a_second_nothing_is_lost_and_order_is_kept(
    docker_engine: Engine, tmp_path: Path
):
    ledger = Ledger("fast")
    container, bridges, inodes = run_followed(docker_engine, printed(ledger, 6800, per_tick=80, tick=0.1), tmp_path)
    assert len(inodes) > 10, f"Docker rotated {len(inodes) - 1} times"
    assert_printed_as_the_ledger_writes(container)
    assert_delivered(outcomes(bridges, ledger))


def test_at_a_rotation_every_2_5_s_with_inodes_reused_nothing_is_lost_or_taken_for_a_truncation(
    docker_engine: Engine, tmp_path: Path
):
    ledger = Ledger("reuse")
    container, bridges, inodes = run_followed(docker_engine, printed(ledger, 1400, per_tick=14, tick=0.1), tmp_path)
    own = "" if os.path.ismount(docker_engine.data_root) else "not "
    assert len(set(inodes)) < len(inodes), f"no inode reused by Docker's new logs: {inodes}, on {own}an ext4 of its own"
    assert_printed_as_the_ledger_writes(container)
    assert_delivered(outcomes(bridges, ledger))


def test_a_40_kib_line_cut_by_a_rotation_arrives_whole(docker_engine: Engine, tmp_path: Path):
    """Docker rotates between entries: 92 KB of lines, then a 40 KiB line, whose first 16 KiB entry
    takes the log past 100 kB, so the rest of the line goes to the new file."""
    ledger = Ledger("cut")
    filler = 92_000 // len(orjson.dumps({"log": known_line("cut", 100, PAD).decode() + "\n", "t": "x" * 50}))
    script = "; ".join((printed(ledger, filler), printed(ledger, 1, pad=40 * 1024), printed(ledger, 5)))
    container, bridges, _ = run_followed(docker_engine, script, tmp_path)
    rotated = container.log.with_name(container.log.name + ".1").read_bytes().splitlines()
    assert not orjson.loads(rotated[-1])["log"].endswith("\n"), "the rotation fell between the line's entries"
    assert_delivered(outcomes(bridges, ledger))
    assert_printed_as_the_ledger_writes(container)
