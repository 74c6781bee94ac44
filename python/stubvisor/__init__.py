"""stubvisor's Python stub: runs a Triton Python-backend model.py in a
process supervised by the stubvisor server. The package is imported by the
stub (python -m stubvisor); ipc is the shared-memory wire to the supervisor.

Nothing is imported here, so that importing a submodule stays cheap.
"""
