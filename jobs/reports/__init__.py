"""What a finished job looked like: stage timings and their percentiles (profile.py), the
self-contained HTML report (report.py) and its plots (plots.py).

Reads what the stages stamped on each result; never talks to Kafka itself (results/outcome.py reads).
"""
