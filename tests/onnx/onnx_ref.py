"""A NumPy evaluator for the ONNX ops the import tests use: the tests' reference, written
from the ONNX operator specs (float64 arithmetic, then the graph's dtypes). It is
independent of dnnc; where onnxruntime is importable the tests compare against it too."""
import math

import numpy as np
from onnx import helper, numpy_helper

ERF = np.vectorize(math.erf)


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _np_dtype(t):
    return helper.tensor_dtype_to_np_dtype(t) if hasattr(helper, "tensor_dtype_to_np_dtype") else \
        __import__("onnx").mapping.TENSOR_TYPE_TO_NP_TYPE[t]


def _axes(x, axes):
    return tuple(int(a) % x.ndim for a in axes)


def _pool(x, k, s, p, is_max, include_pad):
    n, c, h, w = x.shape
    fill = -np.inf if is_max else 0.0
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    ones = np.pad(np.ones((h, w)), ((p, p), (p, p)))
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s:i * s + k, j * s:j * s + k]
            if is_max:
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                cnt = k * k if include_pad else ones[i * s:i * s + k, j * s:j * s + k].sum()
                out[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
    return out


def _conv(x, w, b, a):
    from numpy.lib.stride_tricks import sliding_window_view
    if x.ndim == 3:  # 1-D: one row high
        a = dict(a, strides=[1] + list(a.get("strides", [1])), dilations=[1] + list(a.get("dilations", [1])),
                 pads=[0, a.get("pads", [0, 0])[0], 0, a.get("pads", [0, 0])[1]])
        return _conv(x[:, :, None], w[:, :, None], b, a)[:, :, 0]
    strides = a.get("strides", [1, 1])
    pads = a.get("pads", [0, 0, 0, 0])
    dil = a.get("dilations", [1, 1])
    g = a.get("group", 1)
    o, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    win = sliding_window_view(xp, (dil[0] * (kh - 1) + 1, dil[1] * (kw - 1) + 1), axis=(2, 3))
    win = win[:, :, ::strides[0], ::strides[1], ::dil[0], ::dil[1]]
    og = o // g
    y = np.concatenate([np.tensordot(win[:, i * cg:(i + 1) * cg], w[i * og:(i + 1) * og].astype(np.float64),
                                     axes=([1, 4, 5], [1, 2, 3])) for i in range(g)], -1).transpose(0, 3, 1, 2)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return y


def run_node(node, v, a, outer_run):
    op = node.op_type
    x = v[0] if v else None
    unary = {"Abs": np.abs, "Neg": np.negative, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Tanh": np.tanh,
             "Sigmoid": lambda t: 1 / (1 + np.exp(-t)), "Relu": lambda t: np.maximum(t, 0), "Erf": ERF,
             "Sin": np.sin, "Cos": np.cos, "Floor": np.floor, "Ceil": np.ceil, "Round": np.round, "Sign": np.sign,
             "Not": np.logical_not, "Reciprocal": lambda t: 1 / t}
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
              "Mod": np.mod, "Equal": np.equal, "Less": np.less, "Greater": np.greater,
              "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal, "And": np.logical_and,
              "Or": np.logical_or, "Xor": np.logical_xor}
    if op in unary:
        r = unary[op](x.astype(np.float64) if x.dtype.kind == "f" else x)
        return [r.astype(x.dtype) if op != "Not" else r]
    if op in binary:
        if op == "Div" and x.dtype.kind in "iu":
            return [np.trunc(x / v[1]).astype(x.dtype)]
        r = binary[op](x, v[1])
        return [r if r.dtype == bool else r.astype(x.dtype)]
    if op in ("Max", "Min", "Sum", "Mean"):
        r = v[0]
        for t in v[1:]:
            r = np.maximum(r, t) if op == "Max" else np.minimum(r, t) if op == "Min" else r + t
        return [(r / len(v) if op == "Mean" else r).astype(x.dtype)]
    if op in ("Identity", "Dropout"):
        return [x]
    if op == "Constant":
        return [numpy_helper.to_array(a["value"])]
    if op == "Cast":
        return [x.astype(_np_dtype(a["to"]))]
    if op == "Where":
        return [np.where(v[0], v[1], v[2])]
    if op == "Clip":
        lo = v[1] if len(v) > 1 and v[1] is not None else -np.inf
        hi = v[2] if len(v) > 2 and v[2] is not None else np.inf
        return [np.clip(x, lo, hi).astype(x.dtype)]
    if op == "Gelu":
        xd = x.astype(np.float64)
        if a.get("approximate", b"none") in (b"tanh", "tanh"):
            return [(0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))).astype(x.dtype)]
        return [(0.5 * xd * (1 + ERF(xd / math.sqrt(2)))).astype(x.dtype)]
    if op == "LeakyRelu":
        return [np.where(x >= 0, x, x * a.get("alpha", 0.01)).astype(x.dtype)]
    if op == "Elu":
        return [np.where(x > 0, x, a.get("alpha", 1.0) * (np.exp(x) - 1)).astype(x.dtype)]
    if op == "Softplus":
        return [np.log1p(np.exp(x)).astype(x.dtype)]
    if op == "HardSigmoid":
        return [np.clip(x * a.get("alpha", 0.2) + a.get("beta", 0.5), 0, 1).astype(x.dtype)]
    if op == "HardSwish":
        return [(x * np.clip(x / 6 + 0.5, 0, 1)).astype(x.dtype)]
    if op == "PRelu":
        return [np.where(x >= 0, x, x * v[1]).astype(x.dtype)]
    if op == "MatMul":
        return [np.matmul(x.astype(np.float64), v[1]).astype(x.dtype)]
    if op == "Gemm":
        A = x.T if a.get("transA", 0) else x
        B = v[1].T if a.get("transB", 0) else v[1]
        r = a.get("alpha", 1.0) * (A.astype(np.float64) @ B)
        if len(v) > 2:
            r = r + a.get("beta", 1.0) * v[2]
        return [r.astype(x.dtype)]
    if op == "Einsum":
        return [np.einsum(a["equation"].decode() if isinstance(a["equation"], bytes) else a["equation"],
                          *[t.astype(np.float64) for t in v]).astype(x.dtype)]
    if op == "Conv":
        return [_conv(x, v[1], v[2] if len(v) > 2 else None, a).astype(x.dtype)]
    if op == "BatchNormalization":
        s = (-1,) + (1,) * (x.ndim - 2)
        sc, b, m, var = v[1:5]
        return [((x - m.reshape(s)) / np.sqrt(var.reshape(s) + a.get("epsilon", 1e-5)) * sc.reshape(s) + b.reshape(s)).astype(x.dtype)]
    if op == "LayerNormalization":
        ax = tuple(range(a.get("axis", -1) % x.ndim, x.ndim))
        xd = x.astype(np.float64)
        mu = xd.mean(axis=ax, keepdims=True)
        var = ((xd - mu) ** 2).mean(axis=ax, keepdims=True)
        r = (xd - mu) / np.sqrt(var + a.get("epsilon", 1e-5)) * v[1]
        if len(v) > 2:
            r = r + v[2]
        return [r.astype(x.dtype)]
    if op in ("Softmax", "LogSoftmax"):
        ax = a.get("axis", -1)
        xd = x.astype(np.float64)
        e = np.exp(xd - xd.max(axis=ax, keepdims=True))
        s = e / e.sum(axis=ax, keepdims=True)
        return [(np.log(s) if op == "LogSoftmax" else s).astype(x.dtype)]
    if op == "Shape":
        return [np.array(x.shape[a.get("start", 0):a.get("end", x.ndim)], np.int64)]
    if op == "Size":
        return [np.array(x.size, np.int64)]
    if op == "Reshape":
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(v[1])]
        return [x.reshape(shape)]
    if op == "Flatten":
        ax = a.get("axis", 1)
        return [x.reshape(int(np.prod(x.shape[:ax])), -1)]
    if op == "Transpose":
        return [np.transpose(x, a.get("perm"))]
    if op == "Squeeze":
        return [np.squeeze(x, axis=_axes(x, v[1]) if len(v) > 1 else None)]
    if op == "Unsqueeze":
        r = x
        for ax in sorted(int(t) % (x.ndim + len(v[1])) for t in v[1]):
            r = np.expand_dims(r, ax)
        return [r]
    if op == "Concat":
        return [np.concatenate(v, axis=a["axis"])]
    if op == "Split":
        ax = a.get("axis", 0)
        if len(v) > 1:
            return np.split(x, np.cumsum(v[1])[:-1], axis=ax)
        return np.array_split(x, len(node.output), axis=ax)
    if op == "Slice":
        sl = [slice(None)] * x.ndim
        axes = v[3] if len(v) > 3 else range(len(v[1]))
        steps = v[4] if len(v) > 4 else [1] * len(v[1])
        for s, e, ax, st in zip(v[1], v[2], axes, steps):
            sl[int(ax)] = slice(int(s), int(e), int(st))
        return [x[tuple(sl)]]
    if op == "Gather":
        return [np.take(x, v[1], axis=a.get("axis", 0))]
    if op == "Expand":
        return [x * np.ones(v[1], x.dtype)]
    if op == "Range":
        return [np.arange(v[0], v[1], v[2]).astype(v[0].dtype)]
    if op == "ConstantOfShape":
        val = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
        return [np.full(v[0], val[0], val.dtype)]
    if op.startswith("Reduce"):
        axes = tuple(v[1]) if len(v) > 1 else tuple(a["axes"]) if "axes" in a else None
        kd = bool(a.get("keepdims", 1))
        xd = x.astype(np.float64)
        f = {"ReduceSum": lambda: xd.sum(axis=axes, keepdims=kd), "ReduceMean": lambda: xd.mean(axis=axes, keepdims=kd),
             "ReduceMax": lambda: xd.max(axis=axes, keepdims=kd), "ReduceMin": lambda: xd.min(axis=axes, keepdims=kd),
             "ReduceProd": lambda: xd.prod(axis=axes, keepdims=kd),
             "ReduceL1": lambda: np.abs(xd).sum(axis=axes, keepdims=kd),
             "ReduceL2": lambda: np.sqrt((xd * xd).sum(axis=axes, keepdims=kd)),
             "ReduceSumSquare": lambda: (xd * xd).sum(axis=axes, keepdims=kd),
             "ReduceLogSumExp": lambda: np.log(np.exp(xd).sum(axis=axes, keepdims=kd))}[op]
        return [f().astype(x.dtype)]
    if op in ("ArgMax", "ArgMin"):
        f = np.argmax if op == "ArgMax" else np.argmin
        r = f(x, axis=a.get("axis", 0))
        if a.get("keepdims", 1):
            r = np.expand_dims(r, a.get("axis", 0))
        return [r.astype(np.int64)]
    if op in ("MaxPool", "AveragePool"):
        k = a["kernel_shape"][0]
        s = a.get("strides", [1, 1])[0]
        p = a.get("pads", [0, 0, 0, 0])[0]
        return [_pool(x, k, s, p, op == "MaxPool", a.get("count_include_pad", 0)).astype(x.dtype)]
    if op == "GlobalAveragePool":
        return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype)]
    if op == "GlobalMaxPool":
        return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]
    if op == "Pad":
        pads = v[1]
        n = x.ndim
        val = v[2].item() if len(v) > 2 and v[2] is not None else 0
        return [np.pad(x, [(pads[i], pads[i + n]) for i in range(n)], constant_values=val)]
    if op == "NonZero":
        return [np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1)]
    if op == "TopK":
        k = int(np.asarray(v[1]).reshape(-1)[0])
        ax = a.get("axis", -1)
        largest = a.get("largest", 1)
        order = np.argsort(-x if largest else x, axis=ax, kind="stable")
        idx = np.take(order, np.arange(k), axis=ax)
        return [np.take_along_axis(x, idx, axis=ax), idx.astype(np.int64)]
    if op == "If":
        branch = a["then_branch"] if bool(np.asarray(x).reshape(-1)[0]) else a["else_branch"]
        return outer_run(branch, {})
    if op == "Loop":
        body = a["body"]
        trip = int(np.asarray(v[0]).reshape(-1)[0]) if v[0] is not None else None
        cond = bool(np.asarray(v[1]).reshape(-1)[0]) if len(v) > 1 and v[1] is not None else True
        carried = list(v[2:])
        scans = []
        i = 0
        while (trip is None or i < trip) and cond:
            feeds = {body.input[0].name: np.array(i, np.int64), body.input[1].name: np.array(cond)}
            for inp, val in zip(body.input[2:], carried):
                feeds[inp.name] = val
            outs = outer_run(body, feeds)
            cond = bool(np.asarray(outs[0]).reshape(-1)[0])
            carried = outs[1:1 + len(carried)]
            scans.append(outs[1 + len(carried):])
            i += 1
        n_scan = len(body.output) - 1 - len(carried)
        stacked = [np.stack([s[j] for s in scans]) if scans else None for j in range(n_scan)]
        return carried + stacked
    raise NotImplementedError(op)


def run_graph(graph, feeds, outer=None):
    env = dict(outer or {})
    for init in graph.initializer:
        env[init.name] = numpy_helper.to_array(init)
    env.update(feeds)

    def sub(g, f):
        return run_graph(g, f, env)

    for node in graph.node:
        vals = [env[n] if n else None for n in node.input]
        outs = run_node(node, vals, _attrs(node), sub)
        for name, val in zip(node.output, outs):
            if name:
                env[name] = np.asarray(val)
    return [env[o.name] for o in graph.output]


def run_model(model, feeds):
    """The model's outputs on `feeds` (name -> array), in graph order."""
    return run_graph(model.graph, feeds)
