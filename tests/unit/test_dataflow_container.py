"""The workers' container recipe (Dockerfile, for Dataflow's --sdk_container_image) matches what is
tested here: Beam's SDK image of the pinned Beam and this Python, every package of the project
copied, every dependency installed at the version constraints.txt pins. (Docker itself does not run
in this environment; the rehearsal installs the same sdist against the same pins.)"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
PINS = dict(
    line.split("==", 1)
    for line in (ROOT / "constraints.txt").read_text().splitlines()
    if "==" in line and not line.startswith("#")
)


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_image_is_beams_sdk_of_the_pinned_beam_and_this_python():
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"FROM apache/beam_python{version}_sdk:{PINS['apache-beam']}\n" in DOCKERFILE


def test_the_image_installs_the_project_with_the_pinned_versions():
    installs = [line for line in DOCKERFILE.splitlines() if "pip install" in line]
    assert installs == ["RUN pip install --no-cache-dir -c constraints.txt '.[gcp,aws]'"]
    assert "COPY constraints.txt setup.py" in DOCKERFILE


def test_every_package_the_workers_import_is_copied_into_the_image():
    setup = (ROOT / "setup.py").read_text()
    packages = re.search(r"include=\[([^\]]*)\]", setup).group(1)
    for package in re.findall(r'"(\w+)\*"', packages):
        assert f"COPY {package} {package}\n" in DOCKERFILE


def test_every_requirement_of_the_workers_is_pinned_in_constraints():
    pins = {name.lower().replace("_", "-") for name in PINS}
    requirements = importlib.metadata.requires("bert-pretraining") or []
    worker = [r for r in requirements if "extra ==" not in r or re.search(r'extra == "(gcp|aws)"', r)]
    assert worker and not [r for r in worker if _name(r) not in pins]


def test_the_workers_allocate_arrow_memory_as_the_local_runners_do():
    """Beam's worker imports Arrow first: the image sets what the launcher's package does."""
    default = re.search(
        r'setdefault\("ARROW_DEFAULT_MEMORY_POOL", "(\w+)"\)', (ROOT / "pipelines/__init__.py").read_text()
    )
    assert f"\nENV ARROW_DEFAULT_MEMORY_POOL={default.group(1)}\n" in DOCKERFILE


@pytest.mark.parametrize("asked, used", [(None, "system"), ("mimalloc", "mimalloc")])
def test_a_pipelines_process_allocates_arrow_memory_with_the_system_allocator_unless_told(asked, used):
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    env.update({"ARROW_DEFAULT_MEMORY_POOL": asked} if asked else {})
    code = "import pipelines, pyarrow; print(pyarrow.default_memory_pool().backend_name)"
    found = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert found.stdout.strip() == used, found.stderr


@pytest.mark.parametrize("asked, used", [(None, "WARNING"), ("DEBUG", "DEBUG")])
def test_the_read_ahead_cache_logs_no_line_per_file_unless_told(asked, used):
    """fsspec logs each bucket file it opens at INFO, the level Dataflow keeps of its workers' logs."""
    before = f"logging.getLogger('fsspec.caching').setLevel('{asked}'); " if asked else ""
    code = f"import logging; {before}import pipelines; print(logging.getLogger('fsspec.caching').level)"
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert found.stdout.strip() == str(getattr(logging, used)), found.stderr
