"""``obsbox llm``: the recording rules that give every LLM serving stack obsbox's breakdown series."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from obsbox.llm import autoscaling
from obsbox.llm.rules import render
from obsbox.llm.slo import template
from obsbox.llm.spec import DEFAULT_SOURCES, SIGNALS, load
from obsbox.slo.rules import emit, up_to_date


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "llm",
        help="LLM serving metrics: recording rules mapping vLLM, SGLang, TGI, LiteLLM, GenAI and DCGM to one breakdown",
        description="Turn the LLM sources file (which metrics of each serving stack give TTFT, queue, prefill, "
        "decode, inter-token and end-to-end latency, gateway overhead, cache hits, tokens, requests and "
        "KV-cache and GPU usage) into Prometheus recording rules: one set of obsbox:llm_* series labelled "
        "source and model.",
    )
    commands = p.add_subparsers(dest="llm_command", metavar="SUBCOMMAND", required=True)
    rules = commands.add_parser(
        "rules",
        help="write the rules file; with --check, fail when it is out of date",
        description="Write the recording rules. With --check, write nothing: print what each source maps and "
        "lacks, and exit 1 when --out is not what this command would write.",
    )
    _file_options(rules, "RULES_FILE")
    rules.set_defaults(func=_rules)

    slo = commands.add_parser(
        "slo",
        help="print ready SLOs (TTFT, inter-token, end-to-end latency, errors) for the sources, as a spec",
        description="Write an SLO spec for `obsbox slo build`: a TTFT, inter-token latency, end-to-end latency "
        "and error SLO for each source that has the signal, with chat-serving thresholds and each source's "
        "bucket layout. With --check, exit 1 when --out is not what this command would write.",
    )
    _file_options(slo, "SLO_YAML")
    slo.add_argument(
        "--source", action="append", default=[], metavar="NAME", help="only this source (repeatable; default: all)"
    )
    slo.set_defaults(func=_slo)

    scaling = commands.add_parser(
        "autoscaling",
        help="write the autoscaling rules file; with --check, fail when it is out of date",
        description="Write the recording rules the autoscalers read (decode and prefill pools, from the "
        "series `obsbox llm rules` records). With --check, write nothing and exit 1 when --out is stale.",
    )
    _out_options(scaling, "RULES_FILE")
    scaling.set_defaults(func=_autoscaling)


def _file_options(p: argparse.ArgumentParser, out: str) -> None:
    """What ``rules`` and ``slo`` share: the sources file read, the file written, and --check."""
    p.add_argument(
        "sources",
        type=Path,
        nargs="?",
        default=DEFAULT_SOURCES,
        metavar="SOURCES_YAML",
        help="the sources file (default: the shipped one)",
    )
    _out_options(p, out)


def _out_options(p: argparse.ArgumentParser, out: str) -> None:
    p.add_argument("--out", type=Path, metavar=out, help="where to write (default: standard output)")
    p.add_argument("--check", action="store_true", help="compare with --out instead of writing it")


def _slo(args: argparse.Namespace) -> int:
    sources = load(args.sources)
    unknown = sorted(set(args.source) - {s.name for s in sources})
    if unknown:
        known = ", ".join(s.name for s in sources)
        print(f"obsbox llm slo: no source {', '.join(unknown)} in {args.sources} (known: {known})", file=sys.stderr)
        return 2
    chosen = [s for s in sources if not args.source or s.name in args.source]
    text = template(chosen, args.sources.name)
    if args.check:
        return 0 if args.out is not None and up_to_date(args.out, text, f"obsbox llm slo --out {args.out}") else 1
    return emit(args.out, text)


def _rules(args: argparse.Namespace) -> int:
    sources = load(args.sources)
    text = render(sources, args.sources.name)
    if not args.check:
        return emit(args.out, text)
    for source in sources:
        mapped = [name for name in SIGNALS if name in source.signals]
        print(f"{source.name}: {', '.join(mapped)}; missing: {', '.join(source.missing) or 'nothing'}")
    if args.out is not None and not up_to_date(args.out, text, f"obsbox llm rules {args.sources} --out {args.out}"):
        return 1
    return 0


def _autoscaling(args: argparse.Namespace) -> int:
    text = autoscaling.render()
    if not args.check:
        return emit(args.out, text)
    if args.out is not None and not up_to_date(args.out, text, f"obsbox llm autoscaling --out {args.out}"):
        return 1
    return 0
