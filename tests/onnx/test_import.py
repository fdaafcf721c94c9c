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


class ImportTest(unittest.TestCase):
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
        self.assertEqual(p.returncode, 0, f"dnnc run failed:\n{p.stderr}\n{open(dnn).read()}")
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
                    msg = f"{n} at {dims} vs {who}\n{open(dnn).read()}"
                    self.assertEqual(g.shape, w.shape, msg)
                    if np.issubdtype(w.dtype, np.floating):
                        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=msg)
                    else:
                        np.testing.assert_array_equal(g, w, err_msg=msg)
        return open(dnn).read()


def op_model(op, inputs, n_out=1, opset=OPSET, **attrs):
    """One node of `op`. `inputs`: (name, type, dims) graph inputs, or (name, array)
    initializers, or None for an omitted optional input."""
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
    return make([node], graph_inputs, [(o, F) for o in outs], inits, opset)


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
    **{f"compare_{op}": (lambda op=op: op_model(op, [X, ("b", F, ["B", "T"])]), BT) for op in
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
    "Slice_negative": (lambda: op_model("Slice", [X3, ("s", np.array([-2], np.int64)), ("e", np.array([-1], np.int64)),
                                                  ("a", np.array([2], np.int64))]), BT),
    "Gather_ids": (lambda: op_model("Gather", [("e", w(10, 4)), ("i", I64, ["B", "T"])]), BT),
    "Gather_scalar": (lambda: op_model("Gather", [X3, ("i", np.array(2, np.int64))], axis=2), BT),
    "Expand": (lambda: op_model("Expand", [("x", F, ["B", 1]), ("s", np.array([1, 3], np.int64))]), BT),
    "ConstantOfShape_Range": (lambda: make([helper.make_node("Shape", ["x"], ["s"]),
                                            helper.make_node("ConstantOfShape", ["s"], ["z"],
                                                             value=numpy_helper.from_array(np.array([2.5], np.float32))),
                                            helper.make_node("Gather", ["s", "one"], ["t"]),
                                            helper.make_node("Range", ["zero", "t", "one"], ["r"])],
                                           [vi(*X)], [("z", F), ("r", I64)],
                                           [init("one", np.array(1, np.int64)), init("zero", np.array(0, np.int64))]), BT),
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
    "TopK": (lambda: op_model("TopK", [X3, ("k", np.array([2], np.int64))], n_out=2), BT),
    "TopK_smallest_axis": (lambda: op_model("TopK", [X3, ("k", np.array([1], np.int64))], n_out=2, axis=1, largest=0), BT),
}


def make_op_test(name, build, shapes):
    def test(self):
        self.check(build(), shapes)
    return test


for _name, (_build, _shapes) in OP_CASES.items():
    setattr(ImportTest, f"test_op_{_name}", make_op_test(_name, _build, _shapes))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    a, rest = ap.parse_known_args()
    ImportTest.exe = a.dnnc
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
