"""SIGINT and SIGTERM in every command: exit 130 / 143 with one ``error: interrupted by ...`` line,
no traceback, no ``done``, nothing marked complete, no temporary file left.

Every command runs in-process (the real CLI) and is held at a point of its own run where it sends
the signal to itself (``tests/faults/stop_hook.py``): inside a Beam DoFn for the pipelines (the
runner rewraps the interrupt as its own error), mid-training for ``pretrain`` and the fine-tuning
commands. A few run as real subprocesses, signalled from outside once they have written a file
that says they are at the held point: ``pipelines examples`` on Beam's default runner,
``pretrain`` (which stops after saving a checkpoint), ``finetune glue`` and the chain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from schemas import storage
from schemas.storage import is_temporary_name
from tests.clis import CLIS
from tests.faults.stop_hook import signal_self
from tests.unit.test_finetune_common import WORDS, hf_folder

ROOT = Path(__file__).resolve().parents[2]
NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
FAST = ["--runner", "FnApiRunner"]
SENTENCES = [
    f"the {a} was {b} and the {c} was not {b}." for a in WORDS[2:6] for b in WORDS[6:10] for c in WORDS[:4]
]


def _leftovers(root: Path) -> list[str]:
    """Temporary files and completion markers anywhere under ``root``."""
    if not root.exists():
        return []
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if is_temporary_name(p.name) or p.name in ("COMPLETED", "COMMITTED", "metrics.json")
    )


def _check_stopped(code: int, output: str, signum: int) -> str:
    """The exit status and the one line of a stopped command; returns that line."""
    assert code == 128 + signum, output
    assert "Traceback" not in output and "done," not in output and "Aborted" not in output, output
    errors = [line for line in output.splitlines() if line.lower().startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: interrupted by {NAMES[signum]}"), output
    return errors[0]


# -- inputs, made in code ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """Small inputs of every command: text, a one-page dump, GLUE/SWAG/CoNLL/SQuAD files, a BERT
    folder over the tiny vocabulary of ``WORDS``."""
    root = tmp_path_factory.mktemp("inputs")
    text = root / "text.txt"
    text.write_text("\n\n".join("\n".join(SENTENCES[i : i + 8]) for i in range(0, len(SENTENCES), 8)) + "\n")
    page = (
        "<page><title>A film</title><ns>0</ns><id>1</id><revision><id>2</id><text>{}</text></revision></page>"
    )
    (root / "dump.xml").write_text(f"<mediawiki>{page.format(' '.join(SENTENCES))}</mediawiki>")
    glue = root / "RTE"
    glue.mkdir()
    rows = [
        f"{i}\t{SENTENCES[i]}\t{SENTENCES[i + 1]}\t{('entailment', 'not_entailment')[i % 2]}"
        for i in range(6)
    ]
    for name in ("train", "dev"):
        (glue / f"{name}.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" + "\n".join(rows) + "\n")
    head = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
    lines = [f"{i},v,0,the movie,the movie,was,gold,good,bad,great,awful,{i % 4}" for i in range(4)]
    (root / "swag.csv").write_text(head + "\n".join(lines) + "\n")
    ner = root / "conll"
    ner.mkdir()
    sentence = "".join(
        f"{w} NN B-NP {t}\n" for w, t in zip(WORDS[:6], ["O", "B-MISC", "I-MISC", "O", "O", "O"], strict=True)
    )
    for name in ("train.txt", "valid.txt"):
        (ner / name).write_text("-DOCSTART- -X- O O\n\n" + (sentence + "\n") * 4)
    context = " ".join(SENTENCES[:3])
    qas = [
        {
            "id": f"q{i}",
            "question": "what was good?",
            "answers": [{"text": "movie", "answer_start": context.index("movie")}],
        }
        for i in range(2)
    ]
    (root / "squad.json").write_text(
        json.dumps({"data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]})
    )
    return {
        "root": root,
        "text": text,
        "dump": root / "dump.xml",
        "glue": glue,
        "swag": root / "swag.csv",
        "ner": ner,
        "squad": root / "squad.json",
        "bert": hf_folder(root / "bert"),
    }


@pytest.fixture(scope="module")
def checkpoint_run(tmp_path_factory) -> Path:
    """A run folder with one committed checkpoint of the tiny model (made in code, not trained)."""
    from pretrain import checkpoint as ckpt
    from tests.unit.test_finetune_common import VOCAB, tiny_model

    run = tmp_path_factory.mktemp("run") / "run"
    url = ckpt.step_url(str(run), 1)
    tiny_model().save_pretrained(url)
    (Path(url) / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    ckpt.save_state({"step": 1, "tokens_seen": 0, "cased": False}, storage.Folder(url), ckpt.TRAINER_STATE)
    ckpt.commit(storage.Folder(url), 1)
    return run


def _pretrain_args(shards: Path, run: Path, steps: int) -> list[str]:
    return [
        "--shards",
        str(shards),
        "--output",
        str(run),
        "--config",
        "tiny",
        "--max-steps",
        str(steps),
        "--global-batch-size",
        "4",
        "--num-workers",
        "0",
        "--precision",
        "fp32",
        "--save-steps",
        "100",
    ]


# -- every command, in-process ----------------------------------------------------------------------
# Held inside a Beam DoFn (text, examples, wordpiece train) or as the runner starts (the other
# pipelines: the stop takes the same path), mid-training for pretrain and the fine-tuning commands.

QUICK_FT = ["--epochs", "1", "--batch-size", "2", "--max-seq-length", "32"]
TRAINING = "pretrain.optim:Health.update"  # after each fine-tuning step
RUN = "apache_beam.pipeline:Pipeline.run"  # the pipeline is built; the runner has not started yet
# command -> (the function held and the text its arguments mention, the command line, the output)
COMMANDS = {
    "pipelines wikipedia": (
        RUN,
        "",
        [
            "pipelines",
            "wikipedia",
            "--input",
            "{dump}",
            "--output",
            "{out}",
            "--min-document-words",
            "1",
            *FAST,
        ],
    ),
    "pipelines books": (RUN, "", ["pipelines", "books", "--input", "{text}", "--output", "{out}", *FAST]),
    "pipelines text": (
        "pipelines.files:write_bytes",
        ".arrow",
        ["pipelines", "text", "--input", "{text}", "--output", "{out}", *FAST],
    ),
    "pipelines corpus": (RUN, "", ["pipelines", "corpus", "--input", "{corpus}", "--output", "{out}", *FAST]),
    "pipelines examples": (
        "pipelines.files:write_bytes",
        ".arrow",
        [
            "pipelines",
            "examples",
            "--corpus",
            "{corpus}",
            "--vocab",
            "{vocab}",
            "--output",
            "{out}",
            "--num-shards",
            "1",
            "--num-buckets",
            "2",
            "--max-seq-length",
            "32",
            *FAST,
        ],
    ),
    "pipelines show": ("pipelines.show:describe", "", ["pipelines", "show", "{corpus}"]),
    "wordpiece train": (
        "pipelines.files:write_bytes",
        "word_counts",
        [
            "wordpiece",
            "train",
            "--corpus",
            "{corpus}",
            "--output",
            "{out}",
            "--vocab-size",
            "300",
            "--num-unused",
            "0",
            "--measure-split",
            "train",
            *FAST,
        ],
    ),
    "wordpiece encode": (
        "wordpiece.tokenizer:WordPieceTokenizer.encode_batch",
        "",
        ["wordpiece", "encode", "--vocab", "{bert}/vocab.txt", "--uncased"],
    ),
    "pretrain": (
        "pretrain.train:Trainer.step",
        "",
        ["pretrain", *_pretrain_args(Path("{shards}"), Path("{out}"), steps=3)],
    ),
    "pretrain export": (
        "pretrain.hf:save_hf",
        "",
        ["pretrain", "export", "--checkpoint", "{run}", "--output", "{out}"],
    ),
    "pretrain params": ("pretrain.model:parameter_counts", "", ["pretrain", "params", "--config", "tiny"]),
    "finetune glue": (
        TRAINING,
        "",
        [
            "finetune",
            "glue",
            "--task",
            "rte",
            "--data-dir",
            "{glue}",
            "--checkpoint",
            "{bert}",
            "--output",
            "{out}",
            *QUICK_FT,
        ],
    ),
    "finetune swag": (
        TRAINING,
        "",
        [
            "finetune",
            "swag",
            "--train-file",
            "{swag}",
            "--dev-file",
            "{swag}",
            "--checkpoint",
            "{bert}",
            "--output",
            "{out}",
            *QUICK_FT,
        ],
    ),
    "finetune ner": (
        TRAINING,
        "",
        ["finetune", "ner", "--data-dir", "{ner}", "--checkpoint", "{bert}", "--output", "{out}", *QUICK_FT],
    ),
    "finetune squad": (
        TRAINING,
        "",
        [
            "finetune",
            "squad",
            "--version",
            "1.1",
            "--train-file",
            "{squad}",
            "--predict-file",
            "{squad}",
            "--checkpoint",
            "{bert}",
            "--output",
            "{out}",
            "--epochs",
            "1",
            "--batch-size",
            "2",
            "--max-seq-length",
            "64",
            "--doc-stride",
            "32",
            "--max-query-length",
            "16",
        ],
    ),
    "finetune features": (
        "finetune.extract:_ShardWriter.flush",
        "",
        [
            "finetune",
            "features",
            "--checkpoint",
            "{bert}",
            "--input",
            "{text}",
            "--output",
            "{out}",
            "--max-seq-length",
            "16",
            "--layers",
            "-1",
        ],
    ),
    "finetune evaluate squad": (
        "finetune.squad:evaluate_file",
        "",
        [
            "finetune",
            "evaluate",
            "squad",
            "--version",
            "1.1",
            "--data-file",
            "{squad}",
            "--predictions",
            "{squad}",
        ],
    ),
    "finetune report": (
        "finetune.report:write_report",
        "",
        ["finetune", "report", "{out}", "--output", "{out}-report"],
    ),
    "chain": ("chain.cli:run_chain", "", ["chain", "--workdir", "{out}", "--wiki-dump", "{dump}"]),
    "chain ablate": (
        "chain.cli:run_chain",
        "",
        ["chain", "ablate", "--workdir", "{out}", "--wiki-dump", "{dump}", "--preset", "smoke"],
    ),
}


DETAIL = {  # what the line says after "interrupted by SIG...": what is left
    **dict.fromkeys(
        [
            "pipelines wikipedia",
            "pipelines books",
            "pipelines text",
            "pipelines corpus",
            "pipelines examples",
            "wordpiece train",
        ],
        "; {out} is not marked COMPLETED",
    ),
    "pretrain": "; stopped at step 1, its checkpoint saved: continue with --resume {out}",
}
TOOLS = CLIS


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_stops_on_a_signal_with_one_line(
    command, signum, inputs, request, tmp_path, monkeypatch
):
    target, needle, (tool, *args) = COMMANDS[command]
    paths = {k: str(v) for k, v in inputs.items()} | {"out": str(tmp_path / "out")}
    fixture = {"corpus": "corpus_output", "shards": "shards", "run": "checkpoint_run", "vocab": "vocab"}
    for key, name in fixture.items():
        if any(f"{{{key}}}" in a for a in args):
            paths[key] = str(request.getfixturevalue(name))
    signal_self(monkeypatch, target, needle, signum)
    result = CliRunner().invoke(
        TOOLS[tool], [a.format(**paths) for a in args], input="the movie was good\n" * 3
    )
    line = _check_stopped(result.exit_code, result.output, signum)
    assert line == f"error: interrupted by {NAMES[signum]}" + DETAIL.get(command, "").format(**paths)
    left = [
        p for p in _leftovers(tmp_path / "out") if not (command == "pretrain" and p.endswith("COMMITTED"))
    ]
    assert not left, left
    if command == "pretrain":  # it stopped at the end of the step, with a checkpoint to continue from
        assert (tmp_path / "out" / "checkpoints" / "step-00000001" / "model.safetensors").exists()


# -- real processes, signalled from outside ---------------------------------------------------------


def _held(target: str, needle: str, nth: int, tmp_path: Path, tool: str, *args: str, go: bool = False):
    """Start ``tool ARGS`` in a new process held at ``target`` (``stop_hook``); wait until it is
    there; return the process and the ``go`` file that releases it (when asked for)."""
    ready, release = tmp_path / "ready", tmp_path / "go"
    command = [sys.executable, "-m", "tests.faults.stop_hook", target, needle, str(nth), str(ready)]
    command += [str(release) if go else "-", tool, *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 240
    while not ready.exists():
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline, "the command never reached the held point"
        time.sleep(0.02)
    return process, release


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def _small_examples(corpus: str, vocab: str, out: Path) -> list:
    """``pipelines examples`` on the corpus fixture at its smallest: one shard, two buckets."""
    small = "--max-seq-length 32 --dupe-factor 1 --num-shards 1 --num-buckets 2".split()
    return ["pipelines", "examples", "--corpus", corpus, "--vocab", vocab, "--output", out, *small]


def test_pipelines_examples_on_beams_default_runner(corpus_output, vocab, tmp_path):
    """Ctrl-C while a DoFn runs on Beam's default runner, which rewraps the interrupt as its own
    error: still exit 130 and one line."""
    signum = signal.SIGINT
    out = tmp_path / "shards"
    process, _ = _held(
        "pipelines.files:write_bytes",
        ".arrow",
        1,
        tmp_path,
        *_small_examples(corpus_output, vocab, out),
    )
    process.send_signal(signum)
    output = process.communicate(timeout=120)[0]
    line = _check_stopped(process.returncode, output, signum)
    assert line == f"error: interrupted by {NAMES[signum]}; {out} is not marked COMPLETED"
    assert not _leftovers(out) and not (out / ".temp").exists()


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the worker processes are found through /proc")
def test_beams_worker_processes_stop_with_the_command(corpus_output, vocab, tmp_path):
    """With --direct_running_mode multi_processing the DoFns run in worker processes that a signal to
    the command does not reach; they stop with it, and Beam's runner does not wait for them."""
    out = tmp_path / "shards"
    process, _ = _held(
        "apache_beam.runners.portability.fn_api_runner.fn_runner:FnApiRunner._execute_bundle",
        "",
        2,
        tmp_path,
        *_small_examples(corpus_output, vocab, out),
        "--direct_num_workers",
        "2",
        "--direct_running_mode",
        "multi_processing",
    )
    workers = _children(process.pid)
    assert workers  # started for the first bundle
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=120)[0]
    _check_stopped(process.returncode, output, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    assert not _leftovers(out)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_pretrain_saves_a_checkpoint_then_exits_128_plus_the_signal(shards, tmp_path, signum):
    """SIGHUP (the terminal closed) is a stop like SIGTERM: the step ends, its checkpoint is saved,
    exit 129."""
    run = tmp_path / "run"
    args = _pretrain_args(shards, run, steps=50)
    process, go = _held("pretrain.train:Trainer.step", "", 2, tmp_path, "pretrain", *args, go=True)
    process.send_signal(signum)
    go.write_text("")
    output = process.communicate(timeout=240)[0]
    line = _check_stopped(process.returncode, output, signum)
    name = signal.Signals(signum).name
    assert (
        line
        == f"error: interrupted by {name}; stopped at step 2, its checkpoint saved: continue with --resume {run}"
    )
    assert (run / "checkpoints" / "step-00000002" / "COMMITTED").exists()


@pytest.mark.parametrize(("local_rank", "lines"), [(None, 1), ("0", 1), ("3", 0)])
def test_under_torchrun_one_process_a_node_says_it_was_interrupted(monkeypatch, local_rank, lines):
    """Ctrl-C reaches every process of a node: the exit status is every process's, the line local
    rank 0's alone."""
    import click

    from schemas.commands import OneLineCommand, Stopped

    @click.command(cls=OneLineCommand)
    def stopped():
        raise Stopped(signal.SIGINT, "its output is not marked COMPLETED")

    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    result = CliRunner().invoke(stopped, [])
    assert result.exit_code == 130
    said = [line for line in result.output.splitlines() if line.startswith("error: interrupted by SIGINT")]
    assert len(said) == lines, result.output
