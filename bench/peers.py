#!/usr/bin/env python3
"""dnnc against the tools a user would pick instead, on this CPU, side by side in one run:
PyTorch eager (MKL/oneDNN from pip), torch.compile(dynamic=True) and ONNX Runtime. Every
peer is optional: one that is not installed is skipped (bench/run.sh makes a venv with them).
With --device cuda, the same on an NVIDIA GPU: dnnc built with --target cuda, PyTorch on
"cuda" (synchronized after each call), ONNX Runtime where its CUDA provider is installed.

For each example model and shape (and a few single-op micro models: GEMM, matrix-vector,
GELU, layer norm, softmax) every tool gets the same weights, inputs and thread count. Rounds
are interleaved (dnnc, then each peer, then dnnc again ...) and each tool's figure is the
median over rounds of its per-call median, so a change in machine load hits all alike.
dnnc's time is `dnnc run ARTIFACT --repeat R` (one compiled artifact per model serves every
shape; the per-call time, not process start). Outputs are compared with dnnc's.

    bench/peers.py --dnnc build/dnnc [--threads N] [--repeat R] [--rounds K]
                   [--models mlp,transformer,lstm,convnet,micro] [--peers eager,compile,ort]
                   (a micro model by itself too: --models gelu,layernorm,softmax)
                   [--shapes "B=1,T=512;B=4,T=512"] [--variant=--no-fuse-attention]...
                   [--run-variant=--walk-loops]... [--device cuda]

A --variant is dnnc built with those flags too, one more column interleaved with the rest
(e.g. a pass turned off, to measure what it gives); a --run-variant runs the plain build
with those `dnnc run` flags (e.g. loops walked op by op); dnnc/best compares the plain build.

Prints one row per (model, shape): milliseconds per call for each tool, dnnc/best-peer and
the largest |difference| from dnnc's output; GF/s for the micro GEMMs. dnnc/best-peer is
paired: the median over rounds of each round's dnnc time over that round's best peer time,
so that a slow stretch of the machine (this VM's speed drifts by tens of percent over
seconds) weighs on both sides of a ratio rather than on whichever tool it fell on.
"""
import argparse
import importlib.util
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "numerics"))
from dnnc_test_util import write_safetensors  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_ORT = importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None
if HAVE_TORCH:
    import torch
    import torch.nn.functional as F

DEVICE = "cpu"  # --device: where every tool runs


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---- the example models: weights (NumPy) and the same forward pass in PyTorch -----------

def mlp_weights(rng):
    return {"w1": f32(rng, 784, 512, scale=0.05), "b1": f32(rng, 512), "w2": f32(rng, 512, 10, scale=0.05), "b2": f32(rng, 10)}


def mlp_torch(w, x):
    return torch.softmax(torch.relu(x @ w["w1"] + w["b1"]) @ w["w2"] + w["b2"], -1)


D, H, L, V = 256, 4, 2, 1000


def transformer_weights(rng):
    return {"wte": f32(rng, V, D, scale=0.02), "wpe": f32(rng, 2048, D, scale=0.02),
            "ln_g": 1 + f32(rng, L, 2, D, scale=0.1), "ln_b": f32(rng, L, 2, D, scale=0.1),
            "wqkv": f32(rng, L, D, 3 * D, scale=0.05), "wo": f32(rng, L, D, D, scale=0.05),
            "w1": f32(rng, L, D, 4 * D, scale=0.05), "w2": f32(rng, L, 4 * D, D, scale=0.05)}


def transformer_torch(w, tokens):
    b, t = tokens.shape
    x = w["wte"][tokens.long()] + w["wpe"][:t]
    heads = lambda z: z.reshape(b, t, H, D // H).transpose(1, 2)
    for l in range(L):
        h = F.layer_norm(x, (D,), w["ln_g"][l, 0], w["ln_b"][l, 0])
        q, k, v = (h @ w["wqkv"][l]).split(D, -1)
        # PyTorch's fused attention: what a user of torch would write.
        att = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + att.transpose(1, 2).reshape(b, t, D) @ w["wo"][l]
        x = x + F.gelu(F.layer_norm(x, (D,), w["ln_g"][l, 1], w["ln_b"][l, 1]) @ w["w1"][l]) @ w["w2"][l]
    return x @ w["wte"].T


def lstm_weights(rng):
    return {"wx": f32(rng, 64, 512, scale=0.1), "wh": f32(rng, 128, 512, scale=0.1), "b": f32(rng, 512, scale=0.1),
            "wout": f32(rng, 128, 10, scale=0.1)}


def lstm_torch(w, xs):
    b, t, _ = xs.shape
    h = xs.new_zeros(b, 128)
    c = xs.new_zeros(b, 128)
    for s in range(t):
        i, f, g, o = (xs[:, s] @ w["wx"] + h @ w["wh"] + w["b"]).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    return h @ w["wout"]


def convnet_weights(rng):
    return {"w1": f32(rng, 16, 3, 3, 3, scale=0.3), "g1": 1 + f32(rng, 16, scale=0.1), "b1": f32(rng, 16, scale=0.1),
            "w2": f32(rng, 32, 16, 3, 3, scale=0.2), "g2": 1 + f32(rng, 32, scale=0.1), "b2": f32(rng, 32, scale=0.1),
            "wfc": f32(rng, 32, 10, scale=0.3)}


def convnet_torch(w, img):
    block = lambda x, wt, g, b, stride: torch.relu(F.conv2d(x, wt, stride=stride, padding=1) * g[:, None, None] + b[:, None, None])
    a = block(img, w["w1"], w["g1"], w["b1"], 1)
    c = block(F.max_pool2d(a, 2), w["w2"], w["g2"], w["b2"], 2)
    return c.mean((2, 3)) @ w["wfc"]


class Model:
    """One benchmarked model: its .dnn source, weights, PyTorch forward, input and shapes.
    `flops(x)` (optional) turns a row's time into GF/s."""

    def __init__(self, source, weights, forward, input_name, shapes, flops=None, dynamic_export=True):
        self.source, self.weights, self.forward, self.input_name = source, weights, forward, input_name
        self.shapes, self.flops = shapes, flops
        # The LSTM's Python loop unrolls when traced to ONNX, so ORT gets one export per shape.
        self.dynamic_export = dynamic_export


def example(name):
    return open(os.path.join(EXAMPLES, name + ".dnn")).read()


MODELS = {
    "mlp": Model(example("mlp"), mlp_weights, lambda w, x: mlp_torch(w, x), "x",
                 [(f"B={b}", lambda r, b=b: f32(r, b, 784)) for b in (1, 16, 256)]),
    "transformer": Model(example("transformer"), transformer_weights, transformer_torch, "tokens",
                         [(f"B={b},T={t}", lambda r, b=b, t=t: r.integers(0, V, (b, t)).astype(np.int32))
                          for b, t in ((1, 16), (1, 128), (4, 128), (1, 512), (4, 512))]),
    "lstm": Model(example("lstm"), lstm_weights, lstm_torch, "xs",
                  [(f"B={b},T={t}", lambda r, b=b, t=t: f32(r, b, t, 64)) for b, t in ((1, 16), (8, 32), (32, 64))],
                  dynamic_export=False),
    "convnet": Model(example("convnet"), convnet_weights, convnet_torch, "img",
                     [(f"N={n},H=W={s}", lambda r, n=n, s=s: f32(r, n, 3, s, s)) for n, s in ((1, 32), (4, 64), (8, 96))]),
}

# Single ops the issue measured (GEMM efficiency, matrix-vector, GELU, layer norm, softmax)
# and a column sum.
MICRO = {
    "gemm": Model("dim M;\nparam w: f32[1024, 1024];\nmodel main(x: f32[M, 1024]) -> f32[M, 1024] {\n  return x @ w;\n}\n",
                  lambda r: {"w": f32(r, 1024, 1024, scale=0.03)}, lambda w, x: x @ w["w"], "x",
                  [("1024x1024x1024", lambda r: f32(r, 1024, 1024))], flops=lambda x: 2 * x.shape[0] * 1024 * 1024),
    "matvec": Model("dim M;\nparam w: f32[768, 3072];\nmodel main(x: f32[M, 768]) -> f32[M, 3072] {\n  return x @ w;\n}\n",
                    lambda r: {"w": f32(r, 768, 3072, scale=0.03)}, lambda w, x: x @ w["w"], "x",
                    [("1x768x3072", lambda r: f32(r, 1, 768))], flops=lambda x: 2 * x.shape[0] * 768 * 3072),
    "gelu": Model("dim M;\ndim N;\nmodel main(x: f32[M, N]) -> f32[M, N] {\n  return gelu(x);\n}\n",
                  lambda r: {}, lambda w, x: F.gelu(x), "x", [("512x1536", lambda r: f32(r, 512, 1536))]),
    "layernorm": Model("dim M;\ndim N;\nmodel main(x: f32[M, N]) -> f32[M, N] {\n"
                       "  let m = mean(x, -1, keepdims = true);\n  let c = x - m;\n"
                       "  return c * rsqrt(mean(c * c, -1, keepdims = true) + 1.0e-5);\n}\n",
                       lambda r: {}, lambda w, x: F.layer_norm(x, (384,), eps=1e-5), "x",
                       [("512x384", lambda r: f32(r, 512, 384))]),
    "softmax": Model("dim M;\ndim N;\nmodel main(x: f32[M, N]) -> f32[M, N] {\n  return softmax(x, -1);\n}\n",
                     lambda r: {}, lambda w, x: torch.softmax(x, -1), "x", [("512x512", lambda r: f32(r, 512, 512))]),
    # A sum over the batch (a bias's gradient): each output element's terms a row apart.
    "colsum": Model("dim M;\ndim N;\nmodel main(x: f32[M, N]) -> f32[N] {\n  return sum(x, axis = 0);\n}\n",
                    lambda r: {}, lambda w, x: x.sum(0), "x",
                    [(f"{m}x{n}", lambda r, m=m, n=n: f32(r, m, n)) for m, n in ((4096, 768), (1000, 4000), (100000, 16))]),
}


def median_ms(fn, repeat):
    # Warm up for a few calls and at least 10 ms first: a core that was idle runs its first
    # milliseconds slower on this VM, and dnnc's figure comes after its process start-up.
    start = time.perf_counter()
    for i in range(1000):
        fn()
        if i >= 1 and time.perf_counter() - start > 0.01:
            break
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def wait_until_idle(window=0.005, limit=2.0):
    """Returns once this process's own threads stop using the CPU (at most `limit` s).

    ONNX Runtime's and OpenMP's worker threads spin for a while after a call returns: run
    next, dnnc (a subprocess) shared the 2 cores with them and measured up to 1.8x slower
    (the MLP at B=16: 0.122 ms instead of 0.069, with this process using a whole core
    meanwhile). Each tool starts on cores the last one has left."""
    cpu = time.process_time  # every thread of this process
    deadline = time.perf_counter() + limit
    while time.perf_counter() < deadline:
        before = cpu()
        time.sleep(window)
        if cpu() - before < window / 10:
            return


class Dnnc:
    name = "dnnc"

    def __init__(self, exe, model, workdir, threads, repeat, flags=(), run_flags=()):
        self.exe, self.dir, self.threads, self.repeat, self.run_flags = exe, workdir, threads, repeat, list(run_flags)
        if flags or run_flags:
            self.name = "dnnc" + "".join([*flags, *run_flags])
        src = os.path.join(workdir, "model.dnn")
        open(src, "w").write(model.source)
        self.artifact = os.path.join(workdir, f"model{abs(hash(self.name))}.dnnc")
        target = ["--target", "cuda"] if DEVICE == "cuda" else []
        subprocess.run([exe, "build", src, "-o", self.artifact, *target, *flags], check=True, capture_output=True)
        self.weights = []
        self.input_name = model.input_name

    def set_weights(self, w):
        if w:
            path = os.path.join(self.dir, "w.safetensors")
            write_safetensors(path, w)
            self.weights = ["--weights", path]

    def run(self, x):
        """(ms per call, output) for input x."""
        np.save(os.path.join(self.dir, "x.npy"), x)
        out = os.path.join(self.dir, "out")
        p = subprocess.run([self.exe, "run", self.artifact, *self.weights, "--input", f"{self.input_name}={self.dir}/x.npy",
                            "--out", out, "--threads", str(self.threads), "--repeat", str(self.repeat), "--stats",
                            "--device", DEVICE, *self.run_flags],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.strip())
        ms = float(re.search(r"time per run: ([\d.]+) ms", p.stdout).group(1))
        return ms, np.load(os.path.join(out, "out0.npy"))


class Closure(torch.nn.Module if HAVE_TORCH else object):
    """A model's forward pass over fixed weights, as a module (for tracing and compiling)."""

    def __init__(self, forward, weights):
        super().__init__()
        self.forward_fn = forward
        self.names = list(weights)
        for k, v in weights.items():
            self.register_buffer(k, torch.from_numpy(v))

    def forward(self, x):
        return self.forward_fn({k: getattr(self, k) for k in self.names}, x)


class Eager:
    name = "eager"

    def __init__(self, model, weights, workdir, repeat):
        self.module, self.repeat = Closure(model.forward, weights).to(DEVICE), repeat

    def call(self, tx):
        out = self.module(tx)
        if DEVICE == "cuda":
            torch.cuda.synchronize()  # the time of the work, not of queueing it
        return out

    def run(self, x):
        tx = torch.from_numpy(x).to(DEVICE)
        with torch.inference_mode():
            out = self.call(tx)
            return median_ms(lambda: self.call(tx), self.repeat), out.cpu().numpy()


class Compiled(Eager):
    """torch.compile(dynamic=True): one compile meant to serve every shape; warm-up calls
    (compiles, recompiles) are not timed."""
    name = "compile"

    def __init__(self, model, weights, workdir, repeat):
        super().__init__(model, weights, workdir, repeat)
        self.module = torch.compile(self.module, dynamic=True)

    def run(self, x):
        tx = torch.from_numpy(x).to(DEVICE)
        with torch.inference_mode():
            for _ in range(2):
                self.call(tx)
        return super().run(x)


class OnnxRuntime:
    """ONNX Runtime on the model exported from PyTorch (dims as dynamic axes; per shape for
    a model whose loop unrolls when traced)."""
    name = "ort"

    def __init__(self, model, weights, workdir, repeat, threads):
        import onnxruntime
        self.ort, self.model, self.weights, self.dir = onnxruntime, model, weights, workdir
        self.repeat, self.threads, self.exported_for = repeat, threads, ()

    def session_for(self, x):
        key = None if self.model.dynamic_export else x.shape
        path = os.path.join(self.dir, "model.onnx")
        if key != self.exported_for or not os.path.exists(path):
            axes = {"x": {i: f"d{i}" for i in range(x.ndim)}} if self.model.dynamic_export else None
            torch.onnx.export(Closure(self.model.forward, self.weights), (torch.from_numpy(x),), path, dynamo=False,
                              input_names=["x"], output_names=["y"], dynamic_axes=axes)
            self.exported_for = key
        opts = self.ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        s = self.ort.InferenceSession(path, opts, providers=[PROVIDERS[DEVICE]])
        if s.get_providers()[0] != PROVIDERS[DEVICE]:  # ORT falls back to the CPU with only a message
            raise RuntimeError(f"onnxruntime could not start its {PROVIDERS[DEVICE]}")
        return s

    def run(self, x):
        # A session per timing, dropped after it: ORT's workers (spinning by default, which
        # ORT needs on this VM: without it ORT ran the MLP at B=256 2x slower) keep a core
        # busy while their session lives, which halved the speed of the next tool's process.
        s = self.session_for(x)
        for _ in range(3):  # warm-up: the first calls of a session grow its memory arena
            out = s.run(None, {"x": x})[0]
        ms = median_ms(lambda: s.run(None, {"x": x}), self.repeat)
        del s
        return ms, out


PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def main():
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=20, help="calls per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per row")
    ap.add_argument("--models", default="mlp,transformer,lstm,convnet,micro")
    ap.add_argument("--peers", default="eager,compile,ort")
    ap.add_argument("--shapes", default="", help="only these shape labels, ';'-separated (e.g. \"B=1,T=512;B=4,T=512\")")
    ap.add_argument("--variant", action="append", default=[], help="dnnc build flags of one more dnnc column (repeatable)")
    ap.add_argument("--run-variant", action="append", default=[], help="dnnc run flags of one more dnnc column (repeatable)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where every tool runs")
    a = ap.parse_args()
    DEVICE = a.device
    if HAVE_TORCH:  # f32 as f32: no TF32 tensor-core shortcuts in the peer's GPU kernels
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    warnings.filterwarnings("ignore")  # the ONNX exporter's deprecation notices
    wanted = a.peers.split(",") if a.peers else []
    peers = []
    for p in wanted:
        if p in ("eager", "compile") and not HAVE_TORCH:
            print(f"skipping {p}: torch is not installed")
        elif p == "ort" and not (HAVE_ORT and HAVE_TORCH):
            print("skipping ort: needs onnx, onnxruntime and torch (the models are exported from PyTorch)")
        elif p == "ort" and PROVIDERS[DEVICE] not in __import__("onnxruntime").get_available_providers():
            print(f"skipping ort: this onnxruntime has no {PROVIDERS[DEVICE]}")
        elif DEVICE == "cuda" and not (HAVE_TORCH and torch.cuda.is_available()) and p != "ort":
            print(f"skipping {p}: torch sees no CUDA GPU")
        else:
            peers.append(p)
    if HAVE_TORCH:
        torch.set_num_threads(a.threads)
        gpu = f", GPU: {torch.cuda.get_device_name()}" if DEVICE == "cuda" and torch.cuda.is_available() else ""
        print(f"torch {torch.__version__} (MKL: {torch.backends.mkl.is_available()}{gpu})", end="; ")
    if "ort" in peers:
        import onnxruntime
        print(f"onnxruntime {onnxruntime.__version__}", end="; ")
    print(f"threads: {a.threads}; median of {a.rounds} interleaved rounds of {a.repeat} calls each")
    variants = [(v.split(), []) for v in a.variant] + [([], v.split()) for v in a.run_variant]
    cols = ["dnnc"] + ["dnnc" + "".join(b + r) for b, r in variants] + peers
    width = {c: max(12, len(c) + 5) for c in cols}
    print(f"{'model':<12} {'shape':<16}" + "".join(f"{c + ' ms':>{width[c]}}" for c in cols) +
          f"{'dnnc/best':>10} {'max |diff|':>11}  notes")
    chosen = []
    for name in a.models.split(","):
        chosen += list(MICRO.items()) if name == "micro" else [(name, MODELS[name] if name in MODELS else MICRO[name])]
    rng = np.random.default_rng(0)
    worst = {}
    for name, model in chosen:
        with tempfile.TemporaryDirectory() as d:
            w = model.weights(rng)
            tools = [Dnnc(a.dnnc, model, d, a.threads, a.repeat, b, r) for b, r in [((), ())] + variants]
            for t in tools:
                t.set_weights(w)
            makers = {"eager": Eager, "compile": Compiled}
            for p in peers:
                tools.append(OnnxRuntime(model, w, d, a.repeat, a.threads) if p == "ort" else makers[p](model, w, d, a.repeat))
            for label, make_input in model.shapes:
                x = make_input(rng)
                if a.shapes and label not in a.shapes.split(";"):
                    continue
                times = {t.name: [] for t in tools}
                outputs, notes, ratios = {}, [], []
                for _ in range(a.rounds):
                    this_round = {}
                    for t in tools:
                        if t.name in outputs and outputs[t.name] is None:
                            continue
                        wait_until_idle()
                        try:
                            ms, out = t.run(x)
                        except Exception as e:  # a peer that cannot run this model is reported, not fatal
                            if t.name.startswith("dnnc"):
                                raise
                            notes.append(f"{t.name} failed: {str(e).splitlines()[0][:60]}")
                            outputs[t.name] = None
                            continue
                        times[t.name].append(ms)
                        this_round[t.name] = ms
                        outputs[t.name] = out
                    best_now = min((v for k, v in this_round.items() if not k.startswith("dnnc")), default=None)
                    if best_now:
                        ratios.append(this_round["dnnc"] / best_now)
                med = {k: statistics.median(v) for k, v in times.items() if v}
                ratio = statistics.median(ratios) if ratios else float("nan")
                diff = max((float(np.abs(outputs["dnnc"].astype(np.float64) - o).max())
                            for k, o in outputs.items() if k != "dnnc" and o is not None), default=0.0)
                if model.flops:
                    notes.append("GF/s: " + ", ".join(f"{k} {model.flops(x) / v / 1e6:.1f}" for k, v in med.items()))
                row = "".join(f"{med[c]:>{width[c]}.3f}" if c in med else f"{'-':>{width[c]}}" for c in cols)
                print(f"{name:<12} {label:<16}{row}{ratio:>10.2f} {diff:>11.2e}  {'; '.join(notes)}", flush=True)
                worst[name] = max(worst.get(name, 0.0), ratio) if not math.isnan(ratio) else worst.get(name, 0.0)
    if worst:
        print("worst dnnc/best-peer per model: " + ", ".join(f"{k} {v:.2f}" for k, v in worst.items()))


if __name__ == "__main__":
    main()
