# tpmledger: one image, every service (`tpmledger serve ingest|analytics|dashboard`, `migrate`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TPMLEDGER_DATA_DIR=/data \
    NUMBA_CACHE_DIR=/opt/tpmledger/numba-cache

RUN groupadd --system --gid 10001 tpmledger \
    && useradd --system --uid 10001 --gid tpmledger --home-dir /data --create-home tpmledger

WORKDIR /src
COPY pyproject.toml README.md ./
COPY tpmledger/ tpmledger/
# Compile the analytics kernels into the image (about 6 s), readable by the service user.
RUN pip install . && rm -rf /src \
    && python -m tpmledger.analytics.kernels.kernel_warmup && chmod -R a+rX /opt/tpmledger

USER tpmledger
WORKDIR /data
VOLUME ["/data"]
EXPOSE 4317 4318 8050

# Every service image gets a healthcheck command; compose overrides the URL per service.
HEALTHCHECK --interval=10s --timeout=5s --retries=5 \
    CMD ["tpmledger", "probe", "http://127.0.0.1:4318/readyz"]

ENTRYPOINT []
CMD ["tpmledger", "--help"]
