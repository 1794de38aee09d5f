"""The README's exit rule for every numeric flag (a sweep of -5, 0, 2**70, NaN and infinity over
every command found these): a value the settings refuse is exit 2 with one line naming the flag,
before anything is read or written; never a traceback (``pretrain --seed -5`` was one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.clis import CLIS

HUGE = str(2**70)
PRETRAIN = ["--shards", "{missing}", "--output", "{out}", "--config", "tiny"]
GLUE = ["glue", "--task", "rte", "--data-dir", "{missing}", "--checkpoint", "{missing}", "--output", "{out}"]
SQUAD = ["squad", "--version", "1.1", "--predict-file", "{missing}/dev.json", "--checkpoint", "{missing}"]
EXAMPLES = ["examples", "--corpus", "{missing}", "--vocab", "{missing}/vocab.txt", "--output", "{out}"]
WORDPIECE = ["train", "--corpus", "{missing}", "--output", "{out}"]
REFUSED = {
    "pretrain --seed -5": (
        "pretrain",
        [*PRETRAIN, "--seed", "-5"],
        "--seed must be between 0 and 4,294,967,295, got -5",
    ),
    "pretrain --seed 2**70": (
        "pretrain",
        [*PRETRAIN, "--seed", HUGE],
        f"--seed must be between 0 and 4,294,967,295, got {int(HUGE):,}",
    ),
    "pretrain --max-seq-length 0": (
        "pretrain",
        [*PRETRAIN, "--max-seq-length", "0"],
        "--max-seq-length must be at least 1, got 0",
    ),
    "pretrain --micro-batch-size 3": (
        "pretrain",
        [*PRETRAIN, "--global-batch-size", "8", "--micro-batch-size", "3"],
        "--micro-batch-size 3 must divide the per-rank batch 8",
    ),
    "pretrain params --vocab-size 0": (
        "pretrain",
        ["params", "--vocab-size", "0"],
        "Invalid value for '--vocab-size'",
    ),
    "pretrain params --config 0/8/2": (
        "pretrain",
        ["params", "--config", "0/8/2"],
        "--config 0/8/2: unknown config preset",
    ),
    "finetune glue --seed -1": (
        "finetune",
        [*GLUE, "--seed", "-1"],
        "--seed must be between 0 and 4,294,967,295, got -1",
    ),
    "finetune glue --seeds 0": (
        "finetune",
        [*GLUE, "--seeds", "0"],
        "--seeds must be between 1 and 100, got 0",
    ),
    "finetune glue --seed + --seeds": (
        "finetune",
        [*GLUE, "--seed", "4294967295", "--seeds", "2"],
        "--seed (with --seeds 2) must be between 0 and 4,294,967,294, got 4,294,967,295",
    ),
    "finetune glue --max-train-examples -5": (
        "finetune",
        [*GLUE, "--max-train-examples", "-5"],
        "--max-train-examples must be between 1 and 2,147,483,647, got -5",
    ),
    "finetune glue --max-seq-length 4": (
        "finetune",
        [*GLUE, "--max-seq-length", "4"],
        "--max-seq-length must be between 8 and 2,147,483,647, got 4",
    ),
    "finetune squad --max-predict-examples 0": (
        "finetune",
        [*SQUAD, "--output", "{out}", "--max-predict-examples", "0"],
        "--max-predict-examples must be between 1 and 2,147,483,647, got 0",
    ),
    "finetune squad --doc-stride 0": (
        "finetune",
        [*SQUAD, "--output", "{out}", "--doc-stride", "0"],
        "--doc-stride must be at least 1, got 0",
    ),
    "finetune squad --seed 2**70": (
        "finetune",
        [*SQUAD, "--output", "{out}", "--seed", HUGE],
        "--seed must be between 0 and 4,294,967,295",
    ),
    "pipelines examples --num-buckets 2**70": (
        "pipelines",
        [*EXAMPLES, "--num-buckets", HUGE],
        "--num-buckets must be between 1 and 1,000,000",
    ),
    "pipelines examples --max-predictions-per-seq 2**70": (
        "pipelines",
        [*EXAMPLES, "--max-predictions-per-seq", HUGE],
        "is more than the --max-seq-length 128 positions",
    ),
    "pipelines examples --dupe-factor 40000": (
        "pipelines",
        [*EXAMPLES, "--dupe-factor", "40000"],
        "--dupe-factor must be between 1 and 32,767",
    ),
    "pipelines corpus --num-shards 2**70": (
        "pipelines",
        ["corpus", "--input", "{missing}", "--output", "{out}", "--num-shards", HUGE],
        "--num-shards must be between 1 and 1,000,000",
    ),
    "wordpiece train --vocab-size 2**70": (
        "wordpiece",
        [*WORDPIECE, "--vocab-size", HUGE],
        "--vocab-size must be at most 4,294,967,296",
    ),
    "wordpiece train --min-frequency 2**70": (
        "wordpiece",
        [*WORDPIECE, "--min-frequency", HUGE],
        "--min-frequency must be between 1 and",
    ),
    "wordpiece train --num-count-shards 2**70": (
        "wordpiece",
        [*WORDPIECE, "--num-count-shards", HUGE],
        "--num-count-shards must be between 1 and 1,000,000",
    ),
    "pretrain --max-predictions-per-seq 2**70": (
        "pretrain",
        [*PRETRAIN, "--dynamic-masking", "--max-predictions-per-seq", HUGE],
        "--max-predictions-per-seq must be between 1 and 32767",
    ),
    "pipelines show --samples -1": (
        "pipelines",
        ["show", "{missing}", "--samples", "-1"],
        "Invalid value for '--samples'",
    ),
    "wordpiece encode --batch-size 2**70": (
        "wordpiece",
        ["encode", "--vocab", "{missing}", "--batch-size", HUGE],
        "Invalid value for '--batch-size'",
    ),
}
DYNAMIC = [*PRETRAIN, "--dynamic-masking"]
REFUSED |= {  # settings outside any sane range: refused before anything is read
    "pretrain --lr 1e30": ("pretrain", [*PRETRAIN, "--lr", "1e30"], "--lr must be in (0, 1], got 1e+30"),
    "pretrain --lr 0": ("pretrain", [*PRETRAIN, "--lr", "0"], "--lr must be in (0, 1], got 0.0"),
    "pretrain --lr nan": ("pretrain", [*PRETRAIN, "--lr", "nan"], "--lr must be in (0, 1], got nan"),
    "pretrain --warmup-steps -1": (
        "pretrain",
        [*PRETRAIN, "--warmup-steps", "-1"],
        "--warmup-steps must be at least 0",
    ),
    "pretrain --weight-decay 2": (
        "pretrain",
        [*PRETRAIN, "--weight-decay", "2"],
        "--weight-decay must be between 0 and 1",
    ),
    "pretrain --decay-power 50": (
        "pretrain",
        [*PRETRAIN, "--decay-power", "50"],
        "--decay-power must be between 0 and 10",
    ),
    "pretrain --max-grad-norm inf": (
        "pretrain",
        [*PRETRAIN, "--max-grad-norm", "inf"],
        "--max-grad-norm must be at least 0, got inf",
    ),
    "pretrain --dropout 1": (
        "pretrain",
        [*PRETRAIN, "--dropout", "1"],
        "--dropout must be in [0, 1), got 1.0",
    ),
    "pretrain --num-workers 1000": (
        "pretrain",
        [*PRETRAIN, "--num-workers", "1000"],
        "--num-workers must be between 0 and 64",
    ),
    "pretrain --mask-share 2.7": (
        "pretrain",
        [*DYNAMIC, "--mask-share", "2.7"],
        "--mask-share must be between 0 and 1, got 2.7",
    ),
    "pretrain --masked-lm-prob 1": (
        "pretrain",
        [*DYNAMIC, "--masked-lm-prob", "1"],
        "--masked-lm-prob must be in (0, 1)",
    ),
    "pretrain shares over 1": (
        "pretrain",
        [*DYNAMIC, "--mask-share", "0.8", "--keep-share", "0.3"],
        "must sum to 1, got [0.8, 0.3]",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_number_is_exit_2_with_one_line_before_anything_is_read(case, tmp_path):
    tool, args, said = REFUSED[case]
    paths = {"missing": str(tmp_path / "missing"), "out": str(tmp_path / "out")}
    result = CliRunner().invoke(CLIS[tool], [a.format(**paths) for a in args], input="hello\n")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and said in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1, result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_pretrain_shares_that_do_not_sum_to_1_with_the_shards_are_exit_2(shards, tmp_path):
    """A share given alone is checked against the shards' other two (0.1 and 0.1) once they are read."""
    args = [
        "--shards",
        str(shards),
        "--output",
        str(tmp_path / "out"),
        "--config",
        "tiny",
        "--dynamic-masking",
    ]
    result = CliRunner().invoke(CLIS["pretrain"], [*args, "--mask-share", "0.5", "--precision", "fp32"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "must sum to 1, got 0.5 + 0.1 + 0.1 = 0.7" in result.output


def test_pretrain_in_a_current_folder_that_was_deleted_is_one_line(tmp_path):
    """The shell's folder removed under it: one line, not an abort inside torch's libraries."""
    script = Path(sys.executable).with_name("pretrain")
    if not script.exists():
        pytest.skip("the pretrain console script is not installed beside this Python")
    gone = tmp_path / "gone"
    for args in ("--shards x --output y", "export --checkpoint x --output y"):
        gone.mkdir()
        command = f'cd "{gone}" && rmdir "{gone}" && exec "{script}" {args}'
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and done.stdout == "", done.stderr
        assert (
            done.stderr
            == "error: the current folder no longer exists: cd to a folder that does, and run again\n"
        )
