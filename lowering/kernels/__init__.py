"""Kernels: Cuvil ops a target runs on kernels of its own (targets/cuda_kernels.py), claimed before lowering."""
