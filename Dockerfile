# The Dataflow workers' container (--sdk_container_image): Beam's own Python 3.11 SDK image with
# this project and every dependency at the version constraints.txt pins, so native libraries
# (pyarrow, tokenizers) are the ones tested here, not whatever pip resolves on a worker.
# Build and push: docs/scale.md, "Workers' container". tests/unit/test_dataflow_container.py
# checks that the image's Beam and Python match constraints.txt and the runtime.
FROM apache/beam_python3.11_sdk:2.77.0

# Beam's worker imports Arrow before any of the project's code can choose its allocator: set here
# what pipelines/__init__.py sets for the launcher and the local runners (one allocator for Arrow
# and Python, so a worker's memory does not grow with its input; docs/scale.md).
ENV ARROW_DEFAULT_MEMORY_POOL=system

WORKDIR /opt/bert-pretraining
COPY constraints.txt setup.py pyproject.toml README.md ./
COPY pipelines pipelines
COPY wordpiece wordpiece
COPY schemas schemas
COPY pretrain pretrain
COPY finetune finetune
COPY chain chain
RUN pip install --no-cache-dir -c constraints.txt '.[gcp,aws]'
WORKDIR /
