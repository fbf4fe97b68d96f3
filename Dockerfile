# autotune's image: the service, a Ray head and CPU measurement workers run it (docker-compose.yml).
# `--target gpu` builds the CUDA worker: nvcc and pycuda on the same Python, since every node
# of a Ray cluster must run the same Python and Ray versions.
ARG PYTHON=3.11

FROM python:${PYTHON}-slim AS cpu
RUN apt-get update && apt-get install -y --no-install-recommends gcc g++ libgomp1 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY autotune ./autotune
RUN pip install --no-cache-dir '.[cluster]'
WORKDIR /data
ENV AUTOTUNE_HOST=0.0.0.0
CMD ["autotune", "serve"]

FROM nvidia/cuda:12.6.3-devel-ubuntu22.04 AS gpu
ARG PYTHON
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends software-properties-common \
    && add-apt-repository -y ppa:deadsnakes/ppa && apt-get update \
    && apt-get install -y --no-install-recommends python${PYTHON} python${PYTHON}-dev \
       python${PYTHON}-venv gcc g++ libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && python${PYTHON} -m venv /opt/autotune
ENV PATH=/opt/autotune/bin:$PATH
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY autotune ./autotune
RUN pip install --no-cache-dir '.[cluster,cuda]'
WORKDIR /data
CMD ["autotune", "worker", "--address", "ray-head:6379", "--no-cpu"]
