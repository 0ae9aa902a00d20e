# The trainer image: `torchrun ... -m trainer` on the CUDA PyTorch image that matches the
# torch the project pins (Makefile: torch==2.13.0). Layers go from rarely to often changed,
# so a code-only change rebuilds only the last two.
ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
FROM ${BASE_IMAGE}

# No version defaults: build_image passes TORCH_VERSION/CUDA_VERSION from its analysis of
# the Dockerfile it builds (base tag, pins, index URLs; after base_image, build_args and any
# fix) and sets the same labels itself, so a plain build labels nothing rather than a guess.
ARG GIT_SHA=unknown
ARG TORCH_VERSION
ARG CUDA_VERSION
LABEL org.opencontainers.image.source="https://github.com/fsdp-eks/fsdp-eks" \
      org.opencontainers.image.revision="${GIT_SHA}" \
      org.opencontainers.image.title="fsdp-eks trainer" \
      fsdp-eks.torch="${TORCH_VERSION}" \
      fsdp-eks.cuda="${CUDA_VERSION}"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/fsdp-eks

# Dependencies first, read from pyproject's `trainer` extra so there is one list. torch is
# left out: the base image has it, and a pip torch would pull a second CUDA stack.
COPY pyproject.toml ./
RUN python -c "import re, tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['trainer']; print('\n'.join(d for d in deps if re.split('[<>=!~ ;]', d)[0] != 'torch'))" > /tmp/trainer-deps.txt \
    && pip install -r /tmp/trainer-deps.txt \
    && rm /tmp/trainer-deps.txt

# The source last; --no-deps: the layer above installed them, and torch is the base's.
COPY README.md ./
COPY trainer/ trainer/
COPY skills/ skills/
COPY commands/ commands/
COPY mcp_server/ mcp_server/
RUN pip install --no-deps . && rm -rf build ./*.egg-info

# The pytorch image puts python and torchrun in /opt/conda/bin, already on PATH.
RUN useradd --create-home --uid 1000 trainer \
    && mkdir -p /workspace && chown trainer:trainer /workspace
# Numeric, so Kubernetes runAsNonRoot can verify it without reading /etc/passwd.
USER 1000:1000
WORKDIR /workspace

ENTRYPOINT ["torchrun"]
CMD ["--standalone", "--nproc_per_node=gpu", "-m", "trainer"]
