# tpmledger: one image, every service (`tpmledger serve ingest|analytics|dashboard`, `migrate`).
#
#   docker build .                                   # python:3.11-slim, dependencies from the index
#   docker build --build-arg BASE_IMAGE=IMG --build-arg WHEELHOUSE=wheels .
#       # any base with python3 + venv; dependencies only from ./wheels (no index reached)
# scripts/compose-local.sh builds it the second way, from local parts only.
ARG BASE_IMAGE=python:3.11-slim

# Stage 1: the pinned dependencies in a venv (rebuilt only when requirements.lock changes).
FROM ${BASE_IMAGE} AS dependencies
# A folder of the build context holding a wheel for every line of requirements.lock;
# empty = install from the package index.
ARG WHEELHOUSE=
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements.lock ${WHEELHOUSE} /src/wheels/
RUN python3 -m venv /opt/tpmledger/venv \
    && if [ -n "$WHEELHOUSE" ]; then set -- --no-index --find-links /src/wheels; fi \
    && /opt/tpmledger/venv/bin/pip install "$@" -r /src/wheels/requirements.lock

# Stage 2: the service image (the wheels stay behind in stage 1).
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TPMLEDGER_DATA_DIR=/data \
    NUMBA_CACHE_DIR=/opt/tpmledger/numba-cache \
    PATH=/opt/tpmledger/venv/bin:$PATH

RUN groupadd --system --gid 10001 tpmledger \
    && useradd --system --uid 10001 --gid tpmledger --home-dir /data --create-home tpmledger

COPY --from=dependencies /opt/tpmledger/venv /opt/tpmledger/venv
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY tpmledger/ tpmledger/
COPY ingest/ ingest/
COPY storage/ storage/
COPY analytics/ analytics/
COPY dashboard/ dashboard/
COPY migrations/ migrations/
# tpmledger itself on the pinned dependencies (requirements.lock's setuptools builds it), then
# compile the analytics kernels into the image (about 6 s), readable by the service user.
RUN pip install --no-deps --no-build-isolation . && cd / && rm -rf /src \
    && python -m tpmledger.analytics.seal.kernel_warmup && chmod -R a+rX /opt/tpmledger

USER tpmledger
WORKDIR /data
VOLUME ["/data"]
EXPOSE 4317 4318 8050

# Every service image gets a healthcheck command; compose overrides the URL per service.
HEALTHCHECK --interval=10s --timeout=5s --retries=5 \
    CMD ["tpmledger", "probe", "http://127.0.0.1:4318/readyz"]

ENTRYPOINT []
CMD ["tpmledger", "--help"]
