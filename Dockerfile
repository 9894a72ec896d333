# syntax=docker/dockerfile:1
# The Bellows image: the `bellows` CLI, whose `controller` and `bridge` sub-commands the
# Helm chart and manifests/ run. Two stages: the first builds a virtualenv with the
# package and its dependencies, the second copies only that virtualenv onto a clean base
# and runs as an unprivileged user on a read-only root filesystem.
#
# The base is pinned to an exact release; to pin it by digest as well, pass e.g.
#   --build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# A C compiler for the compiled parts (setup.py: the DP layers, the TSF rows' weighing); the
# build stage only.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
RUN python -m venv /opt/venv
# Dependencies change less often than the code: install them in their own layer.
COPY pyproject.toml setup.py README.md ./
COPY plugin ./plugin
# The pipelines extra (kfp): the Pipelines step (bellows.kube.kfp_component) runs on this
# image with KFP's executor and installs nothing at run time (no package index needed).
RUN /opt/venv/bin/pip install --no-compile '.[pipelines]' \
 # optional at install (setup.py), required in the image: fail the build without them
 && /opt/venv/bin/python -c "import bellows.optimizer._windowed, bellows.scaling._batches" \
 && /opt/venv/bin/python -c "import kfp.dsl.executor_main, bellows.kube.kfp_component" \
 # The root filesystem is read-only at run time, so compile the bytecode now.
 && /opt/venv/bin/python -m compileall -q /opt/venv/lib

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="bellows" \
      org.opencontainers.image.description="Elastic GPU and batch-size scaler for Kubeflow training jobs" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric UID/GID (the chart's runAsUser) so that runAsNonRoot can verify it.
RUN groupadd --gid 65532 bellows \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin bellows
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["bellows"]
CMD ["--help"]
