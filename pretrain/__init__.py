"""The BERT pre-training trainer (PyTorch, CUDA AMP, torchrun)."""
