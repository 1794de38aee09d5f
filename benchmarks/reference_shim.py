"""Run google-research/bert's own create_pretraining_data.py (bert-tensorflow 1.0.4) unmodified.

Runs inside the separate reference venv (tensorflow-cpu + bert-tensorflow==1.0.4). The shim:
the 2020 release is written for TensorFlow 1, so ``tensorflow`` is aliased to
``tensorflow.compat.v1`` before the module is imported. ``stats FILE VOCAB`` instead reads the
TFRecord output back and prints the statistics as JSON.
"""

import json
import sys

import tensorflow.compat.v1 as tf

sys.modules["tensorflow"] = tf  # the shim: TF1 names (tf.flags, tf.gfile, tf.python_io, tf.app)


def stats(path: str, vocab: str) -> dict:
    """Examples, random-next share, masked share and the 80/10/10 split of a TFRecord output."""
    mask_id = [line.rstrip("\n") for line in open(vocab, encoding="utf-8")].index("[MASK]")
    n = random_next = tokens = masked = as_mask = unchanged = 0
    for record in tf.io.tf_record_iterator(path):
        f = tf.train.Example.FromString(record).features.feature
        ids = f["input_ids"].int64_list.value
        positions = f["masked_lm_positions"].int64_list.value
        originals = f["masked_lm_ids"].int64_list.value
        weights = f["masked_lm_weights"].float_list.value
        n += 1
        random_next += f["next_sentence_labels"].int64_list.value[0]
        tokens += sum(1 for i in f["input_mask"].int64_list.value if i)
        for pos, orig, w in zip(positions, originals, weights, strict=True):
            if w == 0:
                continue
            masked += 1
            as_mask += ids[pos] == mask_id
            unchanged += ids[pos] == orig
    return {
        "examples": n,
        "tokens": tokens,
        "random_next_rate": random_next / max(1, n),
        "mask_rate": masked / max(1, tokens),
        "masked_share_mask": as_mask / max(1, masked),
        "masked_share_unchanged": unchanged / max(1, masked),
        "masked_share_random": (masked - as_mask - unchanged) / max(1, masked),
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["stats"]:
        print(json.dumps(stats(sys.argv[2], sys.argv[3])))
    else:
        tf.disable_v2_behavior()
        from bert import create_pretraining_data

        tf.app.run(main=create_pretraining_data.main)
