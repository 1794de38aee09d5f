"""Training metrics on rank 0: ``metrics.jsonl``, TensorBoard events, MFU, and PNG curves at the
end of a run. On resume, records after the checkpoint's step are dropped. Nothing in the run folder
is appended to: ``metrics.jsonl`` is rewritten whole at every flush, and each session's TensorBoard
event file is written in a temporary folder and published whole.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import os
import shutil
import tempfile

from schemas import storage
from schemas.inputs import field, lines, loads

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
    """Rank 0's metrics under the run folder."""

    def __init__(self, out: storage.Folder, resume_step: int | None) -> None:
        self.out, self.output, self.local = out, out.url, storage.is_local(out.url)
        self.records: list[dict] = []
        path = out.path("metrics.jsonl")
        if resume_step is not None and storage.exists(path):
            data = io.BytesIO(
                storage.read_bytes(path, MAX_METRICS_BYTES)
            )  # whole: a bucket file's readline takes no limit
            for number, line in enumerate(lines(data, path), 1):
                where = f"{self.output}/metrics.jsonl line {number}"
                record = loads(line, where) if line.strip() else None
                if record is not None and field(record, "step", int, where) <= resume_step:
                    self.records.append(record)
        self.board_dir: str | None = None  # the event files' local folder, made with the writer
        self._writer = None
        self._resume_step = resume_step
        self._closed = False
        self.tensorboard = importlib.util.find_spec("tensorboard") is not None
        if not self.tensorboard:
            log.warning(TENSORBOARD_MISSING)

    def _board(self):
        if not self.tensorboard:
            return None
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if self._resume_step is None else self._resume_step + 1
            self.board_dir = tempfile.mkdtemp(prefix="pretrain-tensorboard-")
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
        """Write everything out and close TensorBoard; safe to call again. The writer is closed
        before the events are published: its last events reach its folder only then."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._write_records()
        self._upload_events()
        if self.board_dir is not None:
            shutil.rmtree(self.board_dir, ignore_errors=True)

    def _write_records(self) -> None:
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records)
        self.out.write("metrics.jsonl", text)  # whole, never a truncated file

    def _upload_events(self) -> None:
        """Publish this session's TensorBoard event files whole into the run folder."""
        if self.board_dir is not None:
            for name in sorted(os.listdir(self.board_dir)):
                with open(os.path.join(self.board_dir, name), "rb") as f:
                    self.out.write(f"tensorboard/{name}", f.read())

    def plot(self) -> list[str]:
        """PNG curves of the run in ``plots/``; none (with a warning) without matplotlib."""
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
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
        plt.close(figure)
        self.out.write("plots/curves.png", buffer.getvalue())
        return [self.out.path("plots/curves.png")]
