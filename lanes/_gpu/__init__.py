"""Shared GPU plumbing: portability header, runner ABI, detection, build and ctypes runner.

See notes/GPU_CONTRACT.md. Lanes import the submodules they need (detect, build, runner).
"""
