"""Benchmarks that print figures (never assert them): each module's docstring says how to run it
and what it measures. What does not belong here: tests (tests/) and anything the product needs."""
