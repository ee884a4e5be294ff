"""Bad configuration as a new user writes it, on the command line and in YAML: the real CLI in a
subprocess says one line naming the key (and the file's line), exits 2, shows no traceback, and
ships nothing."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from obsbox.cli import main
from obsbox.exporters.bridge import config as bridge_config
from obsbox.exporters.bridge import workers
from tests.bridge.harness import Running
from tests.faults.ledger import Ledger, lines_of
from tests.waiting import free_port


def obsbox_bridge(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "obsbox", "bridge", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def refused(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The one line of a config error, which names every needle."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture
def app_log(tmp_path: Path) -> Path:
    log = tmp_path / "app.log"
    Ledger("config").append(log, 3)
    return log


CLI_CASES = {
    "loki URL with a space": (["--to", "loki:not a url"], ["--to 'loki:not a url'", "url:", "http://localhost:3100"]),
    "ftp scheme": (["--to", "otlp:ftp://x"], ["--to 'otlp:ftp://x'", "endpoint:", "not an http(s) URL"]),
    "no scheme": (["--to", "otlp:notaurl"], ["endpoint:", "http://localhost:4318"]),
    "port not a number": (["--to", "otlp:http://collector:43l8"], ["endpoint:", "port must be a number"]),
    "port out of range": (["--to", "loki:http://loki:99999"], ["url:", "port must be a number from 1 to 65535"]),
    "unclosed IPv6": (["--to", "otlp:http://[::1"], ["--to 'otlp:http://[::1'", "Invalid IPv6 URL"]),
    "negative option in the URL": (
        ["--to", "otlp:http://h:4318?max_request_bytes=-1"],
        ["--to 'otlp:http://h:4318?max_request_bytes=-1': max_request_bytes: must not be negative"],
    ),
    "metrics port out of range": (["--metrics-port", "70000"], ["--metrics-port", "'70000' is not a port"]),
    "metrics port negative": (["--metrics-port", "-1"], ["--metrics-port", "'-1' is not a port"]),
    "workers negative": (["--workers", "-1"], ["--workers", "0 or more"]),
    "workers not a number": (["--workers", "many"], ["--workers", "'many'"]),
    "line size with a fraction": (["--max-line-bytes", "1.5MiB"], ["--max-line-bytes", "'1.5MiB' is not a size"]),
    "format not known": (["--format", "xml"], ["--format", "'xml'"]),
    "empty correlation key": (["--correlation-key", ""], ["--correlation-key", "must not be empty"]),
    "empty service name": (["--service-name", " "], ["--service-name", "must not be empty"]),
    "empty metrics host": (["--metrics-host", "", "--metrics-port", "0"], ["--metrics-host", "must not be empty"]),
    "sink timeout of 0": (["--to", "otlp:http://h:4318?timeout=0"], ["--to", "timeout: must be more than 0"]),
    # Promtail's habit: Loki's push API ignores a query, so a label there would silently do nothing
    "loki URL with a label as its query": (
        ["--to", "loki:http://h:3100?tenant_id=a&job=gateway"],
        ["--to 'loki:http://h:3100?tenant_id=a&job=gateway': url:", "'job=gateway'", "labels:"],
    ),
}


@pytest.mark.parametrize("args, needles", CLI_CASES.values(), ids=CLI_CASES.keys())
def test_a_wrong_command_line_value_is_one_line_naming_the_option(tmp_path, app_log, args, needles):
    out = tmp_path / "out.jsonl"
    result = obsbox_bridge(tmp_path, str(app_log), "--once", "--to", f"file:{out}", *args)
    refused(result, *needles)
    assert not out.exists(), "nothing is shipped"


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_metrics_port_in_use_is_one_line_naming_the_address_and_nothing_is_shipped(tmp_path, app_log, taken_port):
    out = tmp_path / "out.jsonl"
    args = (str(app_log), "--once", "--to", f"file:{out}", "--no-positions", "--metrics-port", str(taken_port))
    line = refused(obsbox_bridge(tmp_path, *args), f"127.0.0.1:{taken_port}", "Address already in use")
    assert "--metrics-port" in line and "settings.metrics_port" in line  # the fix, in either form
    assert lines_of(out) == [], "checked before anything is shipped"


@pytest.mark.parametrize(
    "host, cause",
    [("no-such-host.invalid", "Name or service not known"), ("192.0.2.1", "Cannot assign requested address")],
    ids=["a name that does not resolve", "an address of another host"],
)
def test_a_metrics_host_that_cannot_be_bound_is_one_line_naming_it(tmp_path, app_log, host, cause):
    args = (str(app_log), "--once", "--no-positions", "--metrics-port", str(free_port()), "--metrics-host", host)
    refused(obsbox_bridge(tmp_path, *args), f"{host}:", cause)


def test_a_config_file_that_cannot_be_read_is_one_line_naming_it(tmp_path):
    refused(obsbox_bridge(tmp_path, "--config", "missing.yaml"), "missing.yaml", "No such file or directory")
    refused(obsbox_bridge(tmp_path, "--config", "missing.yaml", "--print-config"), "missing.yaml", "No such file")
    refused(obsbox_bridge(tmp_path, "--config", str(tmp_path)), str(tmp_path), "Is a directory")


def pipeline(log: Path, out: Path) -> dict:
    """A good pipeline a case then breaks."""
    return {
        "sources": {"tail": {"include": [str(log)], "positions": str(log.with_suffix(".positions"))}},
        "processors": {"parse": {}},
        "sinks": {"file": {"path": str(out)}},
        "pipelines": {"logs": {"sources": ["tail"], "processors": ["parse"], "sinks": ["file"]}},
    }


def with_otlp(data: dict, **options) -> None:
    data["sinks"] = {"otlp": {"endpoint": "http://127.0.0.1:4318", **options}}
    data["pipelines"]["logs"]["sinks"] = ["otlp"]


def with_loki(data: dict, url: str) -> None:
    data["sinks"] = {"loki": {"url": url}}
    data["pipelines"]["logs"]["sinks"] = ["loki"]


YAML_CASES = {
    "endpoint not a URL": (lambda d: with_otlp(d, endpoint="not a url"), "sinks.otlp.endpoint", "http://HOST:PORT"),
    "endpoint ftp": (lambda d: with_otlp(d, endpoint="ftp://x"), "sinks.otlp.endpoint", "not an http(s) URL"),
    "endpoint otlp:": (lambda d: with_otlp(d, endpoint="otlp:notaurl"), "sinks.otlp.endpoint", "not an http(s) URL"),
    "port not a number": (lambda d: with_loki(d, "http://loki:abc"), "sinks.loki.url", "port must be a number"),
    "unclosed IPv6": (lambda d: with_loki(d, "http://[::1"), "sinks.loki.url", "Invalid IPv6 URL"),
    "loki URL with a query": (lambda d: with_loki(d, "http://loki:3100?job=x"), "sinks.loki.url", "'job=x'"),
    "negative sink timeout": (lambda d: with_otlp(d, timeout=-1), "sinks.otlp.timeout", "must be more than 0"),
    "negative scan interval": (
        lambda d: d["sources"]["tail"].update(scan_interval=-1),
        "sources.tail.scan_interval",
        "must not be negative",
    ),
    "sink timeout of 0": (lambda d: with_otlp(d, timeout=0), "sinks.otlp.timeout", "must be more than 0"),
    "read chunk of 0": (
        lambda d: d["sources"]["tail"].update(read_chunk_bytes=0),
        "sources.tail",
        "read_chunk_bytes must be at least 1",
    ),
    "no open files": (
        lambda d: d["sources"]["tail"].update(max_open_files=0),
        "sources.tail",
        "max_open_files must be at least 1",
    ),
    "negative fingerprint size": (
        lambda d: d["sources"]["tail"].update(fingerprint_bytes=-1),
        "sources.tail.fingerprint_bytes",
        "must not be negative",
    ),
    "negative batch timeout": (
        lambda d: d["pipelines"]["logs"].update(batch={"timeout": -0.5}),
        "pipelines.logs.batch.timeout",
        "must not be negative",
    ),
    "negative shutdown timeout": (
        lambda d: d.update(settings={"shutdown_timeout": -5}),
        "settings.shutdown_timeout",
        "must not be negative",
    ),
    "poll interval of 0": (lambda d: d.update(settings={"poll_interval": 0}), "settings.poll_interval", "more than 0"),
    "metrics port out of range": (
        lambda d: d.update(settings={"metrics_port": 99999}),
        "settings.metrics_port",
        "99999 is not a port",
    ),
    "workers negative": (lambda d: d.update(settings={"workers": -1}), "settings.workers", "0 (no worker processes)"),
}


@pytest.mark.parametrize("breaks, key, needle", YAML_CASES.values(), ids=YAML_CASES.keys())
def test_a_wrong_yaml_value_is_one_line_naming_the_file_line_and_key(tmp_path, app_log, breaks, key, needle):
    out = tmp_path / "out.jsonl"
    data = pipeline(app_log, out)
    breaks(data)
    config = tmp_path / "bridge.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    line = refused(obsbox_bridge(tmp_path, "--config", str(config), "--once"), f"{key}: ", needle)
    assert f"{config}:" in line.split(f"{key}:")[0], "the file and its line come first"
    assert not out.exists(), "nothing is shipped"


@pytest.mark.parametrize(
    "args, named",
    [
        (["--max-line-bytes", "1KiB"], "--max-line-bytes"),
        (["--no-redact", "--correlation-key", "request_id"], "--correlation-key, --no-redact"),
        (["--to", "stdout"], "--to"),
        (["--print-config", "--start-at", "end"], "--start-at"),
    ],
    ids=["a size", "redaction and IDs", "a sink", "printing the config"],
)
def test_an_option_that_shapes_the_pipeline_beside_config_is_refused_not_ignored(tmp_path, app_log, args, named):
    out = tmp_path / "out.jsonl"
    config = tmp_path / "bridge.yaml"
    config.write_text(yaml.safe_dump(pipeline(app_log, out)))
    refused(obsbox_bridge(tmp_path, "--config", str(config), "--once", *args), f"with --config, {named} cannot be")
    assert not out.exists(), "nothing is shipped"
    # the settings of a run still go with --config
    run = obsbox_bridge(tmp_path, "--config", str(config), "--once", "--metrics-host", "127.0.0.1", "--workers", "0")
    assert run.returncode == 0, run.stderr


def test_a_pipeline_without_a_processors_list_names_the_defaults_it_runs(tmp_path, app_log):
    out = tmp_path / "out.jsonl"
    data = pipeline(app_log, out)
    del data["processors"]
    del data["pipelines"]["logs"]["processors"]
    config = tmp_path / "bridge.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    line = refused(obsbox_bridge(tmp_path, "--config", str(config), "--once"), "pipelines.logs: ")
    assert "[parse, trace, redact]" in line and "processors: []" in line, line
    assert "processors[0]" not in line, "not a list the user never wrote"
    # the fix the line gives works: processors: [] runs none and ships every line
    data["pipelines"]["logs"]["processors"] = []
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    assert obsbox_bridge(tmp_path, "--config", str(config), "--once").returncode == 0
    Ledger("config").check(lines_of(out)).assert_delivered()


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess:
    """``obsbox bridge ARGS`` through the CLI's own ``main`` in this process, said as a subprocess's
    result; for runs that stop before a bridge starts (printing the config, refusing it)."""
    try:
        code = main(["bridge", *args])
    except SystemExit as exc:  # argparse's exit on a bad option
        code = exc.code
    said = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, said.out, said.err)


def test_sizes_are_the_same_on_the_command_line_and_in_yaml(tmp_path, app_log, capsys):
    """In process: the same parsing, without a start-up per size (the cases above run the CLI itself)."""
    config = tmp_path / "bridge.yaml"
    for size, expected in (("1KiB", 1024), ("2MB", 2_000_000), ("4096", 4096)):
        result = in_process(capsys, str(app_log), "--max-line-bytes", size, "--print-config")
        assert result.returncode == 0, result.stderr
        printed = yaml.safe_load(result.stdout)["sources"]["tail"]["max_line_bytes"]
        data = pipeline(app_log, tmp_path / "out.jsonl")
        data["sources"]["tail"]["max_line_bytes"] = size
        config.write_text(yaml.safe_dump(data))
        from_yaml = in_process(capsys, "--config", str(config), "--print-config")  # loads it, as a run does
        assert from_yaml.returncode == 0, from_yaml.stderr
        loaded = bridge_config.load(config).components["sources"]["tail"].config.max_line_bytes
        assert printed == loaded == expected
    for bad in ("1.5MiB", "-1KiB", "1 TiB", "lots"):
        refused(in_process(capsys, str(app_log), "--max-line-bytes", bad), "--max-line-bytes")
        data = pipeline(app_log, tmp_path / "out.jsonl")
        data["sources"]["tail"]["max_line_bytes"] = bad
        config.write_text(yaml.safe_dump(data))
        refused(in_process(capsys, "--config", str(config)), "sources.tail.max_line_bytes: ")


# ---------------------------------------------------------------- --workers beyond what memory holds

# /proc/meminfo and the cgroup files as Linux writes them (this host's, with a smaller MemAvailable)
MEMINFO = "MemTotal:       24731184 kB\nMemFree:        15006380 kB\nMemAvailable:     {kib} kB\nBuffers: 414908 kB\n"
V1_UNLIMITED = "9223372036854771712\n"


def host(root: Path, mem_available_kib: int, cgroup: str, files: dict[str, str]) -> Path:
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/meminfo").write_text(MEMINFO.format(kib=mem_available_kib))
    (root / "proc/self/cgroup").write_text(cgroup)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_available_memory_is_meminfo_capped_by_the_cgroup_limit(tmp_path):
    gib = 1024**3
    v1 = "4:memory:/process_api/449d\n3:cpuset:/\n0::/\n"
    unlimited = host(
        tmp_path / "v1-unlimited",
        23_567_504,
        v1,
        {
            "sys/fs/cgroup/memory/process_api/449d/memory.limit_in_bytes": V1_UNLIMITED,
            "sys/fs/cgroup/memory/process_api/449d/memory.usage_in_bytes": "645398528\n",
        },
    )
    assert workers.available_memory(unlimited) == 23_567_504 * 1024
    limited = host(
        tmp_path / "v1-limited",
        23_567_504,
        v1,
        {
            "sys/fs/cgroup/memory/process_api/449d/memory.limit_in_bytes": f"{2 * gib}\n",
            "sys/fs/cgroup/memory/process_api/449d/memory.usage_in_bytes": f"{gib // 2}\n",
        },
    )
    assert workers.available_memory(limited) == gib + gib // 2
    container = host(
        tmp_path / "v2",
        23_567_504,
        "0::/\n",
        {"sys/fs/cgroup/memory.max": "536870912\n", "sys/fs/cgroup/memory.current": "104857600\n"},
    )
    assert workers.available_memory(container) == 536870912 - 104857600
    no_limit = host(
        tmp_path / "v2-max",
        1000,
        "0::/\n",
        {"sys/fs/cgroup/memory.max": "max\n", "sys/fs/cgroup/memory.current": "5\n"},
    )
    assert workers.available_memory(no_limit) == 1000 * 1024
    assert workers.available_memory(tmp_path / "nothing") is None


def test_workers_beyond_what_memory_holds_are_lowered_with_one_line(caplog):
    slot = 8 * 1024**2  # twice the default batch of 4 MiB
    budget = workers.MemoryBudget(1024**3)
    with caplog.at_level(logging.WARNING, logger=workers.__name__):
        assert budget.workers(1000, slot, "logs") == 16  # 1 GiB / (48 MiB + 2 x 8 MiB)
        assert budget.workers(2, slot, "audit") == 0  # what is left is less than one worker
    first, second = (record.getMessage() for record in caplog.records)
    assert first.startswith("pipeline logs: 16 workers instead of 1000: each takes about 64 MiB"), first
    assert "1024 MiB are available" in first
    assert "pipeline audit: 0 workers instead of 2" in second and "runs without workers" in second
    assert workers.MemoryBudget(None).workers(1000, slot, "logs") == 1000  # memory unknown: no cap


def test_a_bridge_asked_for_1000_workers_starts_with_what_memory_holds_and_delivers_everything(
    tmp_path, monkeypatch, caplog
):
    per_worker = workers.worker_bytes(2 * 4 * 1024**2)
    monkeypatch.setattr(workers, "available_memory", lambda: 2 * per_worker + per_worker // 2)  # a small host
    log = tmp_path / "app.log"
    ledger = Ledger("workers")
    ledger.append(log, 2000)
    with caplog.at_level(logging.WARNING, logger=workers.__name__):
        running = Running([str(log)], tmp_path, once=True, workers=1000)
    try:
        assert running.bridge.pipelines[0].pool is not None and running.bridge.pipelines[0].pool.count == 2
        assert "2 workers instead of 1000" in caplog.text
        running.thread.join(60)
        assert not running.thread.is_alive(), "--once with 2 of the 1000 workers finished"
        ledger.check(rec.raw for rec in running.sink.records()).assert_delivered()
    finally:
        running.stop()


def test_the_cli_asked_for_1000_workers_lowers_them_to_what_this_hosts_memory_holds(tmp_path, app_log):
    """The real /proc/meminfo and cgroup files: with 1 GiB batches a worker takes about 4 GiB (two
    slots of 2 GiB), so any host this runs on holds far fewer than 1000."""
    out = tmp_path / "out.jsonl"
    data = pipeline(app_log, out)
    data["pipelines"]["logs"]["batch"] = {"max_bytes": "1GiB"}
    data["settings"] = {"workers": 1000}
    config = tmp_path / "bridge.yaml"
    config.write_text(yaml.safe_dump(data))
    result = obsbox_bridge(tmp_path, "--config", str(config), "--once")
    assert result.returncode == 0, result.stderr
    (warning,) = [line for line in result.stderr.splitlines() if "instead of 1000" in line]
    assert "each takes about 4144 MiB" in warning and "MiB are available" in warning, warning
    Ledger("config").check(lines_of(out)).assert_delivered()
