"""dnnc from Python (docs/python.md): load a model from .dnn source or a built artifact,
run it on NumPy arrays (or PyTorch tensors, through DLPack), ask it for its inputs,
outputs, dims, shapes and memory, and train a model's params.

    m = dnnc.load("model.dnn", device="cpu", weights="w.safetensors")
    y = m(tokens=np.array(...))

Every error dnnc reports is a dnnc.Error carrying dnnc's own text."""
import os

import numpy as _np

from . import _dnnc
from ._dnnc import Error

__all__ = ["Error", "Model", "load", "train"]


def _array(x):
    """An input as NumPy sees it. A DLPack producer that is not an ndarray (a PyTorch
    tensor on the CPU) is wrapped without a copy; anything else is left to the native
    module, which reads C-contiguous arrays of the input's dtype in place."""
    if isinstance(x, _np.ndarray) or not hasattr(x, "__dlpack__"):
        return x
    return _np.from_dlpack(x)


def _files(paths):
    """One path or several (weights files, include folders) as a list of strings: a string
    is one path, not its characters."""
    if paths is None:
        return []
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


class Model:
    """A loaded model. Call it with its inputs (positionally in order, or by name): one
    output comes back as an array, several as a tuple in the model's order."""

    def __init__(self, native):
        self._m = native

    def __call__(self, *args, **inputs):
        return self._m(*[_array(a) for a in args], **{k: _array(v) for k, v in inputs.items()})

    def run(self, *args, **inputs):
        """As calling the model, but the outputs come back as a dict by output name."""
        out = self(*args, **inputs)
        if not isinstance(out, tuple):
            out = (out,)
        return dict(zip(self.outputs, out))

    @property
    def name(self):
        return self._m.name

    @property
    def inputs(self):
        """{name: type} of the inputs in order, dims symbolic ("f32[B, T, D]")."""
        return self._m.inputs

    @property
    def outputs(self):
        """{name: type} of the outputs in order (out0, out1, ... where unnamed)."""
        return self._m.outputs

    @property
    def dims(self):
        """{dim: (lo, hi)}: each dim's range (hi None: unbounded)."""
        return self._m.dims

    @property
    def device(self):
        """The device it runs on, e.g. "cpu, 8 threads", or "ref" (the interpreter)."""
        return self._m.device

    @property
    def input_copies(self):
        """Inputs copied so far because their layout was not the model's (C-contiguous,
        the input's dtype); inputs with the model's layout are read in place."""
        return self._m.input_copies

    def shapes(self, **dims):
        """Every named value with its type under the given dims, as `dnnc shapes --json`:
        {name: {"type", "dtype", "dims", "class", "line", "name"}}."""
        return {v["name"]: v for v in self._m.shapes(**dims)["values"]}

    def memory(self, **dims):
        """The bytes `dnnc run` plans (as the REPL's :mem): arena, late_arena, params,
        param_tensors, inputs, outputs; ints where every dim they use is given, else
        formulas of the dims (str)."""
        return self._m.memory(**dims)

    def solve_memory(self, limit, dim, **dims):
        """The largest value of `dim` whose arena fits `limit` (bytes, or "16GiB"), the
        other dims given (as the REPL's :solve mem <= LIMIT for DIM); None when none fits."""
        return self._m.solve_memory(limit, dim, **dims)

    def __repr__(self):
        ins = ", ".join(f"{k}: {v}" for k, v in self.inputs.items())
        outs = ", ".join(f"{k}: {v}" for k, v in self.outputs.items())
        return f"<dnnc.Model {self.name}({ins}) -> ({outs}) on {self.device}>"


def load(path, model=None, device="auto", weights=None, include=(), strict=False, random_params=False, seed=0):
    """Loads `path` (.dnn source, compiled now, or an artifact from `dnnc build`).
    model: which model of the file (default main, or the only one); device: auto, cpu,
    cuda, cuda-sim or ref; weights: a .safetensors file, a *.safetensors.index.json or a
    list of them (params by name or `from` name, as `dnnc run --weights`). Without
    weights every param comes from its initializer (seed), each named in a warning; with
    them a missing param is an error unless random_params."""
    native = _dnnc.load(os.fspath(path), model or "", device, _files(weights), _files(include), strict,
                        random_params, seed)
    return Model(native)


def train(path, data, model=None, optimizer="sgd", lr=1e-3, batch=32, epochs=1, steps=0, weights=None, save=None,
          save_every=0, resume=None, seed=0, device="auto", weight_decay=0.0, momentum=None, include=(), strict=False):
    """Trains the params of a model whose first output is its loss, as `dnnc train` does:
    data is {input name: array} with the sample axis first, sliced into batches of
    `batch`. Returns {"losses": [per step], "metrics": [per step], "params": {name:
    array}, "steps": n}; save writes the checkpoint `dnnc run --weights` reads (and
    SAVE.state for resume)."""
    arrays = {k: _array(v) for k, v in data.items()}
    return _dnnc.train(os.fspath(path), arrays, model or "", optimizer, lr, batch, epochs, steps, _files(weights),
                       os.fspath(save) if save else "", save_every, os.fspath(resume) if resume else "", seed, device,
                       weight_decay, momentum, _files(include), strict)
