"""Dockerfile analysis, CUDA/PyTorch compatibility data, and the fixes the build loop applies."""
