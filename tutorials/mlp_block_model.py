"""A small transformer-style block as a Relax model, for ``python -m tvm_ext.tune --model``:
attention-score batch_matmuls (Q K^T, P V) and an MLP (dense -> gelu-free relu -> dense).

    python -m tvm_ext.tune --model tutorials/mlp_block_model.py --target llvm --trials 64
"""
from tvm import relax
from tvm.script import relax as R

HEADS, SEQ, DIM, HIDDEN = 4, 64, 32, 256


def get_model(heads=HEADS, seq=SEQ, dim=DIM, hidden=HIDDEN):
    bb = relax.BlockBuilder()
    q = relax.Var("q", R.Tensor((heads, seq, dim), "float32"))
    k = relax.Var("k", R.Tensor((heads, seq, dim), "float32"))
    v = relax.Var("v", R.Tensor((heads, seq, dim), "float32"))
    x = relax.Var("x", R.Tensor((seq, heads * dim), "float32"))
    w1 = relax.Var("w1", R.Tensor((heads * dim, hidden), "float32"))
    w2 = relax.Var("w2", R.Tensor((hidden, heads * dim), "float32"))
    with bb.function("main", [q, k, v, x, w1, w2]):
        with bb.dataflow():
            scores = bb.emit(R.matmul(q, R.permute_dims(k, [0, 2, 1])))   # batch_matmul
            probs = bb.emit(R.nn.softmax(scores, axis=-1))
            ctx = bb.emit(R.matmul(probs, v))                             # batch_matmul
            h = bb.emit(R.nn.relu(R.matmul(x, w1)))                       # dense (MLP up)
            y = bb.emit(R.matmul(h, w2))                                  # dense (MLP down)
            out = bb.emit_output(relax.Tuple([ctx, y]))
        bb.emit_func_output(out)
    return bb.get()
