"""`python -m jobs.cli`: what the `nearline` script runs."""

from jobs.cli.main import main

main()
