"""The storage layer (``schemas/storage.py``) and its Beam adapter (``pipelines/files.py``): paths
keep the form they were given, folders are written into by relative name, and Beam's S3 options
reach every access the way Beam hands them to a worker."""

from __future__ import annotations

import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import files
from schemas import storage


def test_a_pattern_matches_files_in_the_form_it_was_given(tmp_path, monkeypatch):
    (tmp_path / "in" / "sub").mkdir(parents=True)
    for name in ("a.txt", "b.txt", "sub/c.txt"):
        (tmp_path / "in" / name).write_text(name)
    monkeypatch.chdir(tmp_path)
    assert storage.glob("in/*.txt") == ["in/a.txt", "in/b.txt"]  # relative stays relative
    assert storage.glob("in/**") == ["in/a.txt", "in/b.txt", "in/sub/c.txt"]  # files only
    assert storage.glob(str(tmp_path / "in" / "?.txt")) == [
        str(tmp_path / "in" / n) for n in ("a.txt", "b.txt")
    ]
    assert storage.glob("in") == ["in"]  # no wildcard: itself, a folder too (refused by its reader)
    assert storage.glob("in/none*") == storage.glob("missing") == []
    storage.write_bytes("memory://storage-glob/x/1.arrow", b"1")
    [found] = storage.glob("memory://storage-glob/x/*.arrow")  # a URL of the bucket's protocol
    assert found.startswith("memory://") and storage.read_bytes(found) == b"1"


def test_a_folder_is_written_into_by_relative_name_and_keeps_no_journal(tmp_path):
    folder = storage.Folder(f"{tmp_path}/out/")
    folder.sub("model").write("config.json", "{}")
    folder.write_json("metrics.json", {"f1": 1.0}, indent=None)
    folder.journal("anything")  # nobody claimed it: nothing is recorded
    assert (tmp_path / "out" / "model" / "config.json").read_text() == "{}"
    assert (tmp_path / "out" / "metrics.json").read_text() == '{"f1": 1.0}\n'
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["metrics.json", "model"]
    assert storage.remove_tree(f"{tmp_path}/out") == 2 and not (tmp_path / "out").exists()


def test_beams_s3_options_reach_the_storage_layer_as_beam_hands_them_to_a_worker(monkeypatch):
    monkeypatch.setattr(storage, "_CONFIGURED", {})
    flags = ["--s3_endpoint_url=http://127.0.0.1:9", "--s3_access_key_id=k", "--s3_secret_access_key=s"]
    files.use_beam_options(PipelineOptions(flags))  # the launching machine
    assert storage.options("s3") == {
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},
        "key": "k",
        "secret": "s",
    }
    assert storage.endpoint_address("s3") == ("127.0.0.1", 9)
    monkeypatch.setattr(storage, "_CONFIGURED", {})
    FileSystems.set_options(PipelineOptions(flags[:1]))  # what Beam's worker harness does
    files.exists("memory://storage-worker/none")  # a worker's first access
    assert storage.options("s3") == {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}
    files.use_beam_options(PipelineOptions([]))
    assert storage.options("s3") == {}


@pytest.mark.parametrize("url", ["gs://b/x", "gcs://b/x", "s3://b/x", "s3a://b/x"])
def test_each_cloud_is_named_once(url):
    assert storage.cloud_of(url) == ("gs" if url.startswith("g") else "s3")
    assert storage.cloud_of("/local/x") is None and storage.cloud_of("memory://x") is None
