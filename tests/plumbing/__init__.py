"""What the tests stand on, not tests themselves: see tests/README.md.

The root conftest.py puts ``tests/`` on ``sys.path``, so each module here is
``plumbing.<name>``: ``nbval_unix_sockets`` is a pytest plugin (the root
conftest.py registers it in ``pytest_plugins``); the others are libraries
that the conftest files and the tests import. None of them imports torch or
ddp_lab, so the root conftest.py loads them before anything heavy.
"""
