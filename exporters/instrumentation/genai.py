"""OpenTelemetry's GenAI semantic conventions for the requests a gateway serves.

A request is a GenAI operation when the app names it (``set_operation``) or its route is one of
``InstrumentConfig.genai_routes`` (the OpenAI-compatible ones by default). Its server span then
carries the ``gen_ai.*`` attributes, and the SDK's meter records the model-server metrics:
``gen_ai.server.request.duration``, ``gen_ai.server.time_to_first_token`` (the first byte of the
reply, the first chunk of a streamed one: the measurement behind ``gateway_reply_latency_seconds``),
``gen_ai.server.time_per_output_token`` and ``gen_ai.client.token.usage``.

Names, units and advised buckets are those of semantic-conventions v1.41.1 (the last release that
holds the GenAI model: ``model/gen-ai/metrics.yaml``, ``docs/gen-ai/gen-ai-metrics.md``). The
constants come from ``opentelemetry-semantic-conventions`` (0.66b2), whose docstrings mark every
``gen_ai.*`` name "Deprecated: Moved to ... semantic-conventions-genai" (moved, not renamed: the
names are still the current ones), and ``gen_ai.system`` "Replaced by gen_ai.provider.name".
The package gives no bucket advice, so the boundaries are written here.

``OTEL_SEMCONV_STABILITY_OPT_IN`` is read as opentelemetry-python-contrib reads it
(``opentelemetry/instrumentation/_semconv.py``: a comma-separated list): with
``gen_ai_latest_experimental`` the provider is ``gen_ai.provider.name``; without it, as the contrib
instrumentations do by default (``openai_v2/utils.py``, ``get_llm_request_attributes``), it is the
older ``gen_ai.system``. Nothing else differs between the two: the names used here are the same in
both. The token counters meant to replace ``gen_ai.client.token.usage``
(``gen_ai.client.inference.usage.*``) exist only on semantic-conventions-genai's unreleased main, with
no constant in the package and names still changing; contrib emits the histogram in both modes
(``opentelemetry/util/genai/instruments.py``), and so does this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as gm
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT

from obsbox.exporters.instrumentation.request import RequestScope

OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"
LATEST_EXPERIMENTAL = "gen_ai_latest_experimental"

CHAT = ga.GenAiOperationNameValues.CHAT.value
TEXT_COMPLETION = ga.GenAiOperationNameValues.TEXT_COMPLETION.value
EMBEDDINGS = ga.GenAiOperationNameValues.EMBEDDINGS.value
INPUT = ga.GenAiTokenTypeValues.INPUT.value
OUTPUT = ga.GenAiTokenTypeValues.OUTPUT.value
OPENAI = ga.GenAiProviderNameValues.OPENAI.value

# The routes of the OpenAI-compatible API that vLLM, SGLang, TGI and LiteLLM serve, and Anthropic's.
ROUTES: Mapping[str, str] = {
    "/v1/chat/completions": CHAT,
    "/chat/completions": CHAT,
    "/v1/completions": TEXT_COMPLETION,
    "/completions": TEXT_COMPLETION,
    "/v1/embeddings": EMBEDDINGS,
    "/embeddings": EMBEDDINGS,
    "/v1/messages": CHAT,
}

# Advised ExplicitBucketBoundaries, docs/gen-ai/gen-ai-metrics.md at v1.41.1.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BUCKETS = tuple(4**k for k in range(14))  # 1, 4, 16, ... 67108864


# name, unit, description (the conventions' brief), advised buckets
_INSTRUMENTS = (
    (
        gm.GEN_AI_SERVER_REQUEST_DURATION,
        "s",
        "Generative AI server request duration such as time-to-last byte or last output token.",
        DURATION_BUCKETS,
    ),
    (
        gm.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
        "s",
        "Time to generate first token for successful responses.",
        TTFT_BUCKETS,
    ),
    (
        gm.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
        "s",
        "Time per output token generated after the first token for successful responses.",
        TPOT_BUCKETS,
    ),
    (gm.GEN_AI_CLIENT_TOKEN_USAGE, "{token}", "Number of input and output tokens used.", TOKEN_BUCKETS),
)


def latest_experimental(opt_in: str | None = None) -> bool:
    """Whether ``OTEL_SEMCONV_STABILITY_OPT_IN`` (or ``opt_in``) lists ``gen_ai_latest_experimental``."""
    value = os.environ.get(OPT_IN, "") if opt_in is None else opt_in
    return LATEST_EXPERIMENTAL in (item.strip() for item in value.split(","))


class GenAi:
    """The app's GenAI conventions: the attribute naming the provider (per the opt-in) and, with a
    meter, the model-server histograms."""

    def __init__(self, meter: Any, latest: bool) -> None:
        self.provider_key = ga.GEN_AI_PROVIDER_NAME if latest else ga.GEN_AI_SYSTEM
        self.metered = meter is not None
        if meter is None:
            return
        self.request_duration, self.time_to_first_token, self.time_per_output_token, self.token_usage = (
            meter.create_histogram(name, unit=unit, description=text, explicit_bucket_boundaries_advisory=buckets)
            for name, unit, text, buckets in _INSTRUMENTS
        )

    def finish(
        self,
        scope: RequestScope,
        operation: str,
        span_attributes: dict[str, Any],
        *,
        request_model: str,
        response_model: str | None,
        duration: float,
        first_byte: float,
        error_type: str | None,
    ) -> None:
        """Add the span's ``gen_ai.*`` attributes to ``span_attributes`` (the caller sets them all
        at once) and record the metrics of one finished operation.

        ``request_model`` and ``response_model`` are the bounded values metrics carry; the span
        has the names as reported."""
        common: dict[str, Any] = {ga.GEN_AI_OPERATION_NAME: operation, self.provider_key: scope.provider}
        if scope.server is not None:
            common[SERVER_ADDRESS], common[SERVER_PORT] = scope.server
        attributes = span_attributes
        attributes.update(common)
        if scope.response_model:
            attributes[ga.GEN_AI_RESPONSE_MODEL] = scope.response_model
        if scope.input_tokens is not None:
            attributes[ga.GEN_AI_USAGE_INPUT_TOKENS] = scope.input_tokens
        if scope.output_tokens is not None:
            attributes[ga.GEN_AI_USAGE_OUTPUT_TOKENS] = scope.output_tokens
        if scope.finish_reasons:
            attributes[ga.GEN_AI_RESPONSE_FINISH_REASONS] = scope.finish_reasons
        if not self.metered:
            return
        common[ga.GEN_AI_REQUEST_MODEL] = request_model
        if response_model is not None:
            common[ga.GEN_AI_RESPONSE_MODEL] = response_model
        if error_type is None:
            self.request_duration.record(duration, common)
            self.time_to_first_token.record(first_byte, common)
            if scope.output_tokens is not None and scope.output_tokens > 1:
                # docs/gen-ai/gen-ai-metrics.md: (request duration - time to first token) / (tokens after the first)
                self.time_per_output_token.record((duration - first_byte) / (scope.output_tokens - 1), common)
        else:
            self.request_duration.record(duration, {**common, ERROR_TYPE: error_type})
        if scope.input_tokens is not None:
            self.token_usage.record(scope.input_tokens, {**common, ga.GEN_AI_TOKEN_TYPE: INPUT})
        if scope.output_tokens is not None:
            self.token_usage.record(scope.output_tokens, {**common, ga.GEN_AI_TOKEN_TYPE: OUTPUT})
