"""The Triton kernels of the triton lane: fixed templates whose region-specific behaviour is
chosen by constexpr arguments, so no text from a region or a spec file ever becomes source.

- `fused_matmul`: prologue(A) @ B by tiled `tl.dot` (f32 accumulator), then the epilogue chain,
  the residual and, when the row fits the tile (`FUSE_ROW`), the row reduction.
- `gated_matmul`: act(A @ Wg + bias_g) * (A @ Wu + bias_u), both products from one A tile.
- `rowwise`: the chain and reduction over rows; a row in one tile, or in column chunks (two or
  three passes over the row) when it does not fit.
- `attention`: flash-attention forward (online softmax over key blocks), causal by offset.

A chain of ops is an integer: op i in bits 3i..3i+2 (`OPS` codes), its length beside it.
Everything is computed in float32; loads widen, stores round to the output's dtype once.
Under `TRITON_INTERPRET=1` (set before triton is first imported) the same functions run in
Triton's interpreter. (No `from __future__ import annotations`: Triton reads the constexpr
annotations as objects.)
"""

import triton
import triton.language as tl

BIAS = tl.constexpr(1)
RELU = tl.constexpr(2)
GELU = tl.constexpr(3)
SILU = tl.constexpr(4)
SIGMOID = tl.constexpr(5)
TANH = tl.constexpr(6)
SOFTMAX = tl.constexpr(1)
RMSNORM = tl.constexpr(2)
LAYER_NORM = tl.constexpr(3)


@triton.jit
def _tanh(x):
    # from exp(-2|x|) <= 1: no overflow at any x
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0.0, -t, t)


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _pointwise(x, OP: tl.constexpr):
    if OP == RELU:
        x = tl.maximum(x, 0.0)
    elif OP == GELU:
        x = 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    elif OP == SILU:
        x = x * _sigmoid(x)
    elif OP == SIGMOID:
        x = _sigmoid(x)
    elif OP == TANH:
        x = _tanh(x)
    return x


@triton.jit
def _prologue(a, CHAIN: tl.constexpr, LENGTH: tl.constexpr):
    for i in tl.static_range(LENGTH):
        a = _pointwise(a, (CHAIN >> (3 * i)) & 7)
    return a


@triton.jit
def _chain(x, rows, cols, mask, N, bias_ptr, res_ptr, CHAIN: tl.constexpr,
           LENGTH: tl.constexpr, RESIDUAL: tl.constexpr):
    """The epilogue chain then the residual, on a float32 tile of rows x cols."""
    for i in tl.static_range(LENGTH):
        if ((CHAIN >> (3 * i)) & 7) == BIAS:
            b = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
            x = x + b.to(tl.float32)[None, :]
        else:
            x = _pointwise(x, (CHAIN >> (3 * i)) & 7)
    if RESIDUAL:
        offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
        x = x + tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    return x


@triton.jit
def _reduce_tile(x, colmask, N, eps, REDUCTION: tl.constexpr):
    """The row reduction of a tile that holds whole rows (columns past N masked out)."""
    if REDUCTION == SOFTMAX:
        x = tl.where(colmask[None, :], x, float("-inf"))
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        x = e / tl.sum(e, axis=1)[:, None]
    elif REDUCTION == RMSNORM:
        z = tl.where(colmask[None, :], x, 0.0)
        x = x * tl.rsqrt(tl.sum(z * z, axis=1) / N + eps)[:, None]
    elif REDUCTION == LAYER_NORM:
        mean = tl.sum(tl.where(colmask[None, :], x, 0.0), axis=1) / N
        d = tl.where(colmask[None, :], x - mean[:, None], 0.0)
        x = d * tl.rsqrt(tl.sum(d * d, axis=1) / N + eps)[:, None]
    return x


@triton.jit
def _dot(a, b, acc, DOT: tl.constexpr):
    """acc + a @ b: "native" for 16-bit operands, else float32 operands as `ieee` (exact
    products) or `tf32`, or rounded to f16 first (tensor cores where f32 has none: gfx11)."""
    if DOT == "f16":
        acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc)
    elif DOT == "widen":  # (Triton's interpreter multiplies bf16 operands as integers)
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    elif DOT == "tf32":
        acc = tl.dot(a, b, acc, input_precision="tf32")
    elif DOT == "ieee":
        acc = tl.dot(a, b, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row tile, column tile) of this program, GROUP_M row tiles walked together so the
    B column tiles they share stay in L2."""
    pid = tl.program_id(0)
    tiles_m = (M + BLOCK_M - 1) // BLOCK_M
    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    in_group = GROUP_M * tiles_n
    first_m = (pid // in_group) * GROUP_M
    rows_here = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (pid % in_group) % rows_here, (pid % in_group) // rows_here


@triton.jit
def _a_tile(a_ptr, rm, kk, M, K, EVEN_K: tl.constexpr, PROLOGUE: tl.constexpr,
            PRO_LEN: tl.constexpr):
    """A[rm, kk] (rows wrapped into range, so only K needs a mask), prologue applied in f32
    and zero past K (where the prologue of the padding would not be)."""
    offs = (rm % M).to(tl.int64)[:, None] * K + kk[None, :]
    if EVEN_K:
        a = tl.load(a_ptr + offs)
    else:
        a = tl.load(a_ptr + offs, mask=kk[None, :] < K, other=0.0)
    if PRO_LEN > 0:
        p = _prologue(a.to(tl.float32), PROLOGUE, PRO_LEN)
        a = tl.where(kk[None, :] < K, p, 0.0).to(a.dtype)
    return a


@triton.jit
def _b_tile(b_ptr, kk, rn, N, K, EVEN_K: tl.constexpr):
    offs = kk.to(tl.int64)[:, None] * N + (rn % N)[None, :]
    if EVEN_K:
        return tl.load(b_ptr + offs)
    return tl.load(b_ptr + offs, mask=kk[:, None] < K, other=0.0)


@triton.jit
def fused_matmul(a_ptr, b_ptr, bias_ptr, res_ptr, out_ptr, M, N, K, eps,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, DOT: tl.constexpr,
                 PROLOGUE: tl.constexpr, PRO_LEN: tl.constexpr, EPILOGUE: tl.constexpr,
                 EPI_LEN: tl.constexpr, RESIDUAL: tl.constexpr, REDUCTION: tl.constexpr,
                 FUSE_ROW: tl.constexpr):
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = _a_tile(a_ptr, rm, k0 + rk, M, K, EVEN_K, PROLOGUE, PRO_LEN)
        acc = _dot(a, _b_tile(b_ptr, k0 + rk, rn, N, K, EVEN_K), acc, DOT)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    x = _chain(acc, rm, rn, mask, N, bias_ptr, res_ptr, EPILOGUE, EPI_LEN, RESIDUAL)
    if FUSE_ROW:
        x = _reduce_tile(x, rn < N, N, eps, REDUCTION)
    offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
    tl.store(out_ptr + offs, x.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gated_matmul(a_ptr, wg_ptr, wu_ptr, bg_ptr, bu_ptr, out_ptr, M, N, K,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, DOT: tl.constexpr,
                 ACTIVATION: tl.constexpr, HAS_BIAS: tl.constexpr):
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = _a_tile(a_ptr, rm, k0 + rk, M, K, EVEN_K, 0, 0)
        gate = _dot(a, _b_tile(wg_ptr, k0 + rk, rn, N, K, EVEN_K), gate, DOT)
        up = _dot(a, _b_tile(wu_ptr, k0 + rk, rn, N, K, EVEN_K), up, DOT)
    if HAS_BIAS:
        gate = gate + tl.load(bg_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        up = up + tl.load(bu_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    x = _pointwise(gate, ACTIVATION) * up
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
    tl.store(out_ptr + offs, x.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _row_chunk(x_ptr, bias_ptr, res_ptr, rows, cols, M, N, CHAIN: tl.constexpr,
               LENGTH: tl.constexpr, RESIDUAL: tl.constexpr):
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    return _chain(x, rows, cols, mask, N, bias_ptr, res_ptr, CHAIN, LENGTH, RESIDUAL), mask, offs


@triton.jit
def rowwise(x_ptr, bias_ptr, res_ptr, out_ptr, M, N, eps,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_TILE: tl.constexpr,
            EPILOGUE: tl.constexpr, EPI_LEN: tl.constexpr, RESIDUAL: tl.constexpr,
            REDUCTION: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    if ONE_TILE or REDUCTION == 0:
        for n0 in range(0, N, BLOCK_N):
            x, mask, offs = _row_chunk(x_ptr, bias_ptr, res_ptr, rows, n0 + cols, M, N,
                                       EPILOGUE, EPI_LEN, RESIDUAL)
            if REDUCTION != 0:
                x = _reduce_tile(x, n0 + cols < N, N, eps, REDUCTION)
            tl.store(out_ptr + offs, x.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        # the row in chunks: its statistics first, then a pass that writes
        big = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        total = tl.zeros((BLOCK_M,), tl.float32)
        mean = tl.zeros((BLOCK_M,), tl.float32)
        if REDUCTION == LAYER_NORM:
            for n0 in range(0, N, BLOCK_N):
                x, mask, offs = _row_chunk(x_ptr, bias_ptr, res_ptr, rows, n0 + cols, M, N,
                                           EPILOGUE, EPI_LEN, RESIDUAL)
                mean += tl.sum(tl.where(mask, x, 0.0), axis=1)
            mean = mean / N
        for n0 in range(0, N, BLOCK_N):
            x, mask, offs = _row_chunk(x_ptr, bias_ptr, res_ptr, rows, n0 + cols, M, N,
                                       EPILOGUE, EPI_LEN, RESIDUAL)
            if REDUCTION == SOFTMAX:
                m = tl.maximum(big, tl.max(tl.where(mask, x, float("-inf")), axis=1))
                e = tl.where(mask, tl.exp(x - m[:, None]), 0.0)
                total = total * tl.exp(big - m) + tl.sum(e, axis=1)
                big = m
            else:
                d = tl.where(mask, x - mean[:, None], 0.0)
                total += tl.sum(d * d, axis=1)
        scale = 1.0 / total
        if REDUCTION != SOFTMAX:
            scale = tl.rsqrt(total / N + eps)
        for n0 in range(0, N, BLOCK_N):
            x, mask, offs = _row_chunk(x_ptr, bias_ptr, res_ptr, rows, n0 + cols, M, N,
                                       EPILOGUE, EPI_LEN, RESIDUAL)
            if REDUCTION == SOFTMAX:
                x = tl.exp(x - big[:, None]) * scale[:, None]
            else:
                x = (x - mean[:, None]) * scale[:, None]
            tl.store(out_ptr + offs, x.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def attention(q_ptr, k_ptr, v_ptr, o_ptr, seq_q, seq_k, causal_offset, qk_scale,
              HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, DOT: tl.constexpr):
    """One (batch x head, query block): key j visible to query i iff j < seq_k and, causal,
    j <= i + causal_offset. `qk_scale` is the softmax scale times log2(e) (exp2 below). A
    query that sees no key writes zeros."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1).to(tl.int64)
    d = tl.arange(0, D_PAD)
    q_offs = bh * seq_q * HEAD_DIM + rm[:, None] * HEAD_DIM + d[None, :]
    q_mask = (rm < seq_q)[:, None] & (d < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + q_offs, mask=q_mask, other=0.0)
    kv_base = bh * seq_k * HEAD_DIM
    best = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D_PAD), tl.float32)
    end = seq_k
    if CAUSAL:
        end = tl.minimum(seq_k, tl.program_id(0) * BLOCK_M + BLOCK_M + causal_offset)
    for n0 in range(0, end, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        kv_offs = kv_base + rn[:, None] * HEAD_DIM + d[None, :]
        kv_mask = (rn < seq_k)[:, None] & (d < HEAD_DIM)[None, :]
        k = tl.load(k_ptr + kv_offs, mask=kv_mask, other=0.0)
        s = _dot(q, tl.trans(k), tl.zeros((BLOCK_M, BLOCK_N), tl.float32), DOT) * qk_scale
        visible = (rn < seq_k)[None, :]
        if CAUSAL:
            visible = visible & (rn[None, :] <= rm[:, None] + causal_offset)
        s = tl.where(visible, s, float("-inf"))
        top = tl.maximum(best, tl.max(s, axis=1))
        shift = tl.where(top == float("-inf"), 0.0, top)  # a row with no key yet
        p = tl.exp2(s - shift[:, None])
        alpha = tl.exp2(best - shift)
        total = total * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + kv_offs, mask=kv_mask, other=0.0)
        acc = _dot(p.to(v.dtype), v, acc * alpha[:, None], DOT)
        best = top
    out = acc / tl.where(total == 0.0, 1.0, total)[:, None]
    tl.store(o_ptr + q_offs, out.to(o_ptr.dtype.element_ty), mask=q_mask)
