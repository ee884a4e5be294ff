"""Names shared across obsbox: metrics, stages, datasource UIDs, ports and SLO rule names.

The exporters emit these, the collector and compose configs route them, the SLO generator and the
dashboards query them. Keeping them in one module means a rename breaks a test, not a dashboard.
"""

from __future__ import annotations

# ---------------------------------------------------------------- gateway metrics (obsbox.exporters)

REQUEST_DURATION = "gateway_request_duration_seconds"  # {route, model, status_code, worker_pool}
REQUEST_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0)  # exactly these (the contract)
REPLY_LATENCY = "gateway_reply_latency_seconds"  # {route, model}: time to first byte; the SLI
REPLY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0)  # 0.3 is the SLO threshold
STAGE_DURATION = "gateway_stage_duration_seconds"  # {stage}
STAGES = (
    "network",
    "tls",
    "jwt_verify",
    "pre_cache_validation",
    "context_serialization",
    "retrieval",
    "scheduler_wait",
    "prefill",
    "decode",
)
CACHE_REQUESTS = "gateway_cache_requests_total"  # {cache, result="hit"|"miss"}
CACHES = ("prompt_lru", "intent_fingerprint", "kv")
PREFILL_TOKENS = "gateway_prefill_tokens_total"  # {model}
DECODE_TOKENS = "gateway_decode_tokens_total"  # {model}
DECODE_TOKENS_PER_SECOND = "gateway_decode_tokens_per_second"  # histogram {model}
DECODE_WARMUP = "gateway_decode_warmup_seconds"  # histogram: latency of the first tokens
EMBEDDING_BATCH_STALLS = "gateway_embedding_batch_stalls_total"  # counter
REQUESTS_IN_FLIGHT = "gateway_requests_in_flight"  # gauge {worker_pool}
GPU_MEMORY_UTILIZATION = "gateway_gpu_memory_utilization_ratio"  # gauge 0..1 {gpu}
# spans instrument() ended but could not deliver, {reason}: queue_full | export_failed | encode_failed | shutdown
INSTRUMENTATION_SPANS_DROPPED = "obsbox_instrumentation_spans_dropped_total"

# ---------------------------------------------------------------- the bridge's own metrics
# sample names (counters end in _total); their labels in the comments
BRIDGE_LINES_READ = "obsbox_bridge_lines_read_total"  # {pipeline}
BRIDGE_READ_BYTES = "obsbox_bridge_read_bytes_total"  # {pipeline}
BRIDGE_LINES_SHIPPED = "obsbox_bridge_lines_shipped_total"  # {sink, outcome}: delivered | dead_lettered
BRIDGE_PARSE_ERRORS = "obsbox_bridge_parse_errors_total"  # {reason}
BRIDGE_LINES_TRUNCATED = "obsbox_bridge_lines_truncated_total"
BRIDGE_MULTILINE_LINES = "obsbox_bridge_multiline_lines_total"
BRIDGE_REDACTIONS = "obsbox_bridge_redactions_total"  # {rule}
BRIDGE_TRACE_IDS = "obsbox_bridge_trace_ids_total"  # {source}: the form it came in (w3c, xray_value, ...) or derived_*
BRIDGE_RETRIES = "obsbox_bridge_retries_total"  # {sink, reason}
BRIDGE_DEAD_LETTERS = "obsbox_bridge_dead_letter_records_total"  # {sink}
BRIDGE_BATCH_DURATION = "obsbox_bridge_batch_duration_seconds"  # histogram {pipeline}
BRIDGE_FILES = "obsbox_bridge_files_tracked"  # gauge
BRIDGE_ROTATIONS = "obsbox_bridge_rotations_total"  # {kind}
BRIDGE_UNREADABLE_BYTES = "obsbox_bridge_unreadable_bytes_total"
BRIDGE_ERRORS = "obsbox_bridge_errors_total"  # {kind}
BRIDGE_RESUMES = "obsbox_bridge_resumes_total"  # {outcome}: how a saved position was judged on restart
BRIDGE_LAG = "obsbox_bridge_lag_bytes"  # gauge {path}
BRIDGE_OLDEST_UNACKED_AGE = (
    "obsbox_bridge_oldest_unacked_age_seconds"  # gauge {path}: since its oldest unacked byte was seen
)
BRIDGE_FILES_MATCHED = "obsbox_bridge_files_matched"  # gauge {pattern}: regular files each include pattern matches
BRIDGE_SOURCE_PROBLEMS = "obsbox_bridge_source_problems"  # gauge {kind}: paths or patterns with a problem now
BRIDGE_FILE_FORMAT = "obsbox_bridge_file_format"  # gauge {path, format}: 1 for the format a file is read as
BRIDGE_SPANS_SKIPPED = "obsbox_bridge_spans_skipped_total"  # {reason}

# ---------------------------------------------------------------- bridge metrics from logs
LOG_STAGE_DURATION = "obsbox_log_stage_duration_seconds"  # {service, stage}: LatencyBreakdown
LOG_TIMEOUT_DURATION = "obsbox_log_timeout_duration_seconds"  # "timeout after Nms"
LOG_OOM_KILLED = "obsbox_log_oom_killed_total"
LOG_DEADLINE_EXCEEDED = "obsbox_log_deadline_exceeded_total"

# ---------------------------------------------------------------- autoscaling signals

GPU_SCALE_UP = {"gpu_memory_utilization": 0.85, "decode_qps": 120.0}
GPU_SCALE_DOWN = {"gpu_memory_utilization": 0.40, "decode_qps": 30.0}
GPU_SCALE_HOLD_SECONDS = 300

# ---------------------------------------------------------------- SLO recording rules (Sloth's names)

SLO_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d", "30d")
SLI_ERROR_RATIO = "slo:sli_error:ratio_rate{window}"  # {slo, service}
SLO_OBJECTIVE = "slo:objective:ratio"
SLO_ERROR_BUDGET = "slo:error_budget:ratio"
SLO_CURRENT_BURN_RATE = "slo:current_burn_rate:ratio"
SLO_PERIOD_BURN_RATE = "slo:period_burn_rate:ratio"
SLO_BUDGET_REMAINING = "slo:period_error_budget_remaining:ratio"
SLO_ALERT = "SLOErrorBudgetBurn"  # {slo, severity="page"|"ticket", long_window, short_window}
SLO_BURN_RATE_ALERT = "SLOBurnRate"  # {slo, service, severity, window, condition}: a single-window condition
SLO_NO_DATA_ALERT = "SLONoData"  # {slo, service, severity="ticket"}: the SLI's events have no series
BURN_THRESHOLDS = {"page": ((14.4, "1h", "5m"), (6.0, "6h", "30m")), "ticket": ((3.0, "1d", "2h"), (1.0, "3d", "6h"))}

# ---------------------------------------------------------------- Grafana datasources and ports

# Resource attributes that Loki's OTLP ingestion turns into index labels by default (its
# ``default_resource_attributes_as_index_labels``), dots becoming underscores; every other attribute
# becomes structured metadata. The Loki push sink labels streams the same way, so both paths agree.
LOKI_INDEX_ATTRIBUTES = (
    "service.name",
    "service.namespace",
    "service.instance.id",
    "deployment.environment",
    "deployment.environment.name",
    "cloud.region",
    "cloud.availability_zone",
    "k8s.cluster.name",
    "k8s.namespace.name",
    "k8s.pod.name",
    "k8s.container.name",
    "container.name",
    "k8s.replicaset.name",
    "k8s.deployment.name",
    "k8s.statefulset.name",
    "k8s.daemonset.name",
    "k8s.cronjob.name",
    "k8s.job.name",
)

DATASOURCE_UIDS = {"prometheus": "obsbox-prometheus", "loki": "obsbox-loki", "tempo": "obsbox-tempo"}
PORTS = {
    "gateway": 8000,
    "demo_backend_metrics": 8001,  # the demo's simulated inference backend (vLLM's names)
    "bridge_metrics": 9465,
    "otlp_grpc": 4317,
    "otlp_http": 4318,
    "prometheus": 9090,
    "loki": 3100,
    "tempo": 3200,
    "grafana": 3000,
    "collector_health": 13133,
    "collector_metrics": 8888,
}
