"""``obsbox llm``: the recording rules that give every LLM serving stack obsbox's breakdown series."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from obsbox.llm import autoscaling
from obsbox.llm.rules import render
from obsbox.llm.spec import DEFAULT_SOURCES, SIGNALS, load
from obsbox.slo.rules import up_to_date, write


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
    rules.add_argument(
        "sources",
        type=Path,
        nargs="?",
        default=DEFAULT_SOURCES,
        metavar="SOURCES_YAML",
        help="the sources file (default: the shipped one)",
    )
    rules.add_argument("--out", type=Path, metavar="RULES_FILE", help="where to write (default: standard output)")
    rules.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    rules.set_defaults(func=_rules)
    scaling = commands.add_parser(
        "autoscaling",
        help="write the autoscaling rules file; with --check, fail when it is out of date",
        description="Write the recording rules the autoscalers read (decode and prefill pools, from the "
        "series `obsbox llm rules` records). With --check, write nothing and exit 1 when --out is stale.",
    )
    scaling.add_argument("--out", type=Path, metavar="RULES_FILE", help="where to write (default: standard output)")
    scaling.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    scaling.set_defaults(func=_autoscaling)


def _rules(args: argparse.Namespace) -> int:
    sources = load(args.sources)
    text = render(sources, args.sources.name)
    if not args.check:
        return _write(args.out, text)
    for source in sources:
        mapped = [name for name in SIGNALS if name in source.signals]
        print(f"{source.name}: {', '.join(mapped)}; missing: {', '.join(source.missing) or 'nothing'}")
    if args.out is not None and not up_to_date(args.out, text, f"obsbox llm rules {args.sources} --out {args.out}"):
        return 1
    return 0


def _autoscaling(args: argparse.Namespace) -> int:
    text = autoscaling.render()
    if not args.check:
        return _write(args.out, text)
    if args.out is not None and not up_to_date(args.out, text, f"obsbox llm autoscaling --out {args.out}"):
        return 1
    return 0


def _write(out: Path | None, text: str) -> int:
    if out is None:
        sys.stdout.write(text)
    else:
        write(out, text)
        print(f"wrote {out}", file=sys.stderr)
    return 0
