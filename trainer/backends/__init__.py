"""Policy-update backends: :mod:`trainer.backends.local` (transformers, CPU or one GPU)."""
