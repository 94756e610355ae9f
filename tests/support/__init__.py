"""Everything a test imports that is not a test: helper modules and fixture modules.

One rule for tests/: a test module is `test_*.py` beside a `conftest.py` or `__init__.py`; any
other module lives here (tests/support/deploy/ for the manifest checks), and no test module imports
another (tests/test_layout.py). Fixture modules (fixtures.py) are loaded by tests/conftest.py.
"""
