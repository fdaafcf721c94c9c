#!/usr/bin/env python3
"""dnnc import (interop.md §16) end to end: ONNX models built here with the onnx package
are imported once each, then run through `dnnc run` at several shapes and compared with a
NumPy evaluation of the same graph (onnx_ref.py) and, where onnxruntime is importable,
with onnxruntime too.

- one model per supported op (or op form), at 1-3 shapes;
- whole models: an MLP, a transformer encoder (dynamic batch and length, with the
  Shape->Gather->Concat->Reshape subgraphs an exporter writes), a CNN (dynamic H and W),
  a model with If and Loop, one with NonZero + TopK: each at 3 shapes from one import;
- the translation itself: dims from dim_params, params loaded by name, shape subgraphs
  folded into dims (no Shape op survives as code);
- errors: unsupported ops (one error listing each type and node, nothing written),
  malformed and truncated files (a clear error, exit 1, no crash)."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_ref import run_model  # noqa: E402

try:  # optional: the tests never need it
    import onnxruntime
except ImportError:
    onnxruntime = None

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
NP = {F: np.float32, I64: np.int64, BOOL: np.bool_, TensorProto.INT32: np.int32}
OPSET = 17


def vi(name, t, dims):
    return helper.make_tensor_value_info(name, t, dims)


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def make(nodes, inputs, outputs, inits=(), opset=OPSET, name="g"):
    g = helper.make_graph(nodes, name, inputs, [vi(o, t, None) if isinstance(o, str) else o for o, t in outputs]
                          if outputs and isinstance(outputs[0], tuple) else outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="dnnc-tests")
    m.ir_version = 8
    onnx.checker.check_model(m) if all(o.type.tensor_type.HasField("shape") for o in m.graph.output) else None
    return m


def feeds_for(model, dims, rng, ints=(0, 5)):
    feeds = {}
    inits = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param] for d in tt.shape.dim]
        t = NP[tt.elem_type]
        if t == np.bool_:
            feeds[inp.name] = rng.random(shape) > 0.5
        elif np.issubdtype(t, np.integer):
            feeds[inp.name] = rng.integers(*ints, size=shape).astype(t)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(t)
    return feeds


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read(path):
    with open(path) as f:
        return f.read()


class ImportTest(unittest.TestCase):
    """Imports and runs; the test classes below add the cases."""
    exe = None

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def dnnc(self, *args):
        return subprocess.run([self.exe, *args], capture_output=True, text=True, timeout=600)

    def import_model(self, model, name="m"):
        path = os.path.join(self.tmp, name + ".onnx")
        onnx.save(model, path)
        dnn = os.path.join(self.tmp, name + ".dnn")
        p = self.dnnc("import", path, "-o", dnn)
        self.assertEqual(p.returncode, 0, f"dnnc import failed:\n{p.stderr}")
        weights = os.path.join(self.tmp, name + ".safetensors")
        return dnn, weights if os.path.exists(weights) else None

    def run_dnn(self, dnn, weights, feeds, out_names):
        d = tempfile.mkdtemp(dir=self.tmp)
        args = ["run", dnn, "--out", d, "--device", "cpu"]
        if weights:
            args += ["--weights", weights]
        for k, a in feeds.items():
            f = os.path.join(d, re.sub(r"\W", "_", k) + ".in.npy")
            np.save(f, a)
            args += ["--input", f"{re.sub(r'[^A-Za-z0-9_]+', '_', k).strip('_')}={f}"]
        p = self.dnnc(*args)
        self.assertEqual(p.returncode, 0, f"dnnc run failed:\n{p.stderr}\n{read(dnn)}")
        return [np.load(os.path.join(d, re.sub(r"[^A-Za-z0-9_]+", "_", n).strip("_") + ".npy")) for n in out_names]

    def check(self, model, shapes, rtol=1e-4, atol=1e-5, seed=0, ints=(0, 5), name="m"):
        """Imports `model` once and compares dnnc run with the references at each binding."""
        dnn, weights = self.import_model(model, name)
        names = [o.name for o in model.graph.output]
        rng = np.random.default_rng(seed)
        for dims in shapes:
            feeds = feeds_for(model, dims, rng, ints)
            got = self.run_dnn(dnn, weights, feeds, names)
            refs = [("numpy", run_model(model, feeds))]
            if onnxruntime is not None:
                sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
                refs.append(("onnxruntime", sess.run(None, feeds)))
            for who, want in refs:
                for n, g, w in zip(names, got, want):
                    w = np.asarray(w)
                    msg = f"{n} at {dims} vs {who}\n{read(dnn)}"
                    self.assertEqual(g.shape, w.shape, msg)
                    if np.issubdtype(w.dtype, np.floating):
                        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=msg)
                    else:
                        np.testing.assert_array_equal(g, w, err_msg=msg)
        return read(dnn)


def op_model(op, inputs, n_out=1, opset=OPSET, out_types=(), **attrs):
    """One node of `op`. `inputs`: (name, type, dims) graph inputs, or (name, array)
    initializers, or None for an omitted optional input; outputs are float unless
    `out_types` says otherwise."""
    graph_inputs, inits, names = [], [], []
    for i in inputs:
        if i is None:
            names.append("")
        elif len(i) == 3:
            graph_inputs.append(vi(*i))
            names.append(i[0])
        else:
            inits.append(init(*i))
            names.append(i[0])
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}0", **attrs)
    types = list(out_types) + [F] * (n_out - len(out_types))
    return make([node], graph_inputs, list(zip(outs, types)), inits, opset)


BT = [{"B": 2, "T": 3}, {"B": 1, "T": 5}, {"B": 3, "T": 1}]
X = ("x", F, ["B", "T"])
X3 = ("x", F, ["B", "T", 4])
R = np.random.default_rng(7)


def w(*shape):
    return R.standard_normal(shape).astype(np.float32)


# name -> (model, shapes, tolerances...)
OP_CASES = {
    **{f"unary_{op}": (lambda op=op: op_model(op, [X]), BT) for op in
       ["Abs", "Neg", "Exp", "Tanh", "Sigmoid", "Relu", "Erf", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign"]},
    "unary_Log_Sqrt": (lambda: make([helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Log", ["a"], ["l"]),
                                     helper.make_node("Sqrt", ["a"], ["s"]), helper.make_node("Reciprocal", ["a"], ["r"])],
                                    [vi(*X)], [("l", F), ("s", F), ("r", F)]), BT),
    **{f"binary_{op}": (lambda op=op: op_model(op, [X, ("b", F, ["T"])]), BT) for op in ["Add", "Sub", "Mul", "Div"]},
    "binary_Pow_const": (lambda: op_model("Pow", [("x", F, ["B", "T"]), ("e", np.array(2.0, np.float32))]), BT),
    "binary_scalar_const": (lambda: op_model("Mul", [X, ("s", np.array(0.125, np.float32))]), BT),
    **{f"compare_{op}": (lambda op=op: op_model(op, [X, ("b", F, ["B", "T"])], out_types=[BOOL]), BT) for op in
       ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]},
    "logic_And_Or_Xor_Not": (lambda: make([helper.make_node("And", ["p", "q"], ["a"]), helper.make_node("Or", ["p", "q"], ["o"]),
                                           helper.make_node("Xor", ["p", "q"], ["x"]), helper.make_node("Not", ["p"], ["n"])],
                                          [vi("p", BOOL, ["B", "T"]), vi("q", BOOL, ["B", "T"])],
                                          [("a", BOOL), ("o", BOOL), ("x", BOOL), ("n", BOOL)]), BT),
    "int_Mod": (lambda: make([helper.make_node("Mod", ["i", "m"], ["y"])], [vi("i", I64, ["B"])], [("y", I64)],
                             [init("m", np.array(3, np.int64))]), [{"B": 4}, {"B": 7}]),
    "variadic_Max_Min_Sum_Mean": (lambda: make([helper.make_node(o, ["x", "b", "c"], [o.lower()]) for o in ["Max", "Min", "Sum", "Mean"]],
                                               [vi(*X), vi("b", F, ["B", "T"]), vi("c", F, ["T"])],
                                               [(o.lower(), F) for o in ["Max", "Min", "Sum", "Mean"]]), BT),
    "Identity_Dropout": (lambda: make([helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Dropout", ["i"], ["y"])],
                                      [vi(*X)], [("y", F)]), BT[:1]),
    "Cast": (lambda: make([helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32),
                           helper.make_node("Cast", ["i"], ["y"], to=F)], [vi(*X)], [("y", F), ("i", TensorProto.INT32)]), BT),
    "Where": (lambda: make([helper.make_node("Greater", ["x", "z"], ["c"]), helper.make_node("Where", ["c", "x", "m"], ["y"])],
                           [vi(*X)], [("y", F)], [init("z", np.array(0.0, np.float32)), init("m", np.array(-1.5, np.float32))]), BT),
    "Clip": (lambda: op_model("Clip", [X, ("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.5, np.float32))]), BT),
    "Clip_max_only": (lambda: op_model("Clip", [X, None, ("hi", np.array(0.5, np.float32))]), BT[:1]),
    "Gelu_erf": (lambda: op_model("Gelu", [X], opset=20), BT),
    "Gelu_tanh": (lambda: op_model("Gelu", [X], opset=20, approximate="tanh"), BT),
    "LeakyRelu": (lambda: op_model("LeakyRelu", [X], alpha=0.1), BT),
    "Elu": (lambda: op_model("Elu", [X], alpha=0.7), BT),
    "Softplus": (lambda: op_model("Softplus", [X]), BT),
    "HardSigmoid": (lambda: op_model("HardSigmoid", [X]), BT),
    "HardSwish": (lambda: op_model("HardSwish", [X]), BT),
    "PRelu": (lambda: op_model("PRelu", [X, ("s", w(1))]), BT),
    "MatMul": (lambda: op_model("MatMul", [X3, ("w", w(4, 6))]), BT),
    "MatMul_batched": (lambda: op_model("MatMul", [X3, ("b", F, ["B", 4, "T"])]), BT),
    "Gemm": (lambda: op_model("Gemm", [("x", F, ["B", 4]), ("w", w(6, 4)), ("c", w(6))], transB=1, alpha=0.5, beta=2.0),
             [{"B": 1}, {"B": 3}]),
    "Gemm_transA": (lambda: op_model("Gemm", [("x", F, [4, "B"]), ("w", w(4, 6))], transA=1), [{"B": 2}]),
    "Einsum_bmm": (lambda: op_model("Einsum", [("q", F, ["B", 2, "T", 4]), ("k", F, ["B", 2, "T", 4])], equation="bhid,bhjd->bhij"), BT),
    "Einsum_out_perm": (lambda: op_model("Einsum", [("a", F, ["B", "T", 4]), ("b", F, ["B", 4, 5])], equation="btk,bkn->bnt"), BT),
    "Conv": (lambda: op_model("Conv", [("x", F, ["N", 3, "H", "W"]), ("w", w(4, 3, 3, 3)), ("b", w(4))], pads=[1, 1, 1, 1]),
             [{"N": 1, "H": 5, "W": 6}, {"N": 2, "H": 4, "W": 4}]),
    "Conv_stride_group": (lambda: op_model("Conv", [("x", F, ["N", 4, "H", "W"]), ("w", w(4, 2, 3, 3))], strides=[2, 2], group=2),
                          [{"N": 1, "H": 7, "W": 9}, {"N": 2, "H": 5, "W": 5}]),
    "Conv_uneven": (lambda: op_model("Conv", [("x", F, ["N", 2, "H", "W"]), ("w", w(3, 2, 2, 3))], pads=[0, 1, 1, 1],
                                     strides=[1, 2], dilations=[1, 1]), [{"N": 1, "H": 6, "W": 7}]),
    "Conv1d": (lambda: op_model("Conv", [("x", F, ["N", 2, "L"]), ("w", w(3, 2, 3)), ("b", w(3))], pads=[2, 1], strides=[2],
                                dilations=[2]), [{"N": 1, "L": 9}, {"N": 2, "L": 6}, {"N": 3, "L": 16}]),
    "BatchNormalization": (lambda: op_model("BatchNormalization", [("x", F, ["N", 3, "H", "W"]), ("s", w(3)), ("b", w(3)),
                                                                   ("m", w(3)), ("v", np.abs(w(3)) + 0.5)], epsilon=1e-3),
                           [{"N": 2, "H": 3, "W": 4}]),
    "LayerNormalization": (lambda: op_model("LayerNormalization", [X3, ("g", w(4)), ("b", w(4))], epsilon=1e-5), BT),
    "LayerNormalization_axes": (lambda: op_model("LayerNormalization", [("x", F, ["B", 3, 4]), ("g", w(3, 4))], axis=-2),
                                [{"B": 2, "T": 3}]),
    "Softmax": (lambda: op_model("Softmax", [X3], axis=1), BT),
    "LogSoftmax": (lambda: op_model("LogSoftmax", [X3]), BT),
    "Reshape_const": (lambda: op_model("Reshape", [X3, ("s", np.array([0, -1, 2], np.int64))]), BT),
    "Flatten": (lambda: op_model("Flatten", [X3], axis=2), BT),
    "Transpose": (lambda: op_model("Transpose", [X3], perm=[2, 0, 1]), BT),
    "Squeeze_Unsqueeze": (lambda: make([helper.make_node("Unsqueeze", ["x", "a"], ["u"]), helper.make_node("Squeeze", ["u", "s"], ["y"])],
                                       [vi(*X)], [("u", F), ("y", F)], [init("a", np.array([0, 3], np.int64)),
                                                                        init("s", np.array([3], np.int64))]), BT),
    "Concat": (lambda: op_model("Concat", [X3, ("b", F, ["B", "T", 2])], axis=-1), BT),
    "Split": (lambda: op_model("Split", [X3, ("s", np.array([1, 3], np.int64))], n_out=2, axis=2), BT),
    "Split_equal": (lambda: op_model("Split", [X3], n_out=2, axis=-1), BT),
    "Slice": (lambda: op_model("Slice", [X3, ("s", np.array([1, 0], np.int64)), ("e", np.array([2**62, 3], np.int64)),
                                         ("a", np.array([1, 2], np.int64)), ("p", np.array([1, 2], np.int64))]),
              [{"B": 2, "T": 3}, {"B": 1, "T": 6}]),
    # Constant bounds on a dim only running knows: clamped to it, as ONNX does (x[:, 1:3] is
    # min(3, T) - 1 long; it was declared 2 and failed to type-check).
    "Slice_const_on_dynamic": (lambda: op_model("Slice", [X3, ("s", np.array([1], np.int64)), ("e", np.array([3], np.int64)),
                                                          ("a", np.array([1], np.int64))]),
                               [{"B": 2, "T": 1}, {"B": 1, "T": 2}, {"B": 2, "T": 6}]),
    "Slice_step_past_end": (lambda: op_model("Slice", [X3, ("s", np.array([0, 1], np.int64)), ("e", np.array([2, 100], np.int64)),
                                                       ("a", np.array([1, 2], np.int64)), ("p", np.array([1, 3], np.int64))]),
                            [{"B": 2, "T": 1}, {"B": 1, "T": 5}]),
    "Slice_negative": (lambda: op_model("Slice", [X3, ("s", np.array([-2], np.int64)), ("e", np.array([-1], np.int64)),
                                                  ("a", np.array([2], np.int64))]), BT),
    "Gather_ids": (lambda: op_model("Gather", [("e", w(10, 4)), ("i", I64, ["B", "T"])]), BT),
    "Gather_scalar": (lambda: op_model("Gather", [X3, ("i", np.array(2, np.int64))], axis=2), BT),
    "Expand": (lambda: op_model("Expand", [("x", F, ["B", 1]), ("s", np.array([1, 3], np.int64))]), BT),
    # torch.onnx's x.expand(B, -1, 4): the -1 replaced through ConstantOfShape/Mul/Equal/Where.
    "Expand_torch_minus_one": (lambda: make(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["b0"]),
         helper.make_node("Unsqueeze", ["b0", "axes0"], ["b"]),
         helper.make_node("Concat", ["b", "minus1", "four"], ["want"], axis=0),
         helper.make_node("ConstantOfShape", ["three"], ["ones"], value=numpy_helper.from_array(np.array([1], np.int64))),
         helper.make_node("Mul", ["ones", "minus1"], ["neg"]), helper.make_node("Equal", ["want", "neg"], ["is_neg"]),
         helper.make_node("Where", ["is_neg", "ones", "want"], ["shape"]),
         helper.make_node("Expand", ["x", "shape"], ["y"])],
        [vi("x", F, ["B", "T", 1])], [("y", F)],
        [init("zero", np.array(0, np.int64)), init("axes0", np.array([0], np.int64)), init("minus1", np.array([-1], np.int64)),
         init("four", np.array([4], np.int64)), init("three", np.array([3], np.int64))]), BT),
    # The attention scale as exporters compute it from the head size: folded to a literal.
    "scale_from_shape": (lambda: make(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "two"], ["d"]),
         helper.make_node("Cast", ["d"], ["df"], to=F), helper.make_node("Sqrt", ["df"], ["r"]),
         helper.make_node("Div", ["one", "r"], ["scale"]), helper.make_node("Mul", ["x", "scale"], ["y"])],
        [vi(*X3)], [("y", F)], [init("two", np.array(2, np.int64)), init("one", np.array(1.0, np.float32))]), BT),
    "ConstantOfShape_Range": (lambda: make([helper.make_node("Shape", ["x"], ["s"]),
                                            helper.make_node("ConstantOfShape", ["s"], ["z"],
                                                             value=numpy_helper.from_array(np.array([2.5], np.float32))),
                                            helper.make_node("Gather", ["s", "one"], ["t"]),
                                            helper.make_node("Range", ["zero", "t", "one"], ["r"])],
                                           [vi(*X)], [("z", F), ("r", I64)],
                                           [init("one", np.array(1, np.int64)), init("zero", np.array(0, np.int64))]), BT),
    # A float Range whose bounds are values: start + k delta, k below ceil((limit - start) / delta).
    "Range_float": (lambda: op_model("Range", [("s", np.array(0.5, np.float32)), ("l", F, []), ("d", np.array(0.7, np.float32))]),
                    [{}]),
    # Positions as floats up to the sequence length (a sinusoidal encoding's): the length is
    # T itself, so they add to x; from 5 by 3 they are max(0, ceil((T - 5) / 3)) long.
    "Range_empty": (lambda: make([helper.make_node("Range", ["s", "l", "d"], ["r"])], [vi(*X)], [("r", I64)],
                                 [init("s", np.array(5, np.int64)), init("l", np.array(0, np.int64)),
                                  init("d", np.array(1, np.int64))]), [{"B": 1, "T": 2}]),
    "Range_float_to_length": (lambda: make(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["t"]),
         helper.make_node("Cast", ["t"], ["tf"], to=F), helper.make_node("Range", ["zf", "tf", "onef"], ["pos"]),
         helper.make_node("Add", ["x", "pos"], ["y"]), helper.make_node("Range", ["fivef", "tf", "threef"], ["r"])],
        [vi(*X)], [("y", F), ("r", F)],
        [init("one", np.array(1, np.int64)), init("zf", np.array(0.0, np.float32)), init("onef", np.array(1.0, np.float32)),
         init("fivef", np.array(5.0, np.float32)), init("threef", np.array(3.0, np.float32))]),
        [{"B": 2, "T": 3}, {"B": 1, "T": 5}, {"B": 3, "T": 1}, {"B": 1, "T": 9}]),
    **{f"reduce_{op}": (lambda op=op: op_model(op, [X3], axes=[1], keepdims=0), BT) for op in
       ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"]},
    "reduce_ReduceSum_input_axes": (lambda: op_model("ReduceSum", [X3, ("a", np.array([0, 2], np.int64))]), BT),
    "ArgMax_ArgMin": (lambda: make([helper.make_node("ArgMax", ["x"], ["a"], axis=1), helper.make_node("ArgMin", ["x"], ["b"], axis=2, keepdims=0)],
                                   [vi(*X3)], [("a", I64), ("b", I64)]), BT),
    "MaxPool": (lambda: op_model("MaxPool", [("x", F, ["N", 2, "H", "W"])], kernel_shape=[2, 2], strides=[2, 2]),
                [{"N": 1, "H": 4, "W": 6}, {"N": 2, "H": 5, "W": 3}]),
    "MaxPool_pad": (lambda: op_model("MaxPool", [("x", F, ["N", 2, "H", "W"])], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                    [{"N": 1, "H": 4, "W": 5}]),
    "AveragePool_pad": (lambda: op_model("AveragePool", [("x", F, ["N", 2, "H", "W"])], kernel_shape=[3, 3], strides=[2, 2],
                                         pads=[1, 1, 1, 1]), [{"N": 1, "H": 5, "W": 6}, {"N": 2, "H": 4, "W": 4}]),
    "GlobalPools": (lambda: make([helper.make_node("GlobalAveragePool", ["x"], ["a"]), helper.make_node("GlobalMaxPool", ["x"], ["m"])],
                                 [vi("x", F, ["N", 3, "H", "W"])], [("a", F), ("m", F)]), [{"N": 2, "H": 3, "W": 5}]),
    "Pad": (lambda: op_model("Pad", [X3, ("p", np.array([0, 1, 0, 0, 2, 1], np.int64)), ("v", np.array(0.5, np.float32))]), BT),
    "NonZero": (lambda: make([helper.make_node("Greater", ["x", "z"], ["m"]), helper.make_node("NonZero", ["m"], ["y"])],
                             [vi(*X)], [("y", I64)], [init("z", np.array(0.0, np.float32))]), BT),
    "TopK": (lambda: op_model("TopK", [X3, ("k", np.array([2], np.int64))], n_out=2, out_types=[F, I64]), BT),
    "TopK_smallest_axis": (lambda: op_model("TopK", [X3, ("k", np.array([1], np.int64))], n_out=2, out_types=[F, I64], axis=1,
                                                 largest=0), BT),
}


def make_op_test(name, build, shapes):
    def test(self):
        self.check(build(), shapes)
    return test


class OpTest(ImportTest):
    """One model per supported op (the cases are OP_CASES)."""


for _name, (_build, _shapes) in OP_CASES.items():
    setattr(OpTest, f"test_op_{_name}", make_op_test(_name, _build, _shapes))



# ------------------------------------------------------------------------------------
# Whole models, as exporters write them


def mlp_model():
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1, name="fc1"),
             helper.make_node("Relu", ["h1"], ["a1"]),
             helper.make_node("Gemm", ["a1", "w2", "b2"], ["h2"], transB=1, name="fc2"),
             helper.make_node("Relu", ["h2"], ["a2"]),
             helper.make_node("MatMul", ["a2", "w3"], ["m3"]), helper.make_node("Add", ["m3", "b3"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    inits = [init("fc1.weight", w(16, 8)), init("fc1.bias", w(16)), init("fc2.weight", w(12, 16)), init("fc2.bias", w(12)),
             init("w3", w(12, 5)), init("b3", w(5))]
    # Gemm's initializers have dotted names, as PyTorch writes them.
    for n in nodes[:3:2]:
        n.input[1:] = [f"{n.name}.weight", f"{n.name}.bias"]
    return make(nodes, [vi("x", F, ["batch", 8])], [vi("logits", F, ["batch", 5]), vi("probs", F, ["batch", 5])], inits)


def shape_dim(nodes, src, axis, out):
    """Shape -> Gather -> Unsqueeze: one dim of `src` as a [1] tensor (what torch.onnx writes)."""
    nodes += [helper.make_node("Shape", [src], [out + "_shape"]),
              helper.make_node("Gather", [out + "_shape", f"c_{axis}"], [out + "_s"], axis=0),
              helper.make_node("Unsqueeze", [out + "_s", "c_axes0"], [out])]


def encoder_model(layers=2, D=16, H=2, V=30, P=32, F_=32):
    hd = D // H
    nodes, inits = [], [init("c_0", np.array(0, np.int64)), init("c_1", np.array(1, np.int64)),
                        init("c_axes0", np.array([0], np.int64)), init("c_axes12", np.array([1, 2], np.int64)),
                        init("c_heads", np.array([H, hd], np.int64)), init("c_D", np.array([D], np.int64)),
                        init("c_one", np.array(1.0, np.float32)), init("c_neg", np.array(-10000.0, np.float32)),
                        init("c_scale", np.array(np.sqrt(hd), np.float32)), init("c_sqrt2", np.array(np.sqrt(2), np.float32)),
                        init("c_half", np.array(0.5, np.float32)), init("c_start", np.array([0], np.int64)),
                        init("embeddings.word_embeddings.weight", w(V, D)),
                        init("embeddings.position_embeddings.weight", w(P, D))]
    N = helper.make_node
    shape_dim(nodes, "input_ids", 0, "B")
    shape_dim(nodes, "input_ids", 1, "T")
    nodes += [N("Gather", ["embeddings.word_embeddings.weight", "input_ids"], ["tok"]),
              N("Slice", ["embeddings.position_embeddings.weight", "c_start", "T", "c_axes0"], ["pos"]),
              N("Add", ["tok", "pos"], ["x0"]),
              N("Cast", ["attention_mask"], ["maskf"], to=F), N("Sub", ["c_one", "maskf"], ["inv"]),
              N("Mul", ["inv", "c_neg"], ["bias0"]), N("Unsqueeze", ["bias0", "c_axes12"], ["mask_bias"]),
              N("Concat", ["B", "T", "c_heads"], ["heads_shape"], axis=0),
              N("Concat", ["B", "T", "c_D"], ["model_shape"], axis=0)]
    x = "x0"
    for l in range(layers):
        p = f"encoder.layer.{l}."
        def lin(src, name, n_in, n_out, out):
            inits.extend([init(p + name + ".weight", w(n_in, n_out) * 0.3), init(p + name + ".bias", w(n_out) * 0.1)])
            nodes.extend([N("MatMul", [src, p + name + ".weight"], [out + "_mm"], name=f"/{p}{name}/MatMul"),
                          N("Add", [out + "_mm", p + name + ".bias"], [out], name=f"/{p}{name}/Add")])
        def heads(src, out, perm):
            nodes.extend([N("Reshape", [src, "heads_shape"], [out + "_r"]), N("Transpose", [out + "_r"], [out], perm=perm)])
        lin(x, "q", D, D, f"q{l}")
        lin(x, "k", D, D, f"k{l}")
        lin(x, "v", D, D, f"v{l}")
        heads(f"q{l}", f"qh{l}", [0, 2, 1, 3])
        heads(f"k{l}", f"kh{l}", [0, 2, 3, 1])
        heads(f"v{l}", f"vh{l}", [0, 2, 1, 3])
        nodes += [N("MatMul", [f"qh{l}", f"kh{l}"], [f"s{l}"]), N("Div", [f"s{l}", "c_scale"], [f"ss{l}"]),
                  N("Add", [f"ss{l}", "mask_bias"], [f"sm{l}"]), N("Softmax", [f"sm{l}"], [f"p{l}"], axis=-1),
                  N("MatMul", [f"p{l}", f"vh{l}"], [f"ctx{l}"]), N("Transpose", [f"ctx{l}"], [f"ctxt{l}"], perm=[0, 2, 1, 3]),
                  N("Reshape", [f"ctxt{l}", "model_shape"], [f"ctxr{l}"])]
        lin(f"ctxr{l}", "attention.output.dense", D, D, f"o{l}")
        inits += [init(p + "ln1.weight", 1 + 0.1 * w(D)), init(p + "ln1.bias", 0.1 * w(D)),
                  init(p + "ln2.weight", 1 + 0.1 * w(D)), init(p + "ln2.bias", 0.1 * w(D))]
        nodes += [N("Add", [x, f"o{l}"], [f"r{l}"]),
                  N("LayerNormalization", [f"r{l}", p + "ln1.weight", p + "ln1.bias"], [f"h{l}"], axis=-1, epsilon=1e-12)]
        lin(f"h{l}", "intermediate.dense", D, F_, f"f{l}")
        # GELU as torch.onnx writes it before opset 20: x * 0.5 * (1 + erf(x / sqrt 2)).
        nodes += [N("Div", [f"f{l}", "c_sqrt2"], [f"g1{l}"]), N("Erf", [f"g1{l}"], [f"g2{l}"]),
                  N("Add", [f"g2{l}", "c_one"], [f"g3{l}"]), N("Mul", [f"f{l}", f"g3{l}"], [f"g4{l}"]),
                  N("Mul", [f"g4{l}", "c_half"], [f"g{l}"])]
        lin(f"g{l}", "output.dense", F_, D, f"d{l}")
        nodes += [N("Add", [f"h{l}", f"d{l}"], [f"r2{l}"]),
                  N("LayerNormalization", [f"r2{l}", p + "ln2.weight", p + "ln2.bias"], [f"x{l + 1}"], axis=-1, epsilon=1e-12)]
        x = f"x{l + 1}"
    nodes += [N("Identity", [x], ["last_hidden_state"]),
              N("ReduceMean", [x], ["pooled"], axes=[1], keepdims=0)]
    return make(nodes, [vi("input_ids", I64, ["batch", "sequence"]), vi("attention_mask", I64, ["batch", "sequence"])],
                [("last_hidden_state", F), ("pooled", F)], inits)


def cnn_model():
    N = helper.make_node
    nodes = [N("Conv", ["image", "conv1.weight", "conv1.bias"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             N("BatchNormalization", ["c1", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"], ["b1"]),
             N("Relu", ["b1"], ["r1"]),
             N("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             N("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             N("Relu", ["c2"], ["r2"]),
             N("GlobalAveragePool", ["r2"], ["g"]),
             N("Flatten", ["g"], ["f"], axis=1),
             N("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    inits = [init("conv1.weight", w(6, 3, 3, 3) * 0.5), init("conv1.bias", w(6)), init("bn1.weight", 1 + 0.1 * w(6)),
             init("bn1.bias", w(6)), init("bn1.running_mean", w(6) * 0.1), init("bn1.running_var", np.abs(w(6)) + 0.5),
             init("conv2.weight", w(8, 6, 3, 3) * 0.3), init("conv2.bias", w(8)), init("fc.weight", w(4, 8)),
             init("fc.bias", w(4))]
    return make(nodes, [vi("image", F, ["N", 3, "height", "width"])], [("logits", F)], inits)


def control_model(D=4):
    """If on a data-dependent condition, a counted Loop with a scan output, and a Loop that
    runs while a data-dependent condition holds."""
    N = helper.make_node
    then_g = helper.make_graph([N("Mul", ["x", "two"], ["t_out"])], "then", [], [vi("t_out", F, None)])
    else_g = helper.make_graph([N("Sub", ["x", "one_f"], ["e_out"])], "else", [], [vi("e_out", F, None)])
    body = helper.make_graph(
        [N("Identity", ["cond_in"], ["cond_out"]), N("MatMul", ["h_in", "W"], ["hw"]),
         N("Cast", ["iter"], ["iter_f"], to=F), N("Add", ["hw", "iter_f"], ["hwi"]), N("Tanh", ["hwi"], ["h_out"]),
         N("ReduceSum", ["h_out", "axes1"], ["row_sum"], keepdims=0)],
        "body", [vi("iter", I64, []), vi("cond_in", BOOL, []), vi("h_in", F, None)],
        [vi("cond_out", BOOL, []), vi("h_out", F, None), vi("row_sum", F, None)])
    halve = helper.make_graph(
        [N("Mul", ["g_in", "half"], ["g_out"]), N("Abs", ["g_out"], ["ga"]), N("ReduceMax", ["ga"], ["gm"], keepdims=0),
         N("Greater", ["gm", "tenth"], ["c_out"])],
        "halve", [vi("i2", I64, []), vi("c2", BOOL, []), vi("g_in", F, None)],
        [vi("c_out", BOOL, []), vi("g_out", F, None)])
    nodes = [N("ReduceSum", ["x"], ["total"], keepdims=0), N("Greater", ["total", "zero_f"], ["positive"]),
             N("If", ["positive"], ["y"], then_branch=then_g, else_branch=else_g),
             N("Loop", ["trips", "", "y"], ["h", "sums"], body=body),
             N("Loop", ["max_trips", "start", "h"], ["g"], body=halve)]
    inits = [init("two", np.array(2.0, np.float32)), init("one_f", np.array(1.0, np.float32)),
             init("zero_f", np.array(0.0, np.float32)), init("W", w(D, D) * 0.5), init("axes1", np.array([1], np.int64)),
             init("trips", np.array(3, np.int64)), init("half", np.array(0.5, np.float32)),
             init("tenth", np.array(0.1, np.float32)), init("max_trips", np.array(50, np.int64)),
             init("start", np.array(True))]
    return make(nodes, [vi("x", F, ["B", D])], [("y", F), ("h", F), ("sums", F), ("g", F)], inits)


def detect_model(C=5):
    """Scores above a threshold (NonZero), then the best K = min(3, count) of them (TopK)."""
    N = helper.make_node
    nodes = [N("ReduceMax", ["scores"], ["best"], axes=[1], keepdims=0), N("Greater", ["best", "thresh"], ["keep"]),
             N("NonZero", ["keep"], ["nz"]), N("Squeeze", ["nz", "axes0"], ["idx"]),
             N("Gather", ["best", "idx"], ["kept"]), N("Gather", ["boxes", "idx"], ["kept_boxes"]),
             N("Shape", ["kept"], ["count"]), N("Min", ["count", "k_max"], ["k"]),
             N("TopK", ["kept", "k"], ["top_scores", "order"]),
             N("Gather", ["kept_boxes", "order"], ["top_boxes"], axis=0)]
    inits = [init("thresh", np.array(0.0, np.float32)), init("axes0", np.array([0], np.int64)),
             init("k_max", np.array([3], np.int64))]
    return make(nodes, [vi("scores", F, ["anchors", C]), vi("boxes", F, ["anchors", 4])],
                [("top_scores", F), ("top_boxes", F), ("idx", I64)], inits)


class ModelTest(ImportTest):
    def test_mlp(self):
        src = self.check(mlp_model(), [{"batch": 1}, {"batch": 4}, {"batch": 9}])
        self.assertIn("dim batch;", src)
        self.assertIn('param fc1_weight: f32[16, 8] from "fc1.weight";', src)
        self.assertIn("-> (logits: f32[batch, 5], probs: f32[batch, 5])", src)

    def test_transformer_encoder(self):
        shapes = [{"batch": 1, "sequence": 1}, {"batch": 2, "sequence": 7}, {"batch": 3, "sequence": 32}]
        src = self.check(encoder_model(), shapes, rtol=2e-4, atol=2e-5, ints=(0, 2), name="encoder")
        # The exporter's shape subgraphs became dims: no Shape/Concat values are computed.
        self.assertIn("reshape(", src)
        self.assertRegex(src, r"reshape\(\w+, \[batch, sequence, 2, 8\]\)")
        self.assertRegex(src, r"reshape\(\w+, \[batch, sequence, 16\]\)")
        self.assertNotIn("arange(", src)
        self.assertIn("nn.layer_norm(", src)
        # Ordinary source: the shape tools and the memory planner work on it.
        dnn = os.path.join(self.tmp, "encoder.dnn")
        p = self.dnnc("shapes", dnn, "--bind", "batch=2,sequence=7")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"pooled\s+output\s+f32\[2, 16\]")
        p = subprocess.run([self.exe, "repl", dnn], input=":mem\n", capture_output=True, text=True, timeout=600)
        self.assertRegex(p.stdout, r"^arena: .*batch.*sequence.* bytes", p.stdout + p.stderr)

    def test_folded_scale_is_a_literal(self):
        src = self.check(OP_CASES["scale_from_shape"][0](), BT[:1])
        self.assertIn("let y = x * 0.5;", src)

    def test_float_positions_have_the_sequence_length(self):
        src = self.check(OP_CASES["Range_float_to_length"][0](), BT[:1])
        self.assertIn("cast(arange(T), f32)", src)
        self.assertIn("cast(arange(5, T, 3), f32)", src)

    def test_cnn(self):
        src = self.check(cnn_model(), [{"N": 1, "height": 8, "width": 8}, {"N": 2, "height": 11, "width": 6},
                                       {"N": 3, "height": 16, "width": 13}], rtol=2e-4, atol=2e-5)
        self.assertIn("dim height;", src)
        self.assertIn("conv2d(", src)

    def test_if_and_loop(self):
        src = self.check(control_model(), [{"B": 1}, {"B": 3}, {"B": 6}], seed=3)
        self.assertRegex(src, r"\n  if \w+ \{")
        self.assertRegex(src, r"for \w+ in 0\.\.3 \{")
        self.assertRegex(src, r"while \w+ and \w+ < 50 \{")

    def test_if_both_branches(self):
        # Inputs whose sums are positive and negative take each branch.
        model = control_model()
        dnn, weights = self.import_model(model)
        for sign in (1.0, -1.0):
            x = (sign * (np.abs(np.random.default_rng(1).standard_normal((2, 4))) + 0.1)).astype(np.float32)
            got = self.run_dnn(dnn, weights, {"x": x}, ["y", "g"])
            want = run_model(model, {"x": x})
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[1], want[3], rtol=1e-5, atol=1e-6)

    def test_nonzero_topk(self):
        src = self.check(detect_model(), [{"anchors": 6}, {"anchors": 20}, {"anchors": 50}], seed=5)
        self.assertIn("nonzero(", src)
        self.assertIn("topk(", src)
        self.assertRegex(src, r"topk\(\w+, min\(3, N\d\)\)")

    def test_dims_that_only_running_tells(self):
        """A Loop that grows its carried value, and an If whose branches give different
        lengths: fresh dims named by annotations; an axis with no dim_param gets a dim."""
        N = helper.make_node
        grow = helper.make_graph([N("Identity", ["c_in"], ["c_out"]), N("Concat", ["acc_in", "x"], ["acc_out"], axis=0)],
                                 "grow", [vi("it", I64, []), vi("c_in", BOOL, []), vi("acc_in", F, None)],
                                 [vi("c_out", BOOL, []), vi("acc_out", F, None)])
        then_g = helper.make_graph([N("Concat", ["x", "x"], ["two"], axis=0)], "then", [], [vi("two", F, None)])
        else_g = helper.make_graph([N("Identity", ["x"], ["one"])], "else", [], [vi("one", F, None)])
        nodes = [N("Loop", ["n", "", "x"], ["grown"], body=grow),
                 N("ReduceSum", ["x"], ["s"], keepdims=0), N("Greater", ["s", "z"], ["c"]),
                 N("If", ["c"], ["picked"], then_branch=then_g, else_branch=else_g)]
        m = make(nodes, [vi("x", F, [None, 3]), vi("n", I64, [])], [("grown", F), ("picked", F)],
                 [init("z", np.array(0.0, np.float32))])
        dnn, weights = self.import_model(m)
        src = read(dnn)
        self.assertIn("dim x_d0;  # axis 0 of 'x' (no dim_param)", src)
        self.assertRegex(src, r"let grown: f32\[N\d, 3\] = ")
        self.assertRegex(src, r"let picked: f32\[N\d, 3\] = ")
        rng = np.random.default_rng(2)
        for rows, trips in ((1, 0), (2, 3), (4, 5)):
            x = rng.standard_normal((rows, 3)).astype(np.float32)
            feeds = {"x": x, "n": np.array(trips, np.int64)}
            got = self.run_dnn(dnn, weights, feeds, ["grown", "picked"])
            for g, want in zip(got, run_model(m, feeds)):
                np.testing.assert_allclose(g, want, rtol=1e-6)


class ErrorTest(ImportTest):
    def import_fails(self, data, name="bad"):
        path = os.path.join(self.tmp, name + ".onnx")
        with open(path, "wb") as f:
            f.write(data)
        out = os.path.join(self.tmp, name + ".dnn")
        p = self.dnnc("import", path, "-o", out)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertNotIn("internal error", p.stderr)
        self.assertEqual(sorted(os.listdir(self.tmp)), [name + ".onnx"], "a failed import wrote files")
        return p.stderr.replace(path, "MODEL")

    def test_unsupported_ops_listed_at_once(self):
        N = helper.make_node
        then_g = helper.make_graph([N("Det", ["x"], ["d"], name="det_then")], "then", [], [vi("d", F, None)])
        nodes = [N("Relu", ["x"], ["r"]), N("Det", ["r"], ["d1"], name="det1"), N("Hardmax", ["r"], ["h"], name="hm"),
                 N("Det", ["h"], ["d2"]), N("ReduceSum", ["r"], ["s"]), N("Greater", ["s", "z"], ["c"]),
                 N("If", ["c"], ["y"], then_branch=then_g, else_branch=then_g, name="if0"),
                 N("Foo", ["r"], ["f"], domain="com.example", name="custom")]
        m = make(nodes, [vi("x", F, ["B", 3, 3])], [("y", F), ("d1", F), ("d2", F), ("f", F)],
                 [init("z", np.array(0.0, np.float32))])
        err = self.import_fails(m.SerializeToString())
        # Subgraphs in the order the file lists the If's attributes (helper.make_node sorts them).
        self.assertEqual(err.strip(),
                         "dnnc: error: MODEL: 3 ONNX op types are not supported by dnnc import (6 nodes); nothing was written:\n"
                         "  Det: 'det1', node 3, 'det_then' (in the else_branch of If 'if0'), 'det_then' (in the then_branch of If 'if0')\n"
                         "  Hardmax: 'hm'\n"
                         "  com.example.Foo: 'custom'")

    def test_malformed_and_truncated_files(self):
        good = mlp_model().SerializeToString()
        for data in (b"", b"not an onnx model at all", good[:len(good) // 2], good[:7], bytes(range(256)) * 4):
            err = self.import_fails(data)
            self.assertRegex(err, r"^dnnc: error: MODEL: not an ONNX model: ", err)

    def test_unsupported_form_names_the_node(self):
        m = op_model("Slice", [X3, ("s", np.array([2], np.int64)), ("e", np.array([0], np.int64)),
                               ("a", np.array([2], np.int64)), ("p", np.array([-1], np.int64))])
        err = self.import_fails(m.SerializeToString())
        self.assertEqual(err.strip(), "dnnc: error: MODEL: Slice 'slice0': step -1 on axis 2: only positive steps are supported")

    def test_invalid_graphs(self):
        # Graphs the ONNX checker would refuse are errors naming the node, never a crash.
        cases = {
            "Transpose 'transpose0': axis 5 is out of range for rank 3": op_model("Transpose", [X3], perm=[5, 0, 1]),
            "MatMul 'matmul0': MatMul takes inputs of rank 1 or more": op_model("MatMul", [("x", F, []), ("y", F, [])]),
            "TopK 'topk0': input 1 is missing": op_model("TopK", [X3], n_out=2),
            "If 'if0': has no then_branch or else_branch graph": op_model("If", [("c", BOOL, [])]),
            "Loop 'loop0': has no body graph": op_model("Loop", [("m", np.array(3, np.int64)), None, X3]),
            # An attribute of another kind than the op's (it was read as absent: axis -1).
            "Softmax 'softmax0': its attribute 'axis' must be an int": op_model("Softmax", [X3], axis="one"),
            # Shape data folded past 64 bits (an internal error).
            "Mul (node 1): its shape arithmetic overflows 64 bits": make(
                [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Mul", ["s", "z"], ["d"]),
                 helper.make_node("ConstantOfShape", ["d"], ["y"])], [vi("x", F, ["A", 3])], [("y", F)],
                [init("z", np.array([2 ** 62, 2 ** 62], np.int64))]),
            "Shape (node 0): has no outputs": make([helper.make_node("Shape", ["x"], []),
                                                     helper.make_node("Relu", ["x"], ["y"])], [vi(*X3)], [("y", F)]),
        }
        for want, m in cases.items():
            err = self.import_fails(m.SerializeToString())
            self.assertEqual(err.strip(), "dnnc: error: MODEL: " + want)

    def test_unsupported_input_dtype(self):
        m = op_model("Abs", [("x", TensorProto.DOUBLE, ["B"])])
        err = self.import_fails(m.SerializeToString())
        self.assertEqual(err.strip(), "dnnc: error: MODEL: graph input 'x' is double, for which dnnc has no dtype")

    def test_names_become_identifiers(self):
        N = helper.make_node
        m = make([N("Relu", ["input.1"], ["/layer.0/Relu_output_0"]), N("Neg", ["/layer.0/Relu_output_0"], ["output:0"])],
                 [vi("input.1", F, ["batch size", 2])], [("output:0", F)])
        dnn, _ = self.import_model(m)
        src = read(dnn)
        self.assertIn("dim batch_size;  # dim_param \"batch size\"", src)
        self.assertIn("model main(input_1: f32[batch_size, 2]) -> (output_0: f32[batch_size, 2])", src)
        self.assertIn("let layer_0_Relu_output_0 = relu(input_1);", src)
        x = np.array([[1.0, -2.0]], np.float32)
        np.testing.assert_array_equal(self.run_dnn(dnn, None, {"input.1": x}, ["output:0"])[0], -np.maximum(x, 0))

    def test_identifier_names_go_first(self):
        # An input already named `a_b` keeps that name beside one named `a.b` (which was
        # given `a_b`, so that --input a_b fed the other input).
        m = make([helper.make_node("Sub", ["a.b", "a_b"], ["y"])], [vi("a.b", F, [1]), vi("a_b", F, [1])], [("y", F)])
        dnn, _ = self.import_model(m)
        self.assertIn("model main(a_b_1: f32[1], a_b: f32[1])", read(dnn))
        d = tempfile.mkdtemp(dir=self.tmp)
        np.save(os.path.join(d, "one.npy"), np.array([1], np.float32))
        np.save(os.path.join(d, "ten.npy"), np.array([10], np.float32))
        p = self.dnnc("run", dnn, "--out", d, "--input", f"a_b_1={d}/one.npy", "--input", f"a_b={d}/ten.npy")
        self.assertEqual(p.returncode, 0, p.stderr)
        np.testing.assert_array_equal(np.load(os.path.join(d, "y.npy")), [-9])

    def test_initializer_names_with_braces_and_quotes(self):
        # `from "..."` names are patterns: an initializer named `w.{l}` is written `w.{{l}}`
        # (it stacked w.0, w.1, w.2 instead), and a quote is escaped (a parse error).
        N = helper.make_node
        nodes = [N("Add", ["x", "w.{l}"], ["t"]), N("Add", ["t", 'q"uote\\'], ["t2"])]
        nodes += [N("Unsqueeze", [f"w.{i}", "ax"], [f"u{i}"]) for i in range(3)]
        nodes += [N("Concat", ["u0", "u1", "u2"], ["c"], axis=0), N("Mul", ["t2", "c"], ["y"])]
        inits = [init("w.{l}", np.array([1, 2, 3], np.float32)), init('q"uote\\', np.array([0.5, 0.5, 0.5], np.float32)),
                 init("ax", np.array([0], np.int64))] + [init(f"w.{i}", np.array(7 + i, np.float32)) for i in range(3)]
        m = make(nodes, [vi("x", F, [3])], [("y", F)], inits)
        src = self.check(m, [{}])
        self.assertIn('from "w.{{l}}";', src)
        self.assertIn('from "q\\"uote\\\\";', src)

    def test_softplus_keeps_large_and_tiny_values(self):
        # log(1 + exp(x)) was inf from x = 89 on; very negative x keep e^x.
        x = np.array([20, 50, 88, 89, 100, 1e30, 0, -1, -20, -50, -100, 1e-8, -np.inf, np.inf, np.nan], np.float32)
        dnn, _ = self.import_model(op_model("Softplus", [("x", F, [len(x)])]))
        got = self.run_dnn(dnn, None, {"x": x}, ["y0"])[0]
        x64 = x.astype(np.float64)
        with np.errstate(all="ignore"):
            want = np.maximum(x64, 0) + np.log1p(np.exp(-np.abs(x64)))
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=3e-7, atol=0)

    def test_bool_initializer_bytes(self):
        # Any nonzero byte of a bool initializer is true; they are written 0 or 1 (the
        # weights file dnnc wrote held a 2, which its own reader refused).
        raw = TensorProto(name="w", data_type=BOOL, dims=[4], raw_data=bytes([2, 0, 255, 1]))
        m = make([helper.make_node("And", ["x", "w"], ["a"]), helper.make_node("Or", ["a", "w2"], ["y"])],
                 [vi("x", BOOL, [4])], [("y", BOOL)], [raw, helper.make_tensor("w2", BOOL, [4], [3, 0, 1, 0])])
        dnn, weights = self.import_model(m)
        got = self.run_dnn(dnn, weights, {"x": np.array([1, 1, 1, 0], bool)}, ["y"])[0]
        np.testing.assert_array_equal(got, [True, False, True, False])

    def test_empty_axis_and_int64_min(self):
        # dim_value 0 is a size (it became a dim of range 1..inf), and -2^63 a literal that
        # parses ((-9223372036854775807 - 1)).
        src = self.check(op_model("Relu", [("x", F, [0, 3])]), [{}])
        self.assertIn("model main(x: f32[0, 3])", src)
        src = self.check(op_model("Add", [("x", I64, [2]), ("c", np.array(-2 ** 63, np.int64))], out_types=[I64]), [{}])
        self.assertIn("x + (-9223372036854775807 - 1)", src)

    def test_input_keeps_its_name_beside_a_dim_param(self):
        # An input named like a dim_param (Einsum's b of [b, 4, 5]) keeps its name, the
        # one `dnnc run --input b=...` takes; the dim is renamed (it was the input: b_1).
        m = make([helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")],
                 [vi("a", F, ["b", "i", 4]), vi("b", F, ["b", 4, 5])], [("y", F)])
        dnn, _ = self.import_model(m)
        src = read(dnn)
        self.assertIn("dim b_1;  # dim_param \"b\"", src)
        self.assertIn("model main(a: f32[b_1, i, 4], b: f32[b_1, 4, 5])", src)
        a, b = R.standard_normal((2, 3, 4)).astype(np.float32), R.standard_normal((2, 4, 5)).astype(np.float32)
        np.testing.assert_allclose(self.run_dnn(dnn, None, {"a": a, "b": b}, ["y"])[0], a @ b, rtol=1e-5, atol=1e-5)

    def test_translation_that_does_not_check(self):
        # ONNX leaves B == T to run time; dnnc's checker cannot prove it, so the import
        # stops with the checker's diagnostic and the translation, writing nothing.
        m = op_model("Add", [("x", F, ["B"]), ("y", F, ["T"])])
        err = self.import_fails(m.SerializeToString())
        self.assertIn("dnnc: error: MODEL: the translated model does not type-check; nothing was written:", err)
        self.assertIn("[unprovable-equality]", err)
        self.assertIn("let y0 = x + y;", err)

    def test_usage_errors(self):
        path = os.path.join(self.tmp, "m.onnx")
        onnx.save(mlp_model(), path)
        saved = read_bytes(path)
        for args, want in ((["import", path], "dnnc: error: no -o OUT.dnn"),
                           (["import", "-o", "x.dnn"], "dnnc: error: no input file"),
                           (["import", path, "-o", os.path.join(self.tmp, "m.dnn"), "--model-name", "2x"],
                            "dnnc: error: --model-name '2x' is not an identifier"),
                           # Outputs that would overwrite the model or each other (they did).
                           (["import", path, "-o", path], f"dnnc: error: -o '{path}' is the model being imported ('{path}')"),
                           (["import", path, "-o", "m2.dnn", "--weights-out", path],
                            f"dnnc: error: --weights-out '{path}' is the model being imported ('{path}')"),
                           (["import", path, "-o", "m2.dnn", "--weights-out", "m2.dnn"],
                            "dnnc: error: --weights-out 'm2.dnn' is the .dnn file -o writes ('m2.dnn')")):
            p = self.dnnc(*args)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(p.stderr.splitlines()[0], want)
        self.assertEqual(os.listdir(self.tmp), ["m.onnx"])
        self.assertEqual(read_bytes(path), saved)
        src = os.path.join(self.tmp, "s.dnn")
        with open(src, "w") as f:
            f.write("model main(x: f32[2]) -> f32[2] {\n  return x;\n}\n")
        p = self.dnnc("build", src, "-o", src)
        self.assertEqual((p.returncode, p.stderr), (2, f"dnnc: error: -o '{src}' is the source being built ('{src}')\n"))
        # Any file a command reads (a source, an imported module, training data) is never
        # written over: emit, opt and build -o, train --save replaced them.
        lib, user = os.path.join(self.tmp, "lib.dnn"), os.path.join(self.tmp, "user.dnn")
        with open(lib, "w") as f:
            f.write("fn twice(x: f32[N]) -> f32[N] { return x * 2.0; }\n")
        with open(user, "w") as f:
            f.write("import lib;\nparam w: f32[2] = zeros();\nmodel main(x: f32[2]) -> f32[] {\n  return sum(lib.twice(x * w));\n}\n")
        data = os.path.join(self.tmp, "x.npy")
        np.save(data, np.ones((4, 2), np.float32))
        for args, code, option, out, read in (
                (["emit", src, "--emit=ir", "-o", src], 2, "-o", src, src),
                (["opt", src, "-o", src], 2, "-o", src, src),
                (["build", user, "-o", lib], 2, "-o", lib, lib),
                (["emit", user, "--emit=ir", "-o", lib], 2, "-o", lib, lib),
                (["train", user, "--data", f"x={data}", "--steps", "1", "--save", data], 1, "--save", data, data),
                (["train", user, "--data", f"x={data}", "--steps", "1", "--save", lib], 1, "--save", lib, lib)):
            before = {n: read_bytes(os.path.join(self.tmp, n)) for n in sorted(os.listdir(self.tmp))}
            p = self.dnnc(*args)
            want = (f"dnnc: error: {option} {out}: '{out}' is a file this command reads ('{read}')" if args[0] == "train"
                    else f"dnnc: error: {option} '{out}' is a file this command reads ('{read}')")
            self.assertEqual((p.returncode, p.stderr.splitlines()[-1]), (code, want), args)
            self.assertEqual({n: read_bytes(os.path.join(self.tmp, n)) for n in sorted(os.listdir(self.tmp))}, before, args)
        for path in (src, lib, user, data):
            os.remove(path)
        p = self.dnnc("import", os.path.join(self.tmp, "missing.onnx"), "-o", os.path.join(self.tmp, "m.dnn"))
        self.assertEqual(p.returncode, 1)
        self.assertIn("missing.onnx", p.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    a, rest = ap.parse_known_args()
    ImportTest.exe = a.dnnc
    del globals()['ImportTest']  # a base: no tests of its own
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
