"""The secret shapes ``redact`` knows, as data: token patterns and which key names hold secrets.

Token shapes follow Gitleaks' default rules (``config/gitleaks.toml`` in gitleaks/gitleaks, v8.30);
each pattern names the rule ids it covers. They are written for the bytes of one log line: inside a
JSON string a ``/`` may be escaped as ``\\/`` and a newline is the two bytes ``\\n``, so a pattern
never stops at a backslash it would cut in half.

Key names are matched the way Gitleaks' ``generic-api-key`` and Alloy's ``loki.secretfilter``
(which runs Gitleaks' rules) match them: a key that *contains* a secret word, whatever its case and
separators (``db_password``, ``secretKey``, ``client-secret``, ``X-Amz-Security-Token``). Gitleaks
then keeps only high-entropy values; a log's ``"pwd": "x"`` is a secret all the same, so instead a
key is let go by its shape, as Gitleaks' allowlist does (``secret_name``, ``api_version``,
``public_key``): see :func:`is_secret_key`.
"""

from __future__ import annotations

import re
from functools import lru_cache

MASK = b"[REDACTED]"

# What a secret-named key contains, as keywords (see KEYWORDS): a line without one of them has no
# such key. ``token`` followed by ``s`` (``max_tokens``, ``prompt_tokens``: counts in every LLM
# API) is not one. :func:`is_secret_key` decides on the whole key.
_KEY_KEYWORDS = (
    *(b"pass", b"pwd", b"secret", b"token(?:[^s]|$)", b"cred", b"auth", b"cookie", b"signature"),
    *(word + sep + b"key" for word in (b"api", b"access", b"private") for sep in (b"", b"_", b".", b"-")),
)
# The words a candidate line is searched for to find its keys (fewer searches: ``key`` serves
# ``api_key``, ``accessKey``, ``private-key``).
KEY_WORDS = (b"pass", b"pwd", b"secret", b"token", b"cred", b"auth", b"cookie", b"signature", b"key")

# Contained anywhere in the key once its separators are gone (``dbpassword``, ``xapikey``).
_CONTAINED = re.compile(
    r"passw(?:or)?d|passphrase|pwd|secret|token|apikey|accesskey|privatekey|credential|creds"
    r"|authorization|cookie|signature"
)
# Secret only as a word of their own: ``pass`` but not ``passed``, ``auth`` but not ``author``.
_WORDS = frozenset({"pass", "auth"})
# A key whose last word is one of these names something about a secret, not the secret (Gitleaks'
# allowlist: ``secret[_.-]?(?:length|name|size)``, ``api[_.-]?(?:id|name|version)``, ``key[_.-]?file``...).
_ABOUT = frozenset(
    (
        *("count", "counts", "type", "types", "kind", "length", "len", "size", "name", "names", "id", "ids"),
        *("version", "required", "reset", "expires", "in", "expiry", "expiration", "expired", "ttl", "age"),
        *("url", "uri", "endpoint", "file", "path", "enabled", "disabled", "present", "provided", "valid"),
        *("invalid", "changed", "updated", "rotated", "at", "time", "timeout", "ms", "seconds", "limit"),
        *("limits", "policy", "strength", "hint", "field", "fields", "source", "label", "format"),
        *("algorithm", "alg", "method", "scheme", "schemes", "scope", "scopes", "status", "usage", "used", "logprobs"),
        *("prefix", "option", "options", "mode", "provider", "providers", "flow", "level", "state"),
        *("strategy", "mechanism", "plugin", "backend"),
    )
)
# Words that turn the whole key into a non-secret: tokenizers and counts of tokens, public keys.
_NOT_SECRET = frozenset({"tokens", "tokenizer", "tokenizers", "tokenize", "tokenized", "public", "pub"})
_SPLIT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


@lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether a field or parameter named ``key`` holds a secret.

    Yes when, split into its words (``secretKey`` → secret, key), the key contains a secret word and
    neither names something about a secret (its last word ``count``, ``type``, ``version``,
    ``required``, ...: ``token_count``, ``password_reset_required``, ``secret_version``) nor is a
    count of LLM tokens or a public key (``max_tokens``, ``public_key``).
    """
    words = [w.lower() for w in _SPLIT.findall(key)]
    if not words or words[-1] in _ABOUT or _NOT_SECRET.intersection(words):
        return False
    return bool(_CONTAINED.search("".join(words))) or bool(_WORDS.intersection(words))


# The scheme of an ``Authorization`` value stays readable; what follows it is the secret.
AUTH_SCHEME = re.compile(rb"(?i:basic|bearer|digest|token|negotiate|ntlm|aws4-hmac-sha256|apikey|sso-key)\s+")

# Shapes of tokens, named by rule. Each is ``(pattern, replacement)``; a group 1 in the
# replacement keeps the part of the match that is not secret.
_SLASH = rb"(?:\\?/)"  # ``/`` or the JSON-escaped ``\/``
SHAPES: dict[str, tuple[bytes, bytes]] = {
    # private-key (multi-line keys arrive as one line with JSON-escaped \n). The body runs to the
    # first -----END or the end of its string, so a key cut short by truncation goes too; it is
    # read once, without backtracking (a lazy body retried at every byte took a second on 1 MiB).
    "private_key": (
        rb"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----(?:[^\"\\-]+|\\.|-(?!----END))*"
        rb"(?:-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----)?",
        MASK,
    ),
    "jwt": (rb"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", MASK),  # jwt
    # openai-api-key, anthropic-api-key (sk-...), github-pat, github-oauth, github-app-token,
    # github-refresh-token (gh[pousr]_), github-fine-grained-pat, aws-access-token
    "api_key": (
        rb"\b(?:sk-(?:proj-|ant-|live-|test-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}"
        rb"|github_pat_[A-Za-z0-9_]{40,}|(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16})\b",
        MASK,
    ),
    # slack-bot-token, slack-user-token, slack-legacy-token, slack-legacy-bot-token,
    # slack-legacy-workspace-token (xox[abeoprs]-), slack-app-token (xapp-),
    # slack-config-access-token and slack-config-refresh-token (xoxe.xox[bp]-, xoxe-)
    "slack_token": (
        rb"\b(?:xox[abeoprs]-(?:\d+-)*[0-9A-Za-z-]{8,}|xapp-\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]+"
        rb"|xoxe\.xox[bp]-\d-[A-Za-z0-9]{100,})",
        MASK,
    ),
    # slack-webhook-url: the path after /services/ (or workflows, triggers) is the secret
    "slack_webhook": (
        rb"(hooks\.slack\.com" + _SLASH + rb"(?:services|workflows|triggers)" + _SLASH + rb")"
        rb"(?:[A-Za-z0-9+]|\\?/){43,80}",
        rb"\1" + MASK,
    ),
    # stripe-access-token (sk_ and rk_, live, test and prod)
    "stripe_key": (rb"\b(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,99}\b", MASK),
    # gcp-api-key
    "google_api_key": (rb"\bAIza[\w-]{35}(?![\w-])", MASK),
    # gitlab-pat, gitlab-pat-routable, gitlab-deploy-token, gitlab-runner-authentication-token(-routable),
    # gitlab-ptt, gitlab-cicd-job-token, gitlab-feature-flag-client-token, gitlab-feed-token,
    # gitlab-incoming-mail-token, gitlab-kubernetes-agent-token, gitlab-oauth-app-secret,
    # gitlab-scim-token, gitlab-rrt
    "gitlab_token": (
        rb"\b(?:gl(?:pat|dt|rt|ptt|cbt|ffct|ft|imt|agent|oas|soat)-[\w.-]{20,}|GR1348941[\w-]{20})",
        MASK,
    ),
    "bearer": (rb"(\b[Bb]earer\s+)[A-Za-z0-9\-._~+/]{8,}=*", rb"\1" + MASK),
    "url_password": (rb"(\b[a-zA-Z][a-zA-Z0-9+.\-]*:(?:\\?/){2}[^\s:/@\"\\]+:)[^\s@/\"\\]+@", rb"\1" + MASK + b"@"),
}

# What a line must contain, lowercased, for a rule to be tried on it: Gitleaks' ``keywords``, its
# prefilter. Each is a literal, or a regex that starts with one (``re`` then scans for the literal
# first) and ends where its match does (Hyperscan calls back at every end), read alike by both.
KEYWORDS: dict[str, tuple[bytes, ...]] = {
    "private_key": (b"-----begin",),
    "secret_field": _KEY_KEYWORDS,
    "jwt": (b"eyj",),
    "api_key": (b"sk-", b"gh[pousr]_", b"github_pat_", b"a3t", b"akia", b"asia", b"abia", b"acca"),
    "slack_token": (b"xox", b"xapp-"),
    "slack_webhook": (rb"hooks\.slack\.com",),
    "stripe_key": (b"sk_test_", b"sk_live_", b"sk_prod_", b"rk_test_", b"rk_live_", b"rk_prod_"),
    "google_api_key": (b"aiza",),
    "gitlab_token": (b"gl(?:pat|dt|rt|ptt|cbt|ffct|ft|imt|agent|oas|soat)-", b"gr1348941"),
    "bearer": (b"bearer",),
    "url_password": tuple(
        scheme + rb"[^\s:/@\"\\]+:[^\s@/\"\\]+@" for scheme in (b"://", rb":\\/\\/", rb":\\//", rb":/\\/")
    ),
    "secret_pair": _KEY_KEYWORDS,
}
