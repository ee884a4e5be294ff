// Parse queries with the grammars Grafana's query editors and Prometheus' UI use (Lezer parsers).
//
// Input on stdin: a JSON list of {"lang": "promql" | "logql" | "traceql", "expr": "..."}.
// Output on stdout: a JSON list, one entry per input, of the error nodes the parser left in the tree:
// [{"from": offset, "to": offset, "context": "name of the enclosing node"}]. An empty list means the
// expression parsed cleanly. Lezer recovers from errors instead of throwing, so the error nodes are
// the only sign of a bad query; one process parses every query, which keeps the tests fast.
import { readFileSync } from "node:fs";
import { parser as promql } from "@prometheus-io/lezer-promql";
import { parser as logql } from "@grafana/lezer-logql";
import { parser as traceql } from "@grafana/lezer-traceql";

const PARSERS = { promql, logql, traceql };

function errors(lang, expr) {
  const parser = PARSERS[lang];
  if (!parser) throw new Error(`unknown query language ${JSON.stringify(lang)}`);
  const found = [];
  parser.parse(expr).iterate({
    enter(node) {
      if (node.type.isError) {
        found.push({ from: node.from, to: node.to, context: node.node.parent?.name ?? "" });
      }
    },
  });
  return found;
}

const queries = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(queries.map((q) => errors(q.lang, q.expr))));
