#!/usr/bin/env python3
"""`dnnc train` against a NumPy re-implementation of the same training: a small MLP
classifier, 10 samples in batches of 4 (the last batch of each epoch has 2: B changes
without a recompile), two epochs, each optimizer with PyTorch's formulas (SGD with
weight decay, momentum, Adam, AdamW). The losses dnnc logs (--json) and the params it saves
(--save) must match NumPy's float64 trajectory (rtol 1e-4, atol 1e-5), on ref, cpu and
cuda-sim. The same for a one-block causal transformer LM trained with SGD and Adam on a
folder of batches whose (B, T) differ every step, against a NumPy twin with a hand-written
backward pass (itself checked against finite differences here): rtol 1e-5, atol 2e-6.
Also: the errors of a model that cannot be trained and of bad data.
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnnc_test_util import example_with_loss, read_safetensors, run_with_exe, write_safetensors  # noqa: E402

erf = np.vectorize(math.erf)

MODEL = """dim B;
param w1: f32[6, 8];
param b1: f32[8];
param w2: f32[8, 3];
model main(x: f32[B, 6], y: f32[B, 3]) -> (f32[], f32[]) {
  let logits = relu(x @ w1 + b1) @ w2;
  let loss = -mean(sum(log_softmax(logits, -1) * y, axis = 1));
  let accuracy = mean(cast(argmax(logits, -1) == argmax(y, -1), f32));
  return (loss, accuracy);
}
"""


LM = """import nn;
dim B;
dim T in 1..64;
param wte:  f32[50, 16] = normal(0.0, 0.1);
param wpe:  f32[64, 16] = normal(0.0, 0.1);
param ln_g: f32[2, 16] = ones();
param ln_b: f32[2, 16] = zeros();
param wqkv: f32[16, 48];
param wo:   f32[16, 16];
param w1:   f32[16, 64];
param w2:   f32[64, 16];
model main(tokens: i32[B, T], targets: i32[B, T]) -> f32[] {
  var x = embedding(wte, tokens) + wpe[0:T];
  let h = nn.layer_norm(x, ln_g[0], ln_b[0]);
  x = x + nn.causal_attention(h, wqkv, wo, heads = 2);
  x = x + nn.mlp(nn.layer_norm(x, ln_g[1], ln_b[1]), w1, w2);
  return -mean(sum(log_softmax(x @ transpose(wte), -1) * one_hot(targets, 50), axis = -1));
}
"""


def loss_and_grads(p, x, y):
    """The MLP's mean cross-entropy and its gradients, by hand in float64."""
    h_pre = x @ p["w1"] + p["b1"]
    h = np.maximum(h_pre, 0)
    z = h @ p["w2"]
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    n = x.shape[0]
    loss = -(logp * y).sum(1).mean()
    dz = (np.exp(logp) * y.sum(1, keepdims=True) - y) / n
    dh = dz @ p["w2"].T * (h_pre > 0)
    return loss, {"w1": x.T @ dh, "b1": dh.sum(0), "w2": h.T @ dz}


LN_EPS = 1e-5  # nn.layer_norm's eps


# (B, T) of each step of the LM's trajectory: odd sizes, a single token, a single sample.
LM_SHAPES = [(3, 5), (2, 8), (4, 1), (1, 7), (5, 3)]


def lm_params(rng):
    """Fixed float32 initial weights for LM."""
    shapes = {"wte": (50, 16), "wpe": (64, 16), "wqkv": (16, 48), "wo": (16, 16), "w1": (16, 64), "w2": (64, 16)}
    p = {k: (rng.standard_normal(s) * (0.1 if k in ("wte", "wpe") else 1 / math.sqrt(s[0]))).astype(np.float32)
         for k, s in shapes.items()}
    p["ln_g"] = (1 + 0.1 * rng.standard_normal((2, 16))).astype(np.float32)
    p["ln_b"] = (0.1 * rng.standard_normal((2, 16))).astype(np.float32)
    return p


def layer_norm_fwd(x, g, b):
    """nn.layer_norm, and what its backward pass reads."""
    xc = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + LN_EPS)
    n = xc * r
    return n * g + b, (n, r)


def layer_norm_bwd(dy, g, cache):
    """d x, d g, d b of y = layer_norm(x) * g + b, from dy."""
    n, r = cache
    axes = tuple(range(dy.ndim - 1))
    dn = dy * g
    dx = r * (dn - dn.mean(-1, keepdims=True) - n * (dn * n).mean(-1, keepdims=True))
    return dx, (dy * n).sum(axes), dy.sum(axes)


def lm_loss_and_grads(p, tokens, targets, heads=2, grads=True):
    """LM's mean cross-entropy on one batch of tokens and targets (i32[B, T]) in float64,
    and (with `grads`) its gradients by hand: the forward pass keeps what the backward pass
    reads, and the backward pass goes op by op in reverse (the tied wte gets the output
    projection's gradient and the embedding's, scattered to the rows the tokens read)."""
    b, t = tokens.shape
    v, d = p["wte"].shape
    hd = d // heads
    x0 = p["wte"][tokens] + p["wpe"][:t]
    h1, ln1 = layer_norm_fwd(x0, p["ln_g"][0], p["ln_b"][0])
    qkv = h1 @ p["wqkv"]
    split = lambda a: a.reshape(b, t, heads, hd).transpose(0, 2, 1, 3)
    merge = lambda a: a.transpose(0, 2, 1, 3).reshape(b, t, d)
    q, k, vv = (split(a) for a in np.split(qkv, 3, -1))
    scale = 1 / math.sqrt(hd)
    visible = np.arange(t)[None, :] <= np.arange(t)[:, None]
    scores = np.where(visible, q @ k.transpose(0, 1, 3, 2) * scale, -1e9)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    att = e / e.sum(-1, keepdims=True)
    o = merge(att @ vv)
    x1 = x0 + o @ p["wo"]
    h2, ln2 = layer_norm_fwd(x1, p["ln_g"][1], p["ln_b"][1])
    u = h2 @ p["w1"]
    cdf = 0.5 * (1 + erf(u / math.sqrt(2)))
    x2 = x1 + (u * cdf) @ p["w2"]
    logits = x2 @ p["wte"].T
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    onehot = np.eye(v)[targets]
    loss = -(logp * onehot).sum(-1).mean()
    if not grads:
        return loss
    # The backward pass, op by op in reverse.
    flat = lambda a: a.reshape(-1, a.shape[-1])
    g = {}
    dlogits = (np.exp(logp) - onehot) / (b * t)
    g["wte"] = flat(dlogits).T @ flat(x2)
    dx2 = dlogits @ p["wte"]
    g["w2"] = flat(u * cdf).T @ flat(dx2)
    du = dx2 @ p["w2"].T * (cdf + u * np.exp(-u * u / 2) / math.sqrt(2 * math.pi))
    g["w1"] = flat(h2).T @ flat(du)
    dx1, dg1, db1 = layer_norm_bwd(du @ p["w1"].T, p["ln_g"][1], ln2)
    dx1 = dx1 + dx2
    g["wo"] = flat(o).T @ flat(dx1)
    do = split(dx1 @ p["wo"].T)
    datt = do @ vv.transpose(0, 1, 3, 2)
    dv = att.transpose(0, 1, 3, 2) @ do
    ds = np.where(visible, att * (datt - (datt * att).sum(-1, keepdims=True)), 0) * scale
    dq, dk = ds @ k, ds.transpose(0, 1, 3, 2) @ q
    dqkv = np.concatenate([merge(dq), merge(dk), merge(dv)], -1)
    g["wqkv"] = flat(h1).T @ flat(dqkv)
    dx0, dg0, db0 = layer_norm_bwd(dqkv @ p["wqkv"].T, p["ln_g"][0], ln1)
    dx0 = dx0 + dx1
    np.add.at(g["wte"], tokens.reshape(-1), flat(dx0))
    g["wpe"] = np.zeros_like(p["wpe"])
    g["wpe"][:t] = dx0.sum(0)
    g["ln_g"], g["ln_b"] = np.stack([dg0, dg1]), np.stack([db0, db1])
    return loss, g


def optimizer_update(p, g, state, t, optimizer, lr, wd, frozen=(), momentum=0.9, b1=0.9, b2=0.999, eps=1e-8):
    """One step of `optimizer` with PyTorch's formulas on the float64 params `p` (in place),
    from the gradients `g`; `state` holds each param's [m, v] (momentum: [buffer, -]) and `t`
    is the step, counted from 1."""
    for k in (k for k in p if k not in frozen):
        grad = g[k] + wd * p[k] if optimizer != "adamw" else g[k]
        m, v = state.setdefault(k, [np.zeros_like(p[k]), np.zeros_like(p[k])])
        if optimizer == "sgd":
            p[k] = p[k] - lr * grad
        elif optimizer == "momentum":
            state[k][0] = momentum * m + grad
            p[k] = p[k] - lr * state[k][0]
        else:
            if optimizer == "adamw":
                p[k] = p[k] * (1 - lr * wd)
            m = m + (grad - m) * (1 - b1)
            v = b2 * v + (1 - b2) * grad * grad
            state[k] = [m, v]
            p[k] = p[k] - lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)


def numpy_training(params, x, y, optimizer, lr, wd, batch, epochs, frozen=()):
    p = {k: v.astype(np.float64) for k, v in params.items()}
    state = {}
    losses, t = [], 0
    for _ in range(epochs):
        for s in range(0, len(x), batch):
            t += 1
            loss, g = loss_and_grads(p, x[s:s + batch].astype(np.float64), y[s:s + batch].astype(np.float64))
            losses.append(loss)
            optimizer_update(p, g, state, t, optimizer, lr, wd, frozen)
    return losses, p


class Train(unittest.TestCase):
    exe = None

    def setUp(self):
        rng = np.random.default_rng(3)
        self.x = rng.standard_normal((10, 6)).astype(np.float32)
        self.y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 10)]
        self.params = {"w1": (rng.standard_normal((6, 8)) * 0.5).astype(np.float32),
                       "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
                       "w2": (rng.standard_normal((8, 3)) * 0.5).astype(np.float32)}
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        with open(os.path.join(d, "m.dnn"), "w") as f:
            f.write(MODEL)
        np.save(os.path.join(d, "x.npy"), self.x)
        np.save(os.path.join(d, "y.npy"), self.y)
        write_safetensors(os.path.join(d, "init.safetensors"), self.params)

    def tearDown(self):
        self.dir.cleanup()

    def dnnc_train(self, *args, model="m.dnn"):
        d = self.dir.name
        return subprocess.run([self.exe, "train", os.path.join(d, model), "--data", f"x={d}/x.npy", "--data", f"y={d}/y.npy",
                               *args], capture_output=True, text=True, timeout=300)

    def check(self, optimizer, lr, wd=0.0, model="m.dnn", frozen=()):
        want_losses, want = numpy_training(self.params, self.x, self.y, optimizer, lr, wd, batch=4, epochs=2, frozen=frozen)
        for device in ("ref", "cpu", "cuda-sim"):
            with self.subTest(optimizer=optimizer, device=device):
                out = os.path.join(self.dir.name, f"{optimizer}-{device}.safetensors")
                p = self.dnnc_train("--batch", "4", "--epochs", "2", "--optimizer", optimizer, "--lr", str(lr),
                                    "--weight-decay", str(wd), "--weights", os.path.join(self.dir.name, "init.safetensors"),
                                    "--save", out, "--json", "--device", device, model=model)
                self.assertEqual(p.returncode, 0, p.stderr)
                logs = [json.loads(line) for line in p.stdout.splitlines()]
                self.assertEqual([e["step"] for e in logs], list(range(1, 7)))
                np.testing.assert_allclose([e["loss"] for e in logs], want_losses, rtol=1e-4, atol=1e-5)
                self.assertTrue(all(0 <= e["accuracy"] <= 1 for e in logs))
                got = read_safetensors(out)
                for k in want:
                    np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
                for k in frozen:  # saved as it was loaded, bit for bit
                    np.testing.assert_array_equal(got[k], self.params[k], err_msg=k)
                for k in set(want) - set(frozen):
                    self.assertFalse(np.array_equal(got[k], self.params[k]), k)

    def write_model(self, name, text):
        with open(os.path.join(self.dir.name, name), "w") as f:
            f.write(text)

    def test_frozen(self):
        """`param frozen w1`: no gradient, no optimizer state, the same w1 after training (spec §12)."""
        self.write_model("frozen.dnn", MODEL.replace("param w1", "param frozen w1"))
        for optimizer, lr in (("sgd", 0.1), ("adam", 0.01)):
            self.check(optimizer, lr, model="frozen.dnn", frozen=("w1",))
        p = subprocess.run([self.exe, "emit", os.path.join(self.dir.name, "frozen.dnn"), "--emit=ir"], capture_output=True, text=True)
        self.assertIn('param() {frozen = true, name = "w1"}', p.stdout)
        self.assertIn('param() {name = "b1"}', p.stdout)

    def test_sgd_weight_decay(self):
        self.check("sgd", 0.5, wd=0.01)

    def test_momentum(self):
        self.check("momentum", 0.1)

    def test_adam(self):
        self.check("adam", 0.01, wd=0.001)

    def test_adamw(self):
        self.check("adamw", 0.01, wd=0.1)

    def test_lm_gradients_by_hand(self):
        """The NumPy twin's hand-written backward pass (which the trajectories below rely on)
        against central finite differences of its own forward pass, in float64: every
        param along two random directions and at 12 random elements, at three (B, T)."""
        rng = np.random.default_rng(11)
        p = {k: v.astype(np.float64) for k, v in lm_params(rng).items()}
        h = 1e-6
        for b, t in ((1, 1), (2, 3), (3, 6)):
            tokens, targets = rng.integers(0, 50, (2, b, t))
            _, g = lm_loss_and_grads(p, tokens, targets)
            for name, a in p.items():
                directions = [rng.standard_normal(a.shape) for _ in range(2)]
                for k in rng.choice(a[:t].size if name == "wpe" else a.size, 12, replace=False):  # rows wpe[0:T] are read
                    directions.append(np.zeros(a.shape))
                    directions[-1].flat[k] = 1
                for u in directions:
                    plus, minus = dict(p), dict(p)
                    plus[name], minus[name] = a + h * u, a - h * u
                    fd = (lm_loss_and_grads(plus, tokens, targets, grads=False) -
                          lm_loss_and_grads(minus, tokens, targets, grads=False)) / (2 * h)
                    with self.subTest(name=name, b=b, t=t):
                        np.testing.assert_allclose((g[name] * u).sum(), fd, rtol=1e-5, atol=1e-8)

    def test_lm_trajectory(self):
        """The one-block transformer LM (embedding, layer norm, attention with the causal
        mask, GELU MLP, tied output) trained 5 steps with SGD and with Adam from fixed
        weights, on a folder of batches whose (B, T) differ every step (a single token, a
        single sample, odd sizes), reaches the params a float64 NumPy re-implementation of
        the same training reaches, on ref, cpu and cuda-sim: every logged loss within rtol
        1e-5 and every saved param within rtol 1e-5, atol 2e-6 (float32 arithmetic against
        float64; the largest differences seen: 1e-7 relative in the losses, 2.2e-7
        absolute in the params, 14x inside). One compilation runs every shape."""
        d = self.dir.name
        with open(os.path.join(d, "lm.dnn"), "w") as f:
            f.write(LM)
        rng = np.random.default_rng(7)
        init = lm_params(rng)
        write_safetensors(os.path.join(d, "lm.safetensors"), init)
        batches = []
        for s, (b, t) in enumerate(LM_SHAPES):
            seq = rng.integers(0, 50, (b, t + 1)).astype(np.int32)
            batches.append((seq[:, :-1], seq[:, 1:]))
            os.makedirs(os.path.join(d, "steps", f"{s:06d}"))
            np.save(os.path.join(d, "steps", f"{s:06d}", "tokens.npy"), batches[-1][0])
            np.save(os.path.join(d, "steps", f"{s:06d}", "targets.npy"), batches[-1][1])
        for optimizer, lr in (("sgd", 0.5), ("adam", 0.01)):
            p, state, want_losses = {k: v.astype(np.float64) for k, v in init.items()}, {}, []
            for t, (tokens, targets) in enumerate(batches, 1):
                loss, g = lm_loss_and_grads(p, tokens, targets)
                want_losses.append(loss)
                optimizer_update(p, g, state, t, optimizer, lr, 0.0)
            for device in ("ref", "cpu", "cuda-sim"):
                with self.subTest(optimizer=optimizer, device=device):
                    out = os.path.join(d, f"lm-{optimizer}-{device}.safetensors")
                    r = subprocess.run([self.exe, "train", os.path.join(d, "lm.dnn"), "--data", os.path.join(d, "steps"),
                                        "--epochs", "1", "--optimizer", optimizer, "--lr", str(lr), "--weights",
                                        os.path.join(d, "lm.safetensors"), "--save", out, "--json", "--verbose",
                                        "--device", device], capture_output=True, text=True, timeout=300)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    logs = [json.loads(line) for line in r.stdout.splitlines()]
                    self.assertEqual([e["step"] for e in logs], list(range(1, len(LM_SHAPES) + 1)))
                    np.testing.assert_allclose([e["loss"] for e in logs], want_losses, rtol=1e-5)
                    got = read_safetensors(out)
                    self.assertEqual(sorted(got), sorted(p))
                    for k in p:
                        np.testing.assert_allclose(got[k], p[k], rtol=1e-5, atol=2e-6, err_msg=k)
                        self.assertGreater(np.abs(p[k] - init[k]).max(), 1e-3, k)  # every param moved
                    if device != "ref":
                        self.assertIn("kernels compiled after the first step: 0", r.stderr)

    def test_emit_train_is_the_step_train_compiles(self):
        """`dnnc emit --train=OPTIMIZER` with the optimizer's settings shows the kernels `dnnc
        train` compiles with them, as many on the cpu (--emit=kernels; no prepacked weights:
        the params change every step) and on cuda-sim (--emit=ptx, the GPU's kernels): the
        MLP example at its size (784 inputs, weights the CPU would prepack for inference)
        and LM, with AdamW's decoupled decay and with momentum."""
        d = self.dir.name
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(root, "examples", "mlp.dnn")) as f:
            source, _ = example_with_loss(f.read(), {}, "nn.cross_entropy(prediction, labels)", "labels: i32[B]")
        with open(os.path.join(d, "mlp.dnn"), "w") as f:
            f.write(source)
        with open(os.path.join(d, "lm.dnn"), "w") as f:
            f.write(LM)
        rng = np.random.default_rng(2)
        np.save(os.path.join(d, "mx.npy"), rng.standard_normal((3, 784)).astype(np.float32))
        np.save(os.path.join(d, "ml.npy"), rng.integers(0, 10, 3).astype(np.int32))
        seq = rng.integers(0, 50, (2, 6)).astype(np.int32)
        np.save(os.path.join(d, "tok.npy"), seq[:, :-1])
        np.save(os.path.join(d, "tgt.npy"), seq[:, 1:])
        data = {"mlp.dnn": (("x", "mx"), ("labels", "ml")), "lm.dnn": (("tokens", "tok"), ("targets", "tgt"))}
        for model, files in data.items():
            for optimizer, settings in (("adamw", ["--weight-decay", "0.1"]), ("momentum", ["--momentum", "0.5"])):
                for device, stage, kernel in (("cpu", "kernels", "kernel "), ("cuda-sim", "ptx", ".visible .entry ")):
                    with self.subTest(model=model, optimizer=optimizer, device=device):
                        common = [os.path.join(d, model), "-I", os.path.join(root, "stdlib")]
                        e = subprocess.run([self.exe, "emit", *common, f"--train={optimizer}", *settings, f"--emit={stage}"],
                                           capture_output=True, text=True, timeout=300)
                        self.assertEqual(e.returncode, 0, e.stderr)
                        t = subprocess.run([self.exe, "train", *common, *[a for name, file in files for a in ("--data", f"{name}={d}/{file}.npy")],
                                            "--steps", "1", "--optimizer", optimizer, *settings, "--device", device, "--verbose"],
                                           capture_output=True, text=True, timeout=300)
                        self.assertEqual(t.returncode, 0, t.stderr)
                        compiled = re.search(r"compiled the training step for .*: (\d+) kernels", t.stderr)
                        self.assertIsNotNone(compiled, t.stderr)
                        # PTX has each distinct code once; a kernel with an earlier one's code is a comment
                        emitted = sum(line.startswith(kernel) or re.match(r"// k\d+\w* launches k\d+", line) is not None
                                      for line in e.stdout.splitlines())
                        self.assertEqual(emitted, int(compiled.group(1)))

    def test_transformer_example(self):
        """examples/transformer.dnn itself, small (D = 16, L = 2 layers in its `for` over the
        stacked params, V = 50), trained as a next-token LM with Adam: the loss falls and cpu
        and cuda-sim log the reference interpreter's losses."""
        d = self.dir.name
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(root, "examples", "transformer.dnn")) as f:
            source, _ = example_with_loss(f.read(), dict(D=16, H=2, L=2, V=50), "nn.cross_entropy(prediction, targets)",
                                          "targets: i32[B, T]")
        with open(os.path.join(d, "tf.dnn"), "w") as f:
            f.write(source)
        rng = np.random.default_rng(5)
        init = {"wpe": (rng.standard_normal((2048, 16)) * 0.1).astype(np.float32)}
        for name, shape in (("wqkv", (2, 16, 48)), ("wo", (2, 16, 16)), ("w1", (2, 16, 64)), ("w2", (2, 64, 16))):
            init[name] = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        init.update(wte=(rng.standard_normal((50, 16)) * 0.1).astype(np.float32), ln_g=np.ones((2, 2, 16), np.float32),
                    ln_b=np.zeros((2, 2, 16), np.float32))
        write_safetensors(os.path.join(d, "tf.safetensors"), init)
        seq = (np.arange(12 * 9) * 7) % 50
        t = np.stack([seq[i:i + 9] for i in range(12)]).astype(np.int32)
        np.save(os.path.join(d, "tok.npy"), t[:, :8])
        np.save(os.path.join(d, "tgt.npy"), t[:, 1:])
        losses = {}
        for device in ("ref", "cpu", "cuda-sim"):
            p = subprocess.run([self.exe, "train", os.path.join(d, "tf.dnn"), "-I", os.path.join(root, "stdlib"), "--data",
                                f"tokens={d}/tok.npy", "--data", f"targets={d}/tgt.npy", "--batch", "5", "--epochs", "3",
                                "--optimizer", "adam", "--lr", "0.03", "--weights", os.path.join(d, "tf.safetensors"),
                                "--json", "--device", device], capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            losses[device] = [json.loads(line)["loss"] for line in p.stdout.splitlines()]
        self.assertEqual(len(losses["ref"]), 9)  # 3 batches (5, 5, 2) per epoch
        self.assertLess(losses["ref"][-1], 0.8 * losses["ref"][0])
        for device in ("cpu", "cuda-sim"):
            np.testing.assert_allclose(losses[device], losses["ref"], rtol=1e-3, err_msg=device)

    def test_log_lines(self):
        """The spec's log line with the metrics after the time; stderr is not a terminal
        here, so no progress bar (stderr stays empty)."""
        p = self.dnnc_train("--steps", "3", "--batch", "4", "--device", "cpu", "--log-every", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 2, p.stdout)  # steps 2 and 3 (the last is always logged)
        self.assertRegex(lines[0], r"^step 2/3  loss [0-9]+\.[0-9]{4}  [0-9.]+ ms/step  accuracy [0-9]\.[0-9]{4}$")
        self.assertEqual(p.stderr, "")

    def test_progress_bar_on_a_terminal(self):
        """With stderr a terminal (a pseudo-terminal here) a bar is drawn there, and
        stdout carries the same log lines as without one."""
        import pty
        master, slave = pty.openpty()
        d = self.dir.name
        with subprocess.Popen([self.exe, "train", os.path.join(d, "m.dnn"), "--data", f"x={d}/x.npy", "--data", f"y={d}/y.npy",
                               "--steps", "3", "--batch", "4", "--device", "ref"], stdout=subprocess.PIPE, stderr=slave,
                              text=True) as p:
            os.close(slave)
            out, _ = p.communicate(timeout=300)
            err = b""
            while True:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the terminal's other side closed
                    break
                if not chunk:
                    break
                err += chunk
        os.close(master)
        self.assertEqual(p.returncode, 0)
        self.assertEqual(len(out.splitlines()), 3, out)
        self.assertIn(b"[" + b"#" * 30 + b"] 3/3  loss ", err)

    def test_errors(self):
        d = self.dir.name
        with open(os.path.join(d, "bad.dnn"), "w") as f:
            f.write("dim B;\nparam w: f32[6, 3];\nmodel main(x: f32[B, 6], y: f32[B, 3]) -> f32[B, 3] {\n  return x @ w - y;\n}\n")
        cases = [
            (self.dnnc_train("--steps", "1", model="bad.dnn"),
             "its first output is the loss and must be a float scalar, not f32[B, 3]"),
            (subprocess.run([self.exe, "train", os.path.join(d, "m.dnn"), "--data", f"x={d}/x.npy"], capture_output=True,
                            text=True), "no --data for input 'y' of model 'main'"),
            (self.dnnc_train("--optimizer", "lbfgs"), "unknown optimizer 'lbfgs'"),
        ]
        cases.append((self.dnnc_train("--steps", "3", "--batch", "4", "--lr", "1e30", "--device", "ref"),
                      "training diverged (try a smaller --lr)"))
        x = self.x.copy()
        x[5, 2] = np.nan  # in the second batch of 4
        np.save(os.path.join(d, "x.npy"), x)
        cases.append((self.dnnc_train("--steps", "3", "--batch", "4", "--device", "ref"),
                      "the loss is nan at step 2: input 'x' has nan in this step's batch (element 8): the data are not finite"))
        np.save(os.path.join(d, "x.npy"), self.x)
        np.save(os.path.join(d, "y.npy"), self.y[:7])
        self.write_model("all_frozen.dnn", MODEL.replace("param ", "param frozen "))
        cases.append((self.dnnc_train("--steps", "1", model="all_frozen.dnn"),
                      "model 'main' has no param to train: all 3 of its float params are declared frozen"))
        cases.append((self.dnnc_train(), "--data y has 7 samples, but x has 10"))
        for p, message in cases:
            with self.subTest(message=message):
                self.assertNotEqual(p.returncode, 0)
                self.assertIn(message, p.stderr)
                self.assertTrue(p.stderr.startswith("dnnc: error: "), p.stderr)


if __name__ == "__main__":
    run_with_exe(Train)
