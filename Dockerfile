FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PITFALLS_DATA_DIR=/data

RUN groupadd --gid 10001 pitfalls \
    && useradd --create-home --uid 10001 --gid 10001 pitfalls \
    && mkdir /data \
    && chown pitfalls:pitfalls /data

WORKDIR /srv/pitfalls
COPY pyproject.toml README.md ./
COPY app ./app
COPY pitfalls ./pitfalls
COPY templates ./templates
COPY static ./static
COPY content ./content
COPY migrations ./migrations
# The same install step as CI's, without the test extra; with the PostgreSQL driver. Then the
# first start of the shipped entries, made once here: a container's first start on an empty
# /data copies it (same entries, code and engine only) instead of doing that work.
RUN pip install --no-cache-dir "./[postgres]" \
    && pitfalls snapshot

USER 10001:10001
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/api/v1/health', timeout=4).status == 200 else 1)"]
CMD ["pitfalls", "serve", "--host", "0.0.0.0", "--port", "8000"]
