"""``obsbox bridge --once`` says what happened to the lines: one summary line on stderr, and, when
files were started at saved positions, which positions file and how to read them again. Run as a
user runs it: a real subprocess, a real OTLP receiver (``obsbox.local.receiver``) that refuses."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson

from obsbox.local.receiver import Receiver
from tests.waiting import wait_until

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
LINES = "".join(
    line + "\n"
    for line in (
        '{"level":"info","msg":"a"}',
        '{"level":"info","msg":"b","traceparent":"00-' + TRACE_ID + '-b7ad6b7169203331-01"}',
        '{"level":"info","msg":"c"}',
        '{"level":"info","msg": broken',  # not JSON: passed through, counted as a parse failure
    )
).encode()


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "obsbox", "bridge", *args, "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def said(result: subprocess.CompletedProcess) -> list[str]:
    """What the CLI itself said on stderr (log records start with a time)."""
    return [line for line in result.stderr.splitlines() if line.startswith("obsbox bridge: ")]


def test_a_second_run_over_read_files_names_the_positions_file_and_how_to_read_again(tmp_path):
    log, out, state = tmp_path / "a.json", tmp_path / "out.jsonl", tmp_path / "state"
    log.write_bytes(LINES)
    first = run(str(log), "--state-dir", str(state))
    assert first.returncode == 0 and first.stdout.count("\n") == 4, first.stderr
    assert not any("already read" in line for line in said(first)), "nothing was read before"
    (positions,) = (state / "positions").glob("cli-*.json")

    second = run(str(log), "--state-dir", str(state), "--to", f"file:{out}")
    assert second.returncode == 0, second.stderr  # nothing failed: the files had nothing new
    assert not out.exists() or out.read_bytes() == b"", "positions are per set of globs, not per sink"
    notice, summary = said(second)
    assert f"1 file was already read up to the positions saved in {positions}" in notice
    assert "--no-positions, or delete that file" in notice
    assert summary == (
        "obsbox bridge: 0 lines read; file: 0 delivered, 0 dead-lettered; 0 parse failures; trace IDs: none"
    )

    follow = subprocess.Popen(
        [sys.executable, "-m", "obsbox", "bridge", str(log), "--state-dir", str(state), "--to", f"file:{out}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with open(log, "ab") as fh:
            fh.write(b'{"level":"info","msg":"d"}\n')
        wait_until(lambda: out.exists() and out.read_bytes().count(b"\n") == 1, 20, "the line written since")
        follow.send_signal(signal.SIGTERM)
        _, stderr = follow.communicate(timeout=30)
    finally:
        follow.kill()
    assert follow.returncode == 0 and "obsbox bridge: " not in stderr, "following says neither: it never ends a run"


def test_no_positions_reads_everything_again_and_says_nothing_of_positions(tmp_path):
    log, out, state = tmp_path / "a.json", tmp_path / "out.jsonl", tmp_path / "state"
    log.write_bytes(LINES)
    assert run(str(log), "--state-dir", str(state), "--to", f"file:{tmp_path / 'first.jsonl'}").returncode == 0
    again = run(str(log), "--state-dir", str(state), "--to", f"file:{out}", "--no-positions")
    assert again.returncode == 0 and out.read_bytes().count(b"\n") == 4, again.stderr
    (summary,) = said(again)
    assert summary.startswith("obsbox bridge: 4 lines read; file: 4 delivered, 0 dead-lettered;"), summary


def test_the_summary_counts_lines_read_parse_failures_and_where_trace_ids_came_from(tmp_path):
    log, out = tmp_path / "a.json", tmp_path / "out.jsonl"
    log.write_bytes(LINES)
    result = run(str(log), "--no-positions", "--to", f"file:{out}")
    assert result.returncode == 0, result.stderr
    *parsed, unparsed = out.read_bytes().splitlines()
    assert [orjson.loads(line)["trace_id"] == TRACE_ID for line in parsed] == [False, True, False]
    assert unparsed == LINES.splitlines()[-1], "a line that is not JSON passes as it is"
    assert said(result) == [
        "obsbox bridge: 4 lines read; file: 4 delivered, 0 dead-lettered; 1 parse failure (invalid_json 1); "
        "trace IDs: derived_line 3, w3c 1"
    ]


def test_lines_a_sink_refuses_are_counted_dead_lettered_beside_those_another_sink_delivered(tmp_path):
    log, out = tmp_path / "a.json", tmp_path / "out.jsonl"
    log.write_bytes(LINES)
    rx = Receiver().start()
    rx.refuse(400)  # OTLP/HTTP: a 400 is not retried; the request goes to the dead-letter file
    try:
        result = run(
            str(log),
            "--no-positions",
            "--state-dir",
            str(tmp_path / "state"),
            "--to",
            f"otlp:{rx.url}",
            "--to",
            f"file:{out}",
        )
    finally:
        rx.stop()
    assert result.returncode == 0, result.stderr
    (summary,) = said(result)
    assert "; otlp: 0 delivered, 4 dead-lettered; file: 4 delivered, 0 dead-lettered; " in summary, summary
    dead = (tmp_path / "state" / "dead-letter-otlp.jsonl").read_bytes().splitlines()
    assert len(dead) == 4, "the summary counts what is in the dead-letter file"


def test_a_config_pipeline_run_once_says_the_same_with_its_own_way_to_read_again(tmp_path):
    (tmp_path / "a.json").write_bytes(LINES)
    (tmp_path / "bridge.yaml").write_text(
        "sources:\n  tail/app:\n    include: [a.json]\n"
        "processors:\n  parse: {}\n  trace: {}\n"
        "sinks:\n  file/out:\n    path: out.jsonl\n"
        "pipelines:\n  main:\n    sources: [tail/app]\n    processors: [parse, trace]\n    sinks: [file/out]\n"
        "settings:\n  state_dir: state\n"
    )
    assert run("--config", "bridge.yaml", cwd=tmp_path).returncode == 0
    second = run("--config", "bridge.yaml", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    notice, summary = said(second)
    assert "1 file was already read up to the positions saved in state/positions-main-tail" in notice, notice
    assert "save_positions: false under sources.tail/app, or delete that file" in notice
    assert summary.startswith("obsbox bridge: 0 lines read; file/out: 0 delivered, 0 dead-lettered;"), summary


def test_the_summary_counts_the_lines_grouped_into_stack_traces(tmp_path):
    """A record with a traceback is one line read; the summary says how many lines went into them,
    so a file's line count and the records shipped add up."""
    log = tmp_path / "a.log"
    trace = (Path(__file__).parent / "corpus" / "multiline" / "python.log").read_bytes()
    log.write_bytes(trace + b'{"level":"info","msg":"after"}\n')
    result = run(str(log), "--no-positions", "--to", f"file:{tmp_path / 'out.jsonl'}")
    grouped = trace.count(b"\n") - 1  # every line of python.log but its first
    assert result.returncode == 0, result.stderr
    expected = f"obsbox bridge: 2 lines read ({grouped} more grouped into them as stack traces);"
    assert said(result)[-1].startswith(expected)
