"""`pipelines examples`: masked, NSP-paired pre-training examples (in progress: masking so far)."""
