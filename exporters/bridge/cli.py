"""``obsbox bridge``: the command line, which is shorthand for a YAML pipeline."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import yaml

from obsbox.config import ConfigError, Document, parse_size
from obsbox.exporters.bridge import config as bridge_config
from obsbox.exporters.bridge import registry
from obsbox.exporters.bridge.runner import Bridge, default_state_dir
from obsbox.exporters.bridge.sources.positions import PositionsError
from obsbox.exporters.bridge.summary import already_read, summary

EPILOG = textwrap.dedent("""\
    sinks (--to, repeatable; default stdout):
      stdout                         enriched JSON lines on standard output
      file:PATH                      enriched JSON lines appended to PATH
      loki:URL                       Loki push API, streams as Loki's OTLP ingestion labels them:
                                     service_name and the indexed resource attributes (such as
                                     deployment.environment from OTEL_RESOURCE_ATTRIBUTES); the level,
                                     trace_id and span_id as structured metadata (detected_level)
      otlp:URL                       OTLP/HTTP protobuf logs (the receiver, e.g. http://localhost:4318)
      Options of a sink go in the URL's query: otlp:http://host:4318?compression=gzip,
      loki:http://host:3100?tenant_id=acme. Loki's push API takes no query of its own, so any other
      key there is refused; static labels go under labels: in a --config file. Auth comes from the
      environment: LOKI_USERNAME / LOKI_PASSWORD / LOKI_BEARER_TOKEN / LOKI_TENANT_ID,
      OTEL_EXPORTER_OTLP_HEADERS.

    examples:
      obsbox bridge '/var/log/gateway/*.json' --to loki:http://localhost:3100 --to file:enriched.jsonl
      obsbox bridge old.log --once --to otlp:http://localhost:4318      # backfill, then exit 0
      obsbox bridge old.log --once --no-positions --to file:again.jsonl # read it all again
      obsbox bridge --config bridge.yaml                                # the YAML pipeline
      obsbox bridge app.log --correlation-key request_id --print-config # the YAML this CLI means
      obsbox bridge '/var/log/pods/*/*/*.log' --to otlp:http://collector:4318  # a Kubernetes node

    Every line leaves with trace_id (32 hex) and span_id (16 hex): the line's own IDs in any legacy
    form (W3C, ECS, Serilog, .NET ActivityId/Request-Id, B3, Jaeger, X-Ray, Datadog, GCP), else
    derived from --correlation-key, else from the line's identity (file fingerprint + offset).
    Positions are saved per set of globs (not per sink): a second run over the same files reads only
    what was written since, whatever its --to. With --once, stderr then names the positions file and
    how to read from the start again (--no-positions, or delete that file); and every --once run ends
    with one line on stderr: lines read, each sink's lines delivered and dead-lettered, parse failures,
    and where the trace IDs came from (the counts of obsbox_bridge_trace_ids_total{source}).
    SIGTERM or Ctrl-C: stop reading, deliver what is in flight, save positions, exit 0.
    """)


# options that shape the pipeline a command line stands for; with --config the file does that
PIPELINE_OPTIONS = (
    "paths",
    "to",
    "positions",
    "no_positions",
    "correlation_key",
    "service_name",
    "trace_id_field",
    "span_id_field",
    "no_redact",
    "max_line_bytes",
    "start_at",
    "format",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bridge",
        help="tail JSON (or logfmt) log files, add W3C trace IDs, ship them",
        description="Tail legacy JSON or logfmt log files (rotation-safe, restart-safe), find or derive "
        "a W3C trace and span ID for every line, redact secrets, and ship to Loki, OTLP or files.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or globs to follow (quote globs)")
    p.add_argument("--config", type=Path, help="the YAML pipeline (sources, processors, sinks, pipelines)")
    p.add_argument("--to", action="append", default=[], metavar="SINK", help="where to ship (see below)")
    p.add_argument(
        "--once",
        action="store_true",
        help="read every file to its end (from its saved position), flush every sink, say on stderr what was read "
        "and shipped, exit (a progress bar on a terminal)",
    )
    p.add_argument(
        "--positions",
        type=Path,
        metavar="FILE",
        help="where acknowledged offsets are kept (default: a file in the state dir, one per set of globs)",
    )
    p.add_argument("--no-positions", action="store_true", help="start every file at the beginning and save no offsets")
    p.add_argument("--state-dir", type=Path, help="positions and dead letters (default: the per-user state dir)")
    p.add_argument(
        "--metrics-port", type=port, metavar="PORT", help="serve the bridge's own /metrics on this port (0: any free)"
    )
    p.add_argument("--metrics-host", type=text, help="address for --metrics-port (default 127.0.0.1)")
    p.add_argument(
        "--correlation-key",
        type=text,
        action="append",
        default=[],
        metavar="FIELD",
        help="derive the trace ID from this field when the line has no ID (repeatable; a.b for nested)",
    )
    p.add_argument("--service-name", type=text, help="service.name / service_name for lines that do not name one")
    p.add_argument("--trace-id-field", type=text, default="trace_id", help="output field for the trace ID")
    p.add_argument("--span-id-field", type=text, default="span_id", help="output field for the span ID")
    p.add_argument("--no-redact", action="store_true", help="ship secrets as they are (redaction is on by default)")
    p.add_argument(
        "--max-line-bytes",
        type=size,
        default=1024 * 1024,
        metavar="SIZE",
        help="longer lines are truncated and flagged (default 1MiB; 4096, 512KiB, 2MB...)",
    )
    p.add_argument(
        "--start-at",
        choices=["beginning", "end"],
        default="beginning",
        help="where to start files found at start-up that have no saved position",
    )
    p.add_argument(
        "--format",
        choices=["auto", "json", "cri", "docker", "logfmt"],
        default="auto",
        help="how files wrap lines: auto (per file, from its first line and path, logfmt lines too; default), "
        "json (as they are), cri (containerd, CRI-O), docker (json-file), logfmt (the app's lines are logfmt; "
        "a container's wrapping still detected)",
    )
    p.add_argument(
        "--workers",
        type=count,
        metavar="N",
        help="worker processes for parsing, trace IDs, redaction and encoding (default: one per available "
        "core; 0: none); lowered, with a warning, to what the available memory holds (about 64 MiB each)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar with --once")
    p.add_argument("--print-config", action="store_true", help="print the YAML pipeline this command means, and exit")
    p.set_defaults(func=run, pipeline_defaults={name: p.get_default(name) for name in PIPELINE_OPTIONS})
    say_errors_in_one_line(p)


def say_errors_in_one_line(parser: argparse.ArgumentParser) -> None:
    """A wrong option is one line naming it, not the whole usage (a dozen lines) above it."""

    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: error: {message} ({parser.prog} --help lists the options)\n")

    parser.error = error  # type: ignore[method-assign] # argparse has no other hook for it


def size(given: str) -> int:
    """``--max-line-bytes``: the sizes a YAML config takes ("4096", "512KiB", "1MB"), parsed by the same code."""
    try:
        return parse_size(given)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def text(value: str) -> str:
    """A name or an address: an empty one would be taken and quietly match nothing."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def count(given: str) -> int:
    """A whole number, 0 or more."""
    return _whole(given, 0, None, "a whole number of 0 or more")


def port(given: str) -> int:
    """A TCP port, 1 to 65535, or 0 for any free one."""
    return _whole(given, 0, 65535, "a port (1 to 65535, or 0 for any free one)")


def _whole(given: str, low: int, high: int | None, what: str) -> int:
    try:
        value = int(given)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"{given!r} is not {what}")
    return value


def sink_from_url(spec: str) -> tuple[str, dict[str, Any]]:
    """``loki:http://h:3100?tenant_id=x`` → ("loki", {"url": "http://h:3100", "tenant_id": "x"}).

    Works for any installed sink: ``TYPE:VALUE`` sets the config field the sink class names in
    ``url_option``; a sink without one is given as ``TYPE`` alone. Options of a sink whose value is
    an http(s) URL go in the URL's query."""
    kind, sep, rest = spec.partition(":")
    try:
        cls = registry.load("sinks", kind)
    except registry.UnknownComponentError:
        raise ConfigError(
            f"--to {spec!r}: expected stdout, file:PATH, loki:URL or otlp:URL, or TYPE[:VALUE] of an installed sink "
            f"(sink types installed: {', '.join(registry.available('sinks'))})"
        ) from None
    option = getattr(cls, "url_option", None)
    if option is None:
        if sep:
            raise ConfigError(f"--to {spec!r}: the {kind} sink takes no value; write --to {kind}")
        return kind, {}
    if not rest:
        raise ConfigError(f"--to {spec!r}: {option} is empty (write --to {kind}:{option.upper()})")
    options: dict[str, Any] = {}
    try:
        parts = urlsplit(rest)
    except ValueError:  # an unclosed [: the sink's own URL check below says so
        parts = None
    if parts is not None and parts.scheme in ("http", "https"):
        known = {f.name for f in dataclasses.fields(cls.Config)}
        kept = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key in known:
                options[key] = yaml.safe_load(value) if value else value
            else:
                kept.append(f"{key}={value}")
        rest = urlunsplit(parts._replace(query="&".join(kept)))
    options[option] = rest
    try:
        bridge_config.build_checked(cls.Config, options, Document(options, "--to"), ())
    except ConfigError as exc:  # the sink's own checks, said of the flag the user wrote
        raise ConfigError(f"--to {spec!r}: {exc.key + ': ' if exc.key else ''}{exc.message}") from None
    return kind, options


def default_positions(state_dir: Path, paths: list[str]) -> Path:
    """One positions file per set of globs, so separate invocations never share offsets."""
    key = "\0".join(sorted(os.path.abspath(os.path.expanduser(p)) for p in paths))
    return state_dir / "positions" / f"cli-{hashlib.sha1(key.encode()).hexdigest()[:12]}.json"


def cli_pipeline(args: argparse.Namespace) -> dict[str, Any]:
    """The YAML pipeline that a command line stands for."""
    if not args.paths:
        raise ConfigError("give files or globs to follow, or --config FILE")
    state_dir = args.state_dir or default_state_dir()
    tail: dict[str, Any] = {
        "include": args.paths,
        "max_line_bytes": args.max_line_bytes,
        "start_at": args.start_at,
    }
    if args.format != "auto":
        tail["format"] = args.format
    if args.no_positions:
        tail["save_positions"] = False
    else:
        tail["positions"] = str(args.positions or default_positions(state_dir, args.paths))
    trace: dict[str, Any] = {"trace_id_field": args.trace_id_field, "span_id_field": args.span_id_field}
    if args.correlation_key:
        trace["correlation_keys"] = args.correlation_key
    processors = {"parse": {}, "trace": trace}
    if not args.no_redact:
        processors["redact"] = {}
    sinks: dict[str, dict[str, Any]] = {}
    for spec in args.to or ["stdout"]:
        kind, options = sink_from_url(spec)
        if kind in ("loki", "otlp") and args.service_name:
            options.setdefault("service_name", args.service_name)
        key, n = kind, 2
        while key in sinks:
            key, n = f"{kind}/{n}", n + 1
        sinks[key] = options
    return {
        "sources": {"tail": tail},
        "processors": processors,
        "sinks": sinks,
        "pipelines": {"logs": {"sources": ["tail"], "processors": list(processors), "sinks": list(sinks)}},
        "settings": cli_settings(args),
    }


def cli_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``settings:`` a command line stands for."""
    settings: dict[str, Any] = {"progress": not args.no_progress}
    if args.metrics_host is not None:
        settings["metrics_host"] = args.metrics_host
    if args.once:
        settings["once"] = True
    if args.metrics_port is not None:
        settings["metrics_port"] = args.metrics_port
    if args.state_dir:
        settings["state_dir"] = str(args.state_dir)
    settings.update({"workers": args.workers} if args.workers is not None else {})
    return settings


def refuse_pipeline_options(args: argparse.Namespace) -> None:
    """With --config the file is the pipeline: an option that would shape it is an error, not ignored."""
    given = [name for name, default in args.pipeline_defaults.items() if getattr(args, name) not in (default, [])]
    if given:
        flags = ", ".join("files" if name == "paths" else "--" + name.replace("_", "-") for name in given)
        raise ConfigError(
            f"with --config, {flags} cannot be given: the config file defines the pipeline, so set them "
            "there (without --config, --print-config shows the YAML an option means)"
        )


def load_config(args: argparse.Namespace) -> bridge_config.BridgeConfig:
    if args.config is None:
        return bridge_config.from_data(cli_pipeline(args), source="<command line>")
    refuse_pipeline_options(args)
    config = bridge_config.load(args.config)
    if args.once:
        config.settings.once = True
    if args.metrics_port is not None:
        config.settings.metrics_port = args.metrics_port
    if args.metrics_host is not None:
        config.settings.metrics_host = args.metrics_host
    if args.state_dir:
        config.settings.state_dir = args.state_dir
    if args.no_progress:
        config.settings.progress = False
    if args.workers is not None:
        config.settings.workers = args.workers
    return config


def run(args: argparse.Namespace) -> int:
    if args.print_config:
        if args.config:
            refuse_pipeline_options(args)
            bridge_config.load(args.config)  # what cannot be loaded is not printed as if it could
            sys.stdout.write(args.config.read_text())
        else:
            yaml.safe_dump(cli_pipeline(args), sys.stdout, sort_keys=False)
        return 0
    config = load_config(args)
    try:
        bridge = Bridge(config)
    except PositionsError as exc:
        print(f"obsbox bridge: {exc}", file=sys.stderr)
        return 2
    bridge.install_signal_handlers()
    bridge.serve_metrics()
    delivered = bridge.run()
    if config.settings.once:
        for line in [*already_read(bridge, command_line=args.config is None), summary(bridge)]:
            print(line, file=sys.stderr)
    if not delivered and not bridge.stop.is_set():
        return 1
    return 0
