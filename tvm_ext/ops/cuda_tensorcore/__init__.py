"""Tensor-core templates for sm_80+: ``*_tensorcore.cuda`` (wmma, TOPI's knobs; ``wmma.py``) and
``*_mma.cuda`` (ldmatrix + mma.sync with a cp.async pipeline and split-K; ``mma.py``).

Both schedule the plain matmul of ``common.matmul_compute`` (the same PrimFunc Relax and
MetaSchedule see) on the tiling of ``tiling.py``; ``fallback.py`` says when they apply and what
they do untuned; ``intrin.py`` loads TVM's CUDA tensor intrinsics lazily.

Unaligned shapes: M, N, K are padded up to the block tile (``pad_einsum``); the pad is computed
inside the shared-memory loads (zeros outside the tensor) and the crop inside the write-back, so
no extra kernel or buffer is needed. Spaces keep the padded flops <= 2x the real ones.
"""
from .mma import BATCH_MATMUL_MMA, DENSE_MMA
from .wmma import BATCH_MATMUL_TENSORCORE, DENSE_TENSORCORE

TEMPLATES = (DENSE_TENSORCORE, BATCH_MATMUL_TENSORCORE, DENSE_MMA, BATCH_MATMUL_MMA)
