"""Training metrics on rank 0: ``metrics.jsonl`` (one JSON object per record, ``"split"``
``train`` or ``validation``), TensorBoard events, MFU, and PNG curves at the end of a run.

On resume, records after the checkpoint's step are dropped, so the file describes the training
the checkpoints hold; it is rewritten whole at every flush. TensorBoard writes one uniquely named
event file per session into the run's scratch folder, and each flush publishes it whole into
``tensorboard/`` (nothing in the run folder is appended to). Without ``tensorboard`` (the
``train`` extra) a run warns once and writes the rest; without ``matplotlib`` it writes no plots.
MFU counts real tokens against the peak of the GPUs in :data:`PEAK_TFLOPS`.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import tempfile

import fsspec

from schemas.files import write_file
from schemas.inputs import field, lines, loads, read_bytes

log = logging.getLogger("pretrain")
MAX_METRICS_BYTES = 1 << 30  # metrics.jsonl read back on resume (a record a step: 1M steps, ~1 GB)
TENSORBOARD_MISSING = (
    "tensorboard is not installed: metrics go to metrics.jsonl and plots/ only, no TensorBoard "
    "events (pip install 'bert-pretraining[train]' adds it)"
)

# Dense tensor-core peak TFLOP/s per GPU: (bf16/fp16, tf32) from the vendors' data sheets (SXM parts).
PEAK_TFLOPS = {"H200": (989.0, 494.0), "H100": (989.0, 494.0), "A100": (312.0, 156.0), "L40S": (362.0, 183.0)}
PEAK_TFLOPS |= {
    "L4": (121.0, 60.0),
    "A10": (125.0, 62.5),
    "V100": (125.0, 15.7),
    "T4": (65.0, 8.1),
}  # after L40S


def peak_flops(device_name: str, precision: str) -> float | None:
    """Peak FLOP/s of a known GPU (matched by name) for a precision, else None."""
    for key, (half, tf32) in PEAK_TFLOPS.items():
        if key in device_name.upper():
            return (tf32 if precision == "fp32" else half) * 1e12
    return None


class MetricsLog:
    """Rank 0's metrics under the run folder; ``scratch``: the run's temporary folder (None: the
    log makes its own and removes it in :meth:`close`)."""

    def __init__(self, output: str, resume_step: int | None, scratch: str | None = None) -> None:
        self.output = output.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.output)
        self.local = isinstance(self.fs, fsspec.implementations.local.LocalFileSystem)
        self.records: list[dict] = []
        path = f"{self.root}/metrics.jsonl"
        if resume_step is not None and self.fs.exists(path):
            with self.fs.open(path, "rb") as f:  # whole (a bucket file's readline takes no limit)
                data = io.BytesIO(read_bytes(f, path, MAX_METRICS_BYTES))
                for number, line in enumerate(lines(data, path), 1):
                    where = f"{self.output}/metrics.jsonl line {number}"
                    record = loads(line, where) if line.strip() else None
                    if record is not None and field(record, "step", int, where) <= resume_step:
                        self.records.append(record)
        self._own_scratch = scratch is None
        self.scratch = tempfile.mkdtemp(prefix="pretrain-run-") if scratch is None else scratch
        self.board_dir = os.path.join(self.scratch, "tensorboard")
        self._writer = None
        self._resume_step = resume_step
        self._closed = False
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            self.tensorboard = False
        else:
            self.tensorboard = True
        if not self.tensorboard:
            log.warning(TENSORBOARD_MISSING)

    def _board(self):
        if not self.tensorboard:
            return None
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if self._resume_step is None else self._resume_step + 1
            self._writer = SummaryWriter(self.board_dir, purge_step=purge)
        return self._writer

    def log(self, record: dict) -> None:
        self.records.append(record)
        split, step = record.get("split", "train"), record["step"]
        board = self._board()
        if board is None:
            return
        for key, value in record.items():
            if key not in ("step", "split") and isinstance(value, (int, float)):
                board.add_scalar(f"{split}/{key}", value, step)

    def flush(self) -> None:
        """Write metrics.jsonl and publish the TensorBoard events."""
        self._write_records()
        if self._writer is not None:
            self._writer.flush()
            self._upload_events()

    def close(self) -> None:
        """Write everything out and close TensorBoard (and a scratch folder of the log's own).

        Safe to call again (a failed run closes its log on the way out): the writer is closed
        before the events are published, since its last events reach the scratch folder only then.
        """
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._write_records()
        self._upload_events()
        if self._own_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _write_records(self) -> None:
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records)
        write_file(f"{self.root}/metrics.jsonl", text, self.fs)  # whole, never a truncated file

    def _upload_events(self) -> None:
        """Publish this session's TensorBoard event files whole into the run folder."""
        if os.path.isdir(self.board_dir):
            for name in sorted(os.listdir(self.board_dir)):
                with open(os.path.join(self.board_dir, name), "rb") as f:
                    write_file(f"{self.root}/tensorboard/{name}", f.read(), self.fs)

    def plot(self) -> list[str]:
        """PNG curves of the run (train loss, accuracies, learning rate; validation) in ``plots/``;
        none (with a warning) without matplotlib."""
        try:
            import matplotlib
        except ImportError:
            log.warning(
                "matplotlib is not installed: no plots in %s/plots (metrics.jsonl has them)", self.output
            )
            return []

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        panels = {  # title: the "split key" series it draws
            "loss": ["train loss", "train mlm_loss", "train nsp_loss", "validation mlm_loss"],
            "accuracy": [
                "train mlm_accuracy",
                "train nsp_accuracy",
                "validation mlm_accuracy",
                "validation nsp_accuracy",
            ],
            "learning rate": ["train lr"],
            "throughput (tokens/s)": ["train tokens_per_s"],
        }
        figure, axes = plt.subplots(2, 2, figsize=(11, 7))
        for axis, (title, series) in zip(axes.flat, panels.items(), strict=True):
            for name in series:
                split, key = name.split()
                points = [(r["step"], r[key]) for r in self.records if r.get("split") == split and key in r]
                if points:
                    axis.plot(
                        *zip(*points, strict=True), label=name, marker="." if len(points) < 30 else None
                    )
            axis.set_title(title)
            axis.set_xlabel("step")
            if axis.lines:
                axis.legend(fontsize=8)
        figure.tight_layout()
        target = f"{self.root}/plots/curves.png"
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
        plt.close(figure)
        write_file(target, buffer.getvalue(), self.fs)
        return [target]
