"""`pipelines examples`: masked, NSP-paired pre-training examples.

In progress: the pure parts (``pairs.py``: pair planning, random-B fulfilment, truncation;
``masking.py``: masked-LM selection) are built and tested; the Beam graph, shard writing and
the command come next.
"""
