"""The CPU stage: pure preprocessing (text.py) and its faust wiring (app.py)."""
