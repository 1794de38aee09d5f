"""benchmarks/peers_at_scale.py's watchdog kills a whole process tree past its memory or time limit
and says which; google's log is read for its phase and its count; runs merge by peer and size."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from benchmarks.peers_at_scale import merged, milestone, reference_instances, watch

GROW_IN_A_GRANDCHILD = (
    "import subprocess, sys; "
    "subprocess.run([sys.executable, '-c', "
    '\'import os, sys, time; open(sys.argv[1], "w").write(str(os.getpid())); '
    'held = b"x" * 300_000_000; time.sleep(60)\', sys.argv[1]])'
)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def test_a_tree_whose_grandchild_grows_past_the_limit_is_killed_whole(tmp_path):
    pid_file = tmp_path / "pid"
    command = [sys.executable, "-c", GROW_IN_A_GRANDCHILD, str(pid_file)]
    found = watch(command, tmp_path / "log", memory_limit_mb=150, time_limit_s=50)
    assert found.outcome == "killed: memory" and found.peak_rss_mb > 150 and found.wall_s < 40
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(grandchild)


def test_a_command_past_the_time_limit_is_killed_and_one_that_exits_is_not(tmp_path):
    slept = watch([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "a", 1000, time_limit_s=1)
    assert slept.outcome == "killed: time" and 1 <= slept.wall_s < 20
    done = watch([sys.executable, "-c", "print('made')"], tmp_path / "b", 1000, 60)
    assert (done.outcome, done.exit_status) == ("finished", 0) and (tmp_path / "b").read_text() == "made\n"
    failed = watch([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "c", 1000, 60)
    assert (failed.outcome, failed.exit_status) == ("failed", 3)


def test_google_s_log_gives_its_phase_and_the_instances_it_wrote():
    assert milestone("") == "starting (TensorFlow imported, no input read yet)"
    reading = "I1206 INFO:tensorflow:*** Reading from input files ***\nINFO:tensorflow:  a.txt\n"
    assert milestone(reading) == "reading, tokenizing and making instances in memory"
    assert reference_instances(reading) is None
    written = (
        reading
        + "INFO:tensorflow:*** Writing to output files ***\nINFO:tensorflow:Wrote 69642 total instances\n"
    )
    assert milestone(written) == "finished writing" and reference_instances(written) == 69642


def test_runs_merge_one_per_peer_and_size_in_peer_order(tmp_path):
    path = tmp_path / "peers.json"

    def run(peer: str, mb: float, cpu: float) -> dict:
        return {"peer_name": peer, "input": {"mb": mb}, "ours": {"cpu_s": cpu}}

    path.write_text(json.dumps({"runs": [run("examples", 20, 1), run("wikipedia", 200, 2)]}))
    found = merged(path, [run("examples", 20, 5), run("wordpiece", 200, 3)])
    assert [(r["peer_name"], r["input"]["mb"], r["ours"]["cpu_s"]) for r in found] == [
        ("wordpiece", 200, 3),
        ("examples", 20, 5),
        ("wikipedia", 200, 2),
    ]
