"""Hides python3-msgpack: `make test-python` runs the Python unit tests a
second time with this directory first on PYTHONPATH, as in an environment
built for Triton (numpy, no msgpack), so the stub's own codec
(stubvisor.minimsgpack) carries every message."""

raise ImportError("msgpack is hidden for this test run")
