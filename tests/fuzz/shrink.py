"""The difftest's shrinker: reduces a failing program while it still fails the same way
(the same failure kind on the same device), by
  1. dropping outputs (and every statement no output needs any more),
  2. replacing a statement by a new input that holds the value NumPy computes for it
     (a subexpression becomes an input; the statements feeding only it go away),
  3. shrinking inputs: dropping unused ones, cutting every axis of a symbolic dim (`dim A`)
     to 1 or half its size, then trying each array zeroed or with its NaN/inf/extremes replaced.
Each candidate runs only on `ref` and the failing device.
"""
import time

import numpy as np

import gen
import npref


def copy_program(p):
    q = gen.Program(p.seed)
    q.dims, q.inputs, q.stmts, q.outputs, q.vars = dict(p.dims), list(p.inputs), list(p.stmts), list(p.outputs), dict(p.vars)
    return q


def dce(p):
    """Drops statements no output needs, inputs nothing uses and dims no input carries."""
    live = {v.name for v in p.outputs}
    kept = []
    for s in reversed(p.stmts):
        if set(s.defs) & live:
            kept.append(s)
            live |= s.uses
    p.stmts = kept[::-1]
    p.inputs = [(v, a) for v, a in p.inputs if v.name in live]
    used_dims = {t for v, _ in p.inputs for t, _ in v.dims if isinstance(t, str)}
    p.dims = {d: r for d, r in p.dims.items() if d in used_dims}
    return p


def values(p):
    """Every var's NumPy value on p's inputs (as far as NumPy gets)."""
    env = {"R": npref, "np": np}
    env.update(p.input_arrays())
    with np.errstate(all="ignore"):
        for s in p.stmts:
            try:
                exec(s.np, env)
            except npref.ExpectedError:
                break
    return env


def dead_free(p, i):
    """p without statement i, which nothing uses (then unused inputs go too)."""
    q = copy_program(p)
    q.stmts = p.stmts[:i] + p.stmts[i + 1:]
    live = {v.name for v in q.outputs} | {u for s in q.stmts for u in s.uses}
    q.inputs = [(v, a) for v, a in q.inputs if v.name in live]
    used_dims = {t for v, _ in q.inputs for t, _ in v.dims if isinstance(t, str)}
    q.dims = {d: r for d, r in q.dims.items() if d in used_dims}
    return q


def candidates(p):
    # 0. all dead code at once, then one dead statement at a time
    q = dce(copy_program(p))
    if len(q.stmts) < len(p.stmts) or len(q.inputs) < len(p.inputs):
        yield "dead code", q
    used = {v.name for v in p.outputs} | {u for s in p.stmts for u in s.uses}
    if any(v.name not in used for v, _ in p.inputs):
        q = copy_program(p)
        q.inputs = [(v, a) for v, a in p.inputs if v.name in used]
        used_dims = {t for v, _ in q.inputs for t, _ in v.dims if isinstance(t, str)}
        q.dims = {d: r for d, r in q.dims.items() if d in used_dims}
        yield "unused inputs", q
    for i in reversed(range(len(p.stmts))):
        if not set(p.stmts[i].defs) & used:
            yield "dead statement", dead_free(p, i)
    # 1. fewer outputs
    if len(p.outputs) > 1:
        for k in range(len(p.outputs)):
            q = copy_program(p)
            q.outputs = p.outputs[:k] + p.outputs[k + 1:]
            yield "drop output", q
    # 2. a statement's result becomes an input (earliest first: removes the most)
    env = values(p)
    for i, s in enumerate(p.stmts):
        if len(s.defs) != 1 or s.defs[0] not in env:
            continue
        v = p.vars[s.defs[0]]
        if v.dt == "bf16":
            continue
        a = np.asarray(env[v.name])
        nv = gen.Var(v.name, v.dt, [(t if isinstance(t, int) or not t.startswith("#") else n, n) for (t, _), n in zip(v.dims, a.shape)],
                     v.exact, v.nanfree)
        q = copy_program(p)
        q.stmts = p.stmts[:i] + p.stmts[i + 1:]
        q.inputs = p.inputs + [(nv, a)]
        q.vars[v.name] = nv
        q.outputs = [nv if o.name == v.name else o for o in p.outputs]
        yield f"input for {v.name}", q
    # 3. smaller symbolic dims: every input axis of dim D cut to its first k entries
    for dname, (val, lo, hi) in p.dims.items():
        for k in sorted({max(lo, 1), val // 2}):
            if k >= val or k < lo:
                continue
            q = copy_program(p)
            q.dims[dname] = (k, lo, hi)
            q.inputs = []
            for v, a in p.inputs:
                axes = [i for i, (t, _) in enumerate(v.dims) if t == dname]
                if axes:
                    a = a[tuple(slice(0, k) if i in axes else slice(None) for i in range(a.ndim))].copy()
                    v = gen.Var(v.name, v.dt, [(t, k if t == dname else n) for t, n in v.dims], v.exact, v.nanfree)
                    q.vars[v.name] = v
                q.inputs.append((v, a))
            yield f"{dname} = {k}", q
    # 4. simpler input values
    for k, (v, a) in enumerate(p.inputs):
        if a.size == 0:
            continue
        tries = [np.zeros_like(a)]
        if a.dtype.kind == "f":
            clean = np.where(np.isfinite(a) & (np.abs(a) < 1e4), a, 0).astype(a.dtype)
            tries.append(clean)
        elif a.dtype.kind in "iu":
            tries.append(np.clip(a, -9, 9).astype(a.dtype))
        for t in tries:
            if not np.array_equal(t, a, equal_nan=True):
                q = copy_program(p)
                q.inputs = p.inputs[:k] + [(v, t)] + p.inputs[k + 1:]
                yield f"simpler {v.name}", q


def shrink(dnnc, prog, failure, budget_s=180):
    """(the smallest program found that fails like `failure`, its failures)."""
    import difftest
    devices = sorted({"ref", failure.device})
    t0 = time.time()

    def still(q):
        try:
            fails = difftest.check_program(dnnc, q, devices)
        except Exception:
            return None
        return fails if any(f.key == failure.key for f in fails) else None

    cur, sig = prog, [failure]
    changed = True
    while changed and time.time() - t0 < budget_s:
        changed = False
        for why, cand in candidates(cur):
            if time.time() - t0 > budget_s:
                break
            r = still(cand)
            if r:
                cur, sig, changed = cand, r, True
                break
    return cur, [f for f in sig if f.key == failure.key] or sig
