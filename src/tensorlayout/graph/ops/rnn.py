"""The recurrent layers: LSTM, GRU and RNN, forward, reverse or bidirectional, with their
optional inputs (bias, sequence lengths, initial states, LSTM's peepholes), activations,
clip and both layouts.  The input projections of all time steps are one matrix product;
the recurrence then runs step by step, in float64, and the outputs are given in the
input's type."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import register

__all__ = ["Recurrent", "RNN_ACTIVATIONS"]

#: Activations the recurrent ops take, with their default alpha and beta.
RNN_ACTIVATIONS = {"Relu": (None, None), "Tanh": (None, None), "Sigmoid": (None, None),
                   "Affine": (1.0, 0.0), "LeakyRelu": (0.01, None),
                   "ThresholdedRelu": (1.0, None), "ScaledTanh": (1.0, 1.0),
                   "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None), "Softsign": (None, None),
                   "Softplus": (None, None)}

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                 "RNN": ("Tanh",)}


@dataclass(frozen=True)
class Recurrent:
    """An LSTM, GRU or RNN layer: ``hidden`` units, ``directions`` (``reverse``: the one
    direction runs backwards), ``acts``: (name, alpha, beta) per activation, per direction;
    ``clip`` (None: none); ``batch_first``: layout 1; LSTM's ``input_forget``, GRU's
    ``linear_before_reset``."""

    hidden: int
    directions: int
    reverse: bool
    acts: tuple
    clip: float | None
    batch_first: bool
    input_forget: bool = False
    linear_before_reset: bool = False


def _parse_recurrent(ctx):
    op = ctx.op
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        ctx.fail(f"direction = {direction!r} is not allowed: forward, reverse or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    w = ctx.shape(1, 3, "W")
    hidden = int(ctx.attr("hidden_size", w[1] // _GATES[op]))
    if w[0] != dirs or w[1] != _GATES[op] * hidden:
        ctx.fail(f"W has shape {w}: {dirs} direction(s) of {_GATES[op]} x {hidden} rows are needed")
    names = ctx.attr("activations")
    names = list(_DEFAULT_ACTS[op]) * dirs if names is None else list(names)
    per_dir = len(_DEFAULT_ACTS[op])
    if len(names) != per_dir * dirs:
        ctx.fail(f"activations = {names}: {op} takes {per_dir} per direction ({dirs})")
    alphas = list(ctx.attr("activation_alpha", []) or [])
    betas = list(ctx.attr("activation_beta", []) or [])
    acts = []
    for name in names:
        if name not in RNN_ACTIVATIONS:
            ctx.fail(f"activation {name!r} is not supported: one of "
                     + ", ".join(RNN_ACTIVATIONS))
        da, db = RNN_ACTIVATIONS[name]
        a = float(alphas.pop(0)) if da is not None and alphas else da
        b = float(betas.pop(0)) if db is not None and betas else db
        acts.append((name, a, b))
    acts = tuple(tuple(acts[d * per_dir:(d + 1) * per_dir]) for d in range(dirs))
    clip = ctx.attr("clip")
    return Recurrent(hidden, dirs, direction == "reverse", acts,
                     None if clip is None else float(clip), bool(ctx.attr("layout", 0)),
                     bool(ctx.attr("input_forget", 0)), bool(ctx.attr("linear_before_reset", 0)))


def _activation(name, a, b):
    if name == "Relu":
        return lambda x: np.maximum(x, 0)
    if name == "Tanh":
        return np.tanh
    if name == "Sigmoid":
        return lambda x: 1 / (1 + np.exp(-x))
    if name == "Affine":
        return lambda x: a * x + b
    if name == "LeakyRelu":
        return lambda x: np.where(x >= 0, x, a * x)
    if name == "ThresholdedRelu":
        return lambda x: np.where(x > a, x, 0.0)
    if name == "ScaledTanh":
        return lambda x: a * np.tanh(b * x)
    if name == "HardSigmoid":
        return lambda x: np.clip(a * x + b, 0, 1)
    if name == "Elu":
        return lambda x: np.where(x >= 0, x, a * np.expm1(x))
    if name == "Softsign":
        return lambda x: x / (1 + np.abs(x))
    return lambda x: np.logaddexp(0, x)     # Softplus


def _run_direction(op, p, acts, xs, w, r, b, h0, c0, peep, lens, backwards):
    """One direction over xs (seq, batch, input): (Y (seq, batch, hidden), h, c)."""
    seq, batch, _ = xs.shape
    H = p.hidden
    fns = [_activation(*a) for a in acts]
    clip = (lambda v: np.clip(v, -p.clip, p.clip)) if p.clip is not None else (lambda v: v)
    gates = w.shape[0]
    if b is None:
        b = np.zeros(2 * gates)
    wb, rb = b[:gates], b[gates:]
    proj = xs @ w.T + wb                                # (seq, batch, gates * H)
    h = h0.copy()
    c = c0.copy() if c0 is not None else None
    y = np.zeros((seq, batch, H))
    steps = range(seq - 1, -1, -1) if backwards else range(seq)
    for t in steps:
        live = (t < lens)[:, None]
        if backwards:                     # each sequence runs backwards from its own end
            src = np.clip(lens - 1 - (seq - 1 - t), 0, seq - 1)
            live = ((seq - 1 - t) < lens)[:, None]
            gx = proj[src, np.arange(batch)]
        else:
            gx = proj[t]
        if op == "LSTM":
            g = gx + h @ r.T + rb
            i, o, f, cc = (g[:, k * H:(k + 1) * H] for k in range(4))
            pi, po, pf = (peep[k * H:(k + 1) * H] for k in range(3))
            i = fns[0](clip(i + pi * c))
            f = 1 - i if p.input_forget else fns[0](clip(f + pf * c))
            cc = fns[1](clip(cc))
            c_new = f * c + i * cc
            o = fns[0](clip(o + po * c_new))
            h_new = o * fns[2](c_new)
            c = np.where(live, c_new, c)
        elif op == "GRU":
            rh = h @ r[:2 * H].T + rb[:2 * H]
            z = fns[0](clip(gx[:, :H] + rh[:, :H]))
            rr = fns[0](clip(gx[:, H:2 * H] + rh[:, H:]))
            if p.linear_before_reset:
                hh = gx[:, 2 * H:] + rr * (h @ r[2 * H:].T + rb[2 * H:])
            else:
                hh = gx[:, 2 * H:] + (rr * h) @ r[2 * H:].T + rb[2 * H:]
            hh = fns[1](clip(hh))
            h_new = (1 - z) * hh + z * h
        else:
            h_new = fns[0](clip(gx + h @ r.T + rb))
        h = np.where(live, h_new, h)
        out_t = np.where(live, h_new, 0.0)
        if backwards:
            y[src[live[:, 0]], np.arange(batch)[live[:, 0]]] = out_t[live[:, 0]]
        else:
            y[t] = out_t
    # a sequence of no steps has no last state: 0, as onnxruntime gives
    empty = (lens == 0)[:, None]
    return y, np.where(empty, 0.0, h), None if c is None else np.where(empty, 0.0, c)


def _recurrent_kernel(node, ctx):
    p = node.params
    op = node.op
    H = p.hidden

    def get(inputs, i):
        return inputs[i] if i < len(inputs) and inputs[i] is not None else None

    def run(inputs, out=None):
        x = inputs[0]
        xs = np.swapaxes(x, 0, 1) if p.batch_first else x
        xs = xs.astype(np.float64)
        seq, batch = xs.shape[:2]
        w, r = (np.asarray(inputs[i], np.float64) for i in (1, 2))
        b = get(inputs, 3)
        lens = get(inputs, 4)
        lens = np.full(batch, seq) if lens is None else np.asarray(lens, np.int64).reshape(-1)
        if lens.size != batch or lens.min(initial=0) < 0 or lens.max(initial=0) > seq:
            ctx.fail(f"sequence_lens = {lens.tolist()} do not fit {batch} sequences of {seq} steps")
        states = []
        for i in (5, 6):
            s = get(inputs, i)
            if s is not None:
                s = np.asarray(s, np.float64)
                s = np.swapaxes(s, 0, 1) if p.batch_first else s
            states.append(s)
        peep = get(inputs, 7)
        ys, hs, cs = [], [], []
        for d in range(p.directions):
            h0 = states[0][d] if states[0] is not None else np.zeros((batch, H))
            c0 = (states[1][d] if states[1] is not None else np.zeros((batch, H))) \
                if op == "LSTM" else None
            pd = np.asarray(peep[d], np.float64) if peep is not None else np.zeros(3 * H)
            bd = np.asarray(b[d], np.float64) if b is not None else None
            backwards = p.reverse or d == 1
            y, h, c = _run_direction(op, p, p.acts[d], xs, w[d], r[d], bd, h0, c0, pd, lens,
                                     backwards)
            ys.append(y)
            hs.append(h)
            cs.append(c)
        y = np.stack(ys, axis=1)                       # (seq, dirs, batch, H)
        yh = np.stack(hs)                              # (dirs, batch, H)
        if p.batch_first:
            y, yh = y.transpose(2, 0, 1, 3), np.swapaxes(yh, 0, 1)
        outs = [y.astype(x.dtype), yh.astype(x.dtype)]
        if op == "LSTM":
            yc = np.stack(cs)
            outs.append((np.swapaxes(yc, 0, 1) if p.batch_first else yc).astype(x.dtype))
        return outs[:len(node.outputs)]
    return run


for _op in ("LSTM", "GRU", "RNN"):
    register(_op, _parse_recurrent, _recurrent_kernel, since=7)
del _op
