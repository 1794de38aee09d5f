"""``pipelines examples``: masked, NSP-paired (or packed) pre-training examples."""
