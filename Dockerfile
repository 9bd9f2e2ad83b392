# syntax=docker/dockerfile:1
# spoolmq: one broker process (one uvicorn worker) on the /data volume, with bearer-token
# authentication from an auth file mounted at /run/secrets/spoolmq-auth.toml.
#
#   docker build -t spoolmq .
#   docker run --rm spoolmq token create --name ops --admin >> spoolmq-auth.toml
#   # (the entry goes to stdout, the token once to stderr), then:
#   docker run -p 8080:8080 -v spoolmq-data:/data \
#     -v "$PWD/spoolmq-auth.toml:/run/secrets/spoolmq-auth.toml:ro" spoolmq
#
# Without the auth file the server refuses to start (it listens on 0.0.0.0 here, and without
# tokens every caller would be admin); to open it to everyone on purpose:
#   docker run -e SPOOLMQ_AUTH_FILE= ... spoolmq serve --host 0.0.0.0 --store-dir /data --allow-anonymous
# Behind a TLS proxy add -e SPOOLMQ_SECURE_COOKIES=true (admin login cookie). Admin actions
# are logged to /data/audit.log. Settings come from SPOOLMQ_* variables or flags after the
# image name (docker run spoolmq serve --host 0.0.0.0 --store-dir /data --rate-limit-per-s 500).
#
# The Spark jobs run from the same image (PySpark and a Java 17 runtime are in it):
#   docker run --rm -v spoolmq-data:/data --entrypoint spoolmq-spark spoolmq \
#     lag-report --store /data --out /data/lag
FROM python:3.11-slim-bookworm AS base

# The uv that made uv.lock (the Makefile pins the same one; a test checks they agree).
ARG UV_VERSION=0.13.9

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/app/.venv

RUN pip install --no-cache-dir "uv==${UV_VERSION}"

# Java for the Spark jobs (PySpark 4 needs 17 or later; procps for Spark's launch scripts).
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Dependencies only, from the lock file: this layer is rebuilt only when they change.
COPY pyproject.toml uv.lock README.md ./
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --extra spark --no-install-project

# Then the project itself.
COPY app ./app
COPY services ./services
COPY storage ./storage
COPY spark_jobs ./spark_jobs
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --extra spark

RUN groupadd --system --gid 10001 spoolmq \
    && useradd --system --uid 10001 --gid spoolmq --home-dir /app --shell /usr/sbin/nologin spoolmq \
    && mkdir -p /data \
    && chown spoolmq:spoolmq /data

ENV PATH="/app/.venv/bin:$PATH" \
    SPOOLMQ_STORE_DIR=/data \
    SPOOLMQ_HOST=0.0.0.0 \
    SPOOLMQ_PORT=8080 \
    SPOOLMQ_AUTH_FILE=/run/secrets/spoolmq-auth.toml \
    PYSPARK_PYTHON=/app/.venv/bin/python

USER spoolmq
VOLUME ["/data"]
EXPOSE 8080

# Liveness with the standard library only (no curl in a slim image).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('SPOOLMQ_PORT', '8080'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]

# SIGTERM (docker stop) shuts down gracefully: parked long-polls are answered, offsets and
# configs persisted, the store closed. Give it time: docker stop --time 30.
STOPSIGNAL SIGTERM
ENTRYPOINT ["spoolmq"]
CMD ["serve", "--host", "0.0.0.0", "--store-dir", "/data"]
