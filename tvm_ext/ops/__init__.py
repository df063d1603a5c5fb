"""The templates, one module (or package) per family. Each defines its templates as module
constants; ``tvm_ext.strategy`` lists them. Nothing registers itself at import.

- ``common``: the plain matmul compute, block names, factor helpers
- ``x86_gemm``: batch_matmul.x86, dense_pack.x86 (packed CPU GEMM)
- ``cuda_simt``: batch_matmul.cuda, dense_large_batch.cuda, dense_small_batch.cuda
- ``cuda_sgemm``: *_sgemm.cuda (f32, CUTLASS's SGEMM written out)
- ``cuda_tensorcore``: *_tensorcore.cuda (wmma), *_mma.cuda (mma.sync)
- ``cuda_mma_direct``: *_mma_direct.cuda (mma.sync on operands loaded straight into registers)
- ``cuda_wgmma``: *_wgmma.cuda (Hopper, cp.async ring)
- ``cuda_wgmma_ws``: *_wgmma_ws.cuda (Hopper, TMA, warp-specialised, persistent)
"""
