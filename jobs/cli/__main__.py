"""`python -m jobs.cli`: what the `nearline` script runs."""

from jobs.cli.main import main

if __name__ == "__main__":  # not again in a process spawned from this one (vLLM's engine core)
    main()
