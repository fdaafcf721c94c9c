"""NumPy twins of the .dnn builtins, as the difftest's generated NumPy programs call them.

Every twin takes NumPy arrays in their true dtype (bf16 is carried as float32 arrays holding
bf16-representable values) and returns arrays of the result's dtype. Floats are computed in
float64 and rounded to the result dtype after each op (the oracle does the same); integers in
int64 with two's-complement wrap; NaN propagates through max/min/argmax as in NumPy.
A twin raises ExpectedError where NumPy would refuse (an empty max, an index out of range):
the devices must then exit 1.
"""
import math

import numpy as np

NP = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "i32": np.int32, "i64": np.int64, "bool": np.bool_}
FLOATS = ("f32", "f16", "bf16")
INTS = ("i32", "i64")


class ExpectedError(Exception):
    """The program is invalid on these inputs: every device must exit 1."""


def bf16_round(a):
    a = np.asarray(a, np.float64).astype(np.float32)
    shape = a.shape  # (np.ascontiguousarray would make a 0-d array 1-d)
    a = a.reshape(-1)
    bits = a.view(np.uint32).astype(np.uint64)
    nan = np.isnan(a)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    out = bits.view(np.float32).copy()
    out[nan] = np.nan
    return out.reshape(shape)


def dt_of(a):
    """The dnn dtype of a twin array (bf16 arrays must be tagged by the caller)."""
    return {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int32): "i32",
            np.dtype(np.int64): "i64", np.dtype(np.bool_): "bool"}[np.asarray(a).dtype]


def to(a, dt):
    """The values of `a` stored as dtype dt: floats round (bf16 by round-to-nearest-even),
    floats to ints truncate, saturate and send NaN to 0; ints to ints wrap."""
    a = np.asarray(a)
    with np.errstate(all="ignore"):
        if dt == "bool":
            return a != 0
        if dt == "bf16":
            return bf16_round(a)
        if dt == "f16":
            return np.asarray(a, np.float64).astype(np.float32).astype(np.float16)
        if dt == "f32":
            return np.asarray(a, np.float64).astype(np.float32) if a.dtype != np.int64 else a.astype(np.float32)
        if a.dtype.kind == "f":
            t = np.trunc(np.where(np.isnan(a), 0, a).astype(np.float64))
            lo, hi = (-2.0**31, 2.0**31 - 1) if dt == "i32" else (-2.0**63, 2.0**63 - 1024)
            t = np.clip(t, lo, hi)
            out = t.astype(np.int64)
            out = np.where(t >= 2.0**63 - 1024, np.iinfo(np.int64).max, out) if dt == "i64" else out
            return out.astype(NP[dt])
        return a.astype(np.int64).astype(NP[dt])


def f64(a):
    return np.asarray(a).astype(np.float64)


def i64(a):
    return np.asarray(a).astype(np.int64)


erf_v = np.vectorize(math.erf, otypes=[np.float64])
erfc_v = np.vectorize(math.erfc, otypes=[np.float64])

UNARY = {
    "neg": lambda x: -x, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0.0),  # NaN stays NaN (docs/semantics.md)
    # gelu as x·Φ(x) with Φ from erfc: 1 + erf(x/√2) cancels to 0 for x below about -8,
    # where the true value (-9e-37 at x = -12.8) is still a normal f32.
    "gelu": lambda x: 0.5 * x * erfc_v(-x / math.sqrt(2.0)), "silu": lambda x: x / (1.0 + np.exp(-x)),
    "erf": erf_v, "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "round": np.rint,
    "sign": np.sign, "not": lambda x: x == 0,
}


def fmod_floor(a, b):
    # np.mod: a zero remainder takes the divisor's sign (ir::floorMod)
    r = np.fmod(a, b)
    return np.where(r == 0, np.copysign(0.0, b), np.where((r < 0) != (b < 0), r + b, r))


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "mod": fmod_floor, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "and": lambda a, b: (a != 0) & (b != 0), "or": lambda a, b: (a != 0) | (b != 0),
}


def int_binary(op, a, b):
    a, b = i64(a), i64(b)
    if op in ("add", "sub", "mul"):
        return BINARY[op](a, b)
    if op in ("maximum", "minimum"):
        return BINARY[op](a, b)
    if op in ("eq", "ne", "lt", "le", "gt", "ge", "and", "or"):
        return BINARY[op](a, b)
    safe = np.where(b == 0, 1, b)
    if op == "div":
        return np.where(b == 0, 0, np.floor_divide(a, safe))
    if op == "mod":
        return np.where(b == 0, 0, np.mod(a, safe))
    raise KeyError(op)


def unary(op, x, out):
    with np.errstate(all="ignore"):
        if np.asarray(x).dtype.kind in "iu" and op in ("neg", "abs", "sign") and out in INTS:
            return to({"neg": np.negative, "abs": np.abs, "sign": np.sign}[op](i64(x)), out)
        if op == "relu" and out in INTS:
            return to(np.maximum(i64(x), 0), out)
        return to(UNARY[op](f64(x)), out)


def binary(op, a, b, out):
    with np.errstate(all="ignore"):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind in "iub" and b.dtype.kind in "iub" and (out in INTS or out == "bool"):
            return to(int_binary(op, a, b), out)
        return to(BINARY[op](f64(a), f64(b)), out)


def where(c, x, y, out):
    return to(np.where(np.asarray(c) != 0, x, y), out)


def clip(x, lo, hi, out):
    with np.errstate(all="ignore"):
        x = np.asarray(x)
        if x.dtype.kind in "iu":
            return to(np.minimum(np.maximum(i64(x), lo), hi), out)
        return to(np.minimum(np.maximum(f64(x), lo), hi), out)


def cast(x, out):
    return to(x, out)


def _axes(x, axis):
    r = np.asarray(x).ndim
    if axis is None:
        return tuple(range(r))
    axis = axis if isinstance(axis, (list, tuple)) else [axis]
    return tuple(sorted(a % r for a in axis))


def reduce(op, x, axis, keepdims, out):
    x = np.asarray(x)
    ax = _axes(x, axis)
    with np.errstate(all="ignore"):
        if op in ("max", "min", "argmax", "argmin") and any(x.shape[a] == 0 for a in ax):
            raise ExpectedError(f"{op} of an empty axis")
        if op in ("sum", "prod") and out in INTS:
            f = np.sum if op == "sum" else np.prod
            return to(f(i64(x), axis=ax, keepdims=keepdims), out)
        if op in ("max", "min"):
            f = np.max if op == "max" else np.min
            v = x if x.dtype.kind != "f" else f64(x)
            if x.dtype.kind in "iub":
                v = i64(x)
            if x.size == 0 and not ax:
                return to(v, out)
            return to(f(v, axis=ax, keepdims=keepdims), out)
        if op in ("argmax", "argmin"):
            (a,) = ax
            f = np.argmax if op == "argmax" else np.argmin
            v = i64(x) if x.dtype.kind in "iub" else f64(x)
            r = f(v, axis=a)
            if keepdims:
                r = np.expand_dims(r, a)
            return to(r, out)
        v = f64(x)
        if op == "sum":
            return to(np.sum(v, axis=ax, keepdims=keepdims), out)
        if op == "prod":
            return to(np.prod(v, axis=ax, keepdims=keepdims), out)
        if op == "mean":
            return to(np.mean(v, axis=ax, keepdims=keepdims) if all(x.shape[a] for a in ax) or not ax
                      else np.sum(v, axis=ax, keepdims=keepdims) / 0.0, out)
        if op == "logsumexp":
            mx = np.max(np.where(np.isnan(v), -np.inf, v), axis=ax, keepdims=True, initial=-np.inf)
            hasnan = np.any(np.isnan(v), axis=ax, keepdims=True)
            fin = np.where(np.isinf(mx), 0.0, mx)
            s = np.sum(np.exp(v - fin), axis=ax, keepdims=True)
            r = np.where(hasnan, np.nan, np.where(np.isinf(mx), mx, fin + np.log(s)))
            if not keepdims:
                r = np.squeeze(r, axis=ax)
            return to(r, out)
    raise KeyError(op)


def softmax(x, axis, log, out):
    v = f64(x)
    with np.errstate(all="ignore"):
        mx = np.max(np.where(np.isnan(v), -np.inf, v), axis=axis, keepdims=True, initial=-np.inf)
        e = v - mx
        s = np.sum(np.exp(e), axis=axis, keepdims=True)
        return to(e - np.where(np.isposinf(mx), 0.0, np.log(s)) if log else np.exp(e) / s, out)


def matmul(a, b, out):
    with np.errstate(all="ignore"):
        if np.asarray(a).dtype.kind in "iu":
            return to(np.matmul(i64(a), i64(b)), out)
        return to(np.matmul(f64(a), f64(b)), out)


def conv2d(x, w, stride, padding, dilation, groups, out):
    x, w = f64(x), f64(w)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    valid = np.pad(np.ones((h, wd), bool), padding)  # taps in the padding add nothing (not 0 * w)
    oh = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    res = np.zeros((n, o, max(oh, 0), max(ow, 0)))
    og = o // groups
    with np.errstate(all="ignore"):
        for g in range(groups):
            for i in range(kh):
                for j in range(kw):
                    patch = xp[:, g * cg:(g + 1) * cg, i * dilation:i * dilation + stride * oh:stride,
                               j * dilation:j * dilation + stride * ow:stride]
                    wt = w[g * og:(g + 1) * og, :, i, j]
                    ok = valid[i * dilation:i * dilation + stride * oh:stride, j * dilation:j * dilation + stride * ow:stride]
                    term = np.where(ok, patch[:, None] * wt[None, :, :, None, None], 0.0)
                    res[:, g * og:(g + 1) * og] += term.sum(2)
    return to(res, out)


def pool2d(x, kernel, stride, padding, kind, out):
    x = f64(x)
    stride = stride or kernel
    n, c, h, w = x.shape
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)), constant_values=fill)
    oh, ow = (h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1
    res = np.full((n, c, max(oh, 0), max(ow, 0)), fill)
    with np.errstate(all="ignore"):
        for i in range(kernel):
            for j in range(kernel):
                patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                res = np.maximum(res, patch) if kind == "max" else res + patch
    if kind == "avg":
        res = res / (kernel * kernel)
    return to(res, out)


def take(x, idx, axis):
    x, idx = np.asarray(x), i64(idx)
    d = x.shape[axis]
    if np.any((idx < -d) | (idx >= d)):
        raise ExpectedError("take: index out of range")
    return np.take(x, np.where(idx < 0, idx + d, idx), axis=axis)


def one_hot(ids, depth, out):
    ids = i64(ids)
    r = (ids[..., None] == np.arange(depth)) & (ids[..., None] >= 0)
    return to(r, out)


def topk(x, k, axis):
    x = np.asarray(x)
    if k < 0 or k > x.shape[axis]:
        raise ExpectedError("topk: k out of range")
    xm = np.moveaxis(x, axis, -1)
    flat = xm.reshape(int(np.prod(xm.shape[:-1])), xm.shape[-1])
    order = np.array([sorted(range(len(row)), key=lambda j: row[j], reverse=True)[:k] for row in flat.tolist()],
                     dtype=np.int64).reshape(flat.shape[0], k)
    vals = np.take_along_axis(flat, order, -1) if flat.shape[0] else np.zeros((0, k), x.dtype)
    vals = vals.reshape(xm.shape[:-1] + (k,))
    order = order.reshape(xm.shape[:-1] + (k,))
    return np.moveaxis(vals, -1, axis).astype(x.dtype), np.moveaxis(order, -1, axis)


def resize(x, size):
    x = np.asarray(x)
    out_shape = list(x.shape[:x.ndim - len(size)]) + list(size)
    r = x
    for ax in range(x.ndim):
        if out_shape[ax] != x.shape[ax]:
            src = np.arange(out_shape[ax]) * x.shape[ax] // out_shape[ax]
            r = np.take(r, src, axis=ax)
    return r


def nonzero(m):
    m = np.asarray(m)
    return np.stack(np.nonzero(m), 1).astype(np.int64).reshape(-1, m.ndim)


def masked_select(x, m):
    x, m = np.broadcast_arrays(np.asarray(x), np.asarray(m) != 0)
    return x[m]


def unique(x):
    return np.unique(np.asarray(x))


def pad(x, pads, value, out):
    x = np.asarray(x)
    widths = [(pads[2 * k], pads[2 * k + 1]) for k in range(len(pads) // 2)] + [(0, 0)] * (x.ndim - len(pads) // 2)
    v = value if x.dtype.kind == "f" else to(np.array(value), out).item()
    return np.pad(x, widths, constant_values=v).astype(x.dtype)


def split(x, parts, axis):
    x = np.asarray(x)
    if isinstance(parts, int):
        parts = [x.shape[axis] // parts] * parts
    cuts = np.cumsum(parts)[:-1]
    return np.split(x, cuts, axis=axis)


def slice_(x, subs):
    """subs: per axis ('p', i) for a point or ('s', start, stop, step); NumPy clamps."""
    x = np.asarray(x)
    key = []
    for ax, s in enumerate(subs):
        if s[0] == "p":
            if not -x.shape[ax] <= s[1] < x.shape[ax]:
                raise ExpectedError("index out of range")
            key.append(s[1])
        else:
            key.append(slice(s[1], s[2], s[3]))
    return x[tuple(key)]
