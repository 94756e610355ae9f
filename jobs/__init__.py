"""The control plane and the `nearline` CLI: submit, run, results, workers, broker, models."""
