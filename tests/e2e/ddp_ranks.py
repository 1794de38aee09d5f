"""``pretrain`` under torchrun, observed from outside the trainer: each rank writes a digest of the
weights it ends with and of every example it trained on to ``REPORT/rank<N>.json``.

    torchrun --nproc_per_node 2 tests/e2e/ddp_ranks.py REPORT PRETRAIN-ARGS...
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path


def main(report: Path, args: list[str]) -> None:
    from pretrain import train
    from pretrain.cli import main as pretrain

    seen: list[str] = []
    weigh, finish = train.Trainer._loss_weights, train.Trainer._finish

    def loss_weights(self, micro):  # called once a step with its micro batches
        for batch in micro:
            host = batch.host  # padded batches: each example's real tokens and its masked positions
            for ids, mask, positions in zip(
                host["input_ids"], host["attention_mask"], host["masked_lm_positions"], strict=True
            ):
                digest = hashlib.sha256(ids[mask.bool()].numpy().tobytes() + positions.numpy().tobytes())
                seen.append(digest.hexdigest())
        return weigh(self, micro)

    def finished(self):
        finish(self)
        digest = hashlib.sha256()
        for name, tensor in sorted(self.model.state_dict().items()):
            digest.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
        rank = self.procs.rank
        record = {"rank": rank, "weights_sha256": digest.hexdigest(), "examples": seen}
        (report / f"rank{rank}.json").write_text(json.dumps(record))

    train.Trainer._loss_weights, train.Trainer._finish = loss_weights, finished
    report.mkdir(parents=True, exist_ok=True)
    pretrain(args, prog_name="pretrain")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.chdir(Path(__file__).resolve().parents[2])
    main(Path(sys.argv[1]), sys.argv[2:])
