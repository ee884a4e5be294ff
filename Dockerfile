# The obsbox image: the bridge, the demo gateway and the load generator (`obsbox bridge|demo|load`).
#   docker build -t obsbox .
#   docker run --rm obsbox bridge --help
FROM python:3.11-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/obsbox
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY obsbox ./obsbox
COPY exporters ./exporters
COPY collector ./collector
COPY dashboards ./dashboards
# The core (the bridge) and the demo extra (the demo gateway and its load generator): what compose runs.
# Unquoted on purpose: no file in /src matches the pattern, so the shell passes it on as written.
RUN /opt/obsbox/bin/pip install .[demo]


FROM python:3.11-slim-bookworm

ENV PATH=/opt/obsbox/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

COPY --from=build /opt/obsbox /opt/obsbox

# A fixed, unprivileged UID/GID. The directories the compose volumes mount are created here and owned
# by that user, so a fresh named volume inherits the ownership: positions and dead letters
# (/var/lib/obsbox) and the demo gateway's log folder (/logs-demo).
RUN groupadd --system --gid 10001 obsbox \
    && useradd --system --uid 10001 --gid obsbox --home-dir /var/lib/obsbox --shell /usr/sbin/nologin obsbox \
    && mkdir -p /var/lib/obsbox /logs-demo \
    && chown obsbox:obsbox /var/lib/obsbox /logs-demo

USER 10001:10001
WORKDIR /var/lib/obsbox

# 8000: the demo gateway; 9465: the bridge's /metrics.
EXPOSE 8000 9465

ENTRYPOINT ["obsbox"]
CMD ["--help"]
