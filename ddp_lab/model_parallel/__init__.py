"""model_parallel."""
