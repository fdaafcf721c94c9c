#!/usr/bin/env python3
"""`dnnc profile --json` and `--svg` (spec training.md §14), on the golden profile model
(tests/golden/profile/table.dnn), on examples/train/charlm.dnn's two-block transformer, on
slices of a prepacked weight (views into the arena) and on for and while loops (their
carried values):

- JSON: the spec's keys; peak_bytes is the sum of the categories at the peak and the peak
  of the planned live curve; measured and planned agree (the executor's trace of the run
  and the plan: the same live bytes at every op, the arena the runtime allocated is the
  planned one and nothing was written past it); every value has its five keys and one of
  the eight categories; a category at the peak holds no more than its values add up to;
  with --recompute auto fewer bytes are stashed than with none, and the recomputed values
  exist only with auto. On cpu and cuda-sim.
- SVG: well-formed XML with one band per category, a peak marker and the planned and
  measured curves; with --train and --recompute auto also the curve and peak of
  --recompute none, and forward and backward shaded; without --train no shading and no
  second curve."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

CATEGORIES = ["params", "gradients", "optimizer_state", "stashed", "recomputed", "workspace", "inputs", "outputs"]
SVG = "{http://www.w3.org/2000/svg}"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def profile(a, path, *flags):
    p = subprocess.run([a.dnnc, "profile", path, *flags], capture_output=True, text=True,
                       env=dict(os.environ, DNNC_STDLIB=a.stdlib))
    if not check(p.returncode == 0, f"{path} {flags}: exit {p.returncode}\n{p.stderr}"):
        return None
    return p.stdout


def check_json(label, d):
    check(set(["peak_bytes", "peak_op", "categories", "values"]) <= set(d), f"{label}: keys {sorted(d)}")
    check(list(d["categories"]) == CATEGORIES, f"{label}: categories {list(d['categories'])}")
    check(d["peak_bytes"] == sum(d["categories"].values()), f"{label}: peak_bytes {d['peak_bytes']} != the categories' sum")
    planned, measured = d["live"]["planned"], d["live"]["measured"]
    check(len(planned) == d["ops"] and len(measured) == d["ops"], f"{label}: curves of {len(planned)}, {len(measured)} ops, not {d['ops']}")
    check(d["peak_bytes"] == max(planned) and planned[d["peak_index"]] == d["peak_bytes"], f"{label}: the peak is not the curve's")
    m = d["measured"]
    check(m["peak_bytes"] == sum(m["categories"].values()), f"{label}: measured peak != its categories' sum")
    check(planned == measured, f"{label}: planned and measured live bytes differ at ops "
          f"{[i for i, (x, y) in enumerate(zip(planned, measured)) if x != y][:10]}")
    check(m["categories"] == d["categories"] and m["peak_index"] == d["peak_index"], f"{label}: measured peak {m} != planned")
    check(m["arena_bytes"] == d["planned_arena_bytes"], f"{label}: the runtime allocated {m['arena_bytes']} arena bytes, the plan says {d['planned_arena_bytes']}")
    check(0 < m["arena_high_water"] <= m["arena_bytes"], f"{label}: arena written up to {m['arena_high_water']} of {m['arena_bytes']}")
    by = {c: 0 for c in CATEGORIES}
    for v in d["values"]:
        if check(set(v) == {"name", "line", "type", "bytes", "category"}, f"{label}: value keys {sorted(v)}"):
            check(v["category"] in CATEGORIES and v["bytes"] >= 0, f"{label}: value {v}")
            by[v["category"]] += v["bytes"]
    for c in CATEGORIES:
        check(d["categories"][c] <= by[c], f"{label}: {c} at the peak ({d['categories'][c]}) exceeds its values ({by[c]})")
    return by


def check_svg(label, text, train, both):
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        check(False, f"{label}: the SVG does not parse: {e}")
        return
    bands = [e.get("data-category") for e in root.iter(SVG + "polygon") if e.get("class") == "band"]
    check(bands == CATEGORIES, f"{label}: bands {bands}")
    curves = {(e.get("data-recompute"), e.get("data-kind")) for e in root.iter(SVG + "path") if e.get("class") == "curve"}
    peaks = {e.get("data-recompute") for e in root.iter(SVG + "g") if e.get("class") == "peak"}
    phases = [e.get("data-phase") for e in root.iter(SVG + "rect") if e.get("class") == "phase"]
    kinds = {k for _, k in curves}
    check(kinds == {"planned", "measured"}, f"{label}: curves {curves}")
    if both:
        check(("none", "planned") in curves and ("auto", "planned") in curves, f"{label}: none and auto curves: {curves}")
        check(peaks == {"none", "auto"}, f"{label}: peak markers {peaks}")
    else:
        check(len(peaks) == 1 and len({r for r, _ in curves}) == 1, f"{label}: one peak, one mode: {peaks} {curves}")
    check(phases == (["forward", "backward"] if train else []), f"{label}: shading {phases}")
    for e in root.iter(SVG + "g"):
        if e.get("class") == "peak":
            check(e.find(SVG + "line") is not None and e.find(SVG + "text") is not None, f"{label}: a peak marker without its line or label")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--stdlib", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    small = os.path.join(a.source, "tests/golden/profile/table.dnn")
    charlm = os.path.join(a.source, "examples/train/charlm.dnn")
    with tempfile.TemporaryDirectory() as tmp:
        stashed = {}
        for device in ["cpu", "cuda-sim"]:
            for mode in ["auto", "none"]:
                svg = os.path.join(tmp, f"{device}-{mode}.svg")
                out = profile(a, small, "--bind", "B=256", "--train", "--optimizer", "adam", "--recompute", mode,
                              "--device", device, "--json", "--svg", svg)
                if out is None:
                    continue
                d = json.loads(out)
                by = check_json(f"{device} {mode}", d)
                stashed[(device, mode)] = by["stashed"]
                check((by["recomputed"] > 0) == (mode == "auto"), f"{device} {mode}: recomputed bytes {by['recomputed']}")
                with open(svg, encoding="utf-8") as f:
                    check_svg(f"{device} {mode}", f.read(), True, mode == "auto")
        for device in ["cpu", "cuda-sim"]:
            if (device, "auto") in stashed and (device, "none") in stashed:
                check(stashed[(device, "auto")] < stashed[(device, "none")], f"{device}: auto stashes {stashed[(device, 'auto')]} bytes, none {stashed[(device, 'none')]}")
        svg = os.path.join(tmp, "call.svg")
        out = profile(a, small, "--bind", "B=8", "--json", "--svg", svg)
        if out is not None:
            d = json.loads(out)
            by = check_json("call", d)
            check(by["gradients"] == by["optimizer_state"] == by["stashed"] == by["recomputed"] == 0, f"call: training categories {by}")
            with open(svg, encoding="utf-8") as f:
                check_svg("call", f.read(), False, False)
        # Slices of a prepacked weight are views into its packed copy, which lies in the
        # arena: the trace counts them as views, not as new arena values.
        sliced = os.path.join(tmp, "sliced.dnn")
        with open(sliced, "w") as f:
            f.write("param w: f32[3, 70, 1000];\ndim M;\nmodel main(x: f32[M, 70]) -> f32[M, 1000] {\n"
                    "  return x @ w[0] + x @ w[2];\n}\n")
        out = profile(a, sliced, "--bind", "M=4", "--json")
        if out is not None:
            check_json("sliced weights", json.loads(out))
        # Loops: each carried value is one buffer of the executor's (the compiled loop's
        # `carried`, which the walk copies afresh each step), live from the loop's entry
        # through its body to its last reader; the plan counts it as the run holds it. A
        # loop's result read after it, returned (an output over the whole loop), nested, and
        # a while carrying a counter too.
        loops = {
            "loop_read_after": "var y = x * 2.0;\n  for l in 0..3 {\n    y = y + x @ w[l];\n  }\n  return relu(y);",
            "loop_returned": "var y = x;\n  for l in 0..3 {\n    y = y + x @ w[l];\n  }\n  return y;",
            "loop_nested": "var y = x * 2.0;\n  for i in 0..2 {\n    var z = y;\n    for l in 0..3 {\n"
                           "      z = z + x @ w[l];\n    }\n    y = relu(z);\n  }\n  return y * 3.0;",
            "loop_while": "var y = x * 2.0;\n  var k = 0;\n  while k < 3 {\n    y = y @ w[k];\n    k = k + 1;\n  }\n"
                          "  return relu(y);",
        }
        for name, body in loops.items():
            path = os.path.join(tmp, f"{name}.dnn")
            with open(path, "w") as f:
                f.write(f"param w: f32[3, 16, 16];\nmodel main(x: f32[4, 16]) -> f32[4, 16] {{\n  {body}\n}}\n")
            for device in ["cpu", "cuda-sim"]:
                out = profile(a, path, "--device", device, "--json")
                if out is None:
                    continue
                d = json.loads(out)
                check_json(f"{name} {device}", d)
                carried = 4 * 16 * 4  # one f32[4, 16]
                if name == "loop_returned":  # the returned loop result is live at the peak, in the loop
                    check(d["categories"]["outputs"] == carried, f"{name} {device}: outputs at the peak {d['categories']['outputs']}, not {carried}")
                if name == "loop_read_after":  # the initial y (held through the loop), the body's y and the carried copy
                    check(d["categories"]["workspace"] >= 3 * carried, f"{name} {device}: workspace at the peak {d['categories']['workspace']}")
        # A gradient through a loop: the forward loop's body stashes each step's value after
        # making the next one, which lives to the end of the body (the step copies it). The
        # trace read the yields nowhere, so measured was one f32[3, 8] under planned.
        grad_loop = os.path.join(tmp, "loop_grad.dnn")
        with open(grad_loop, "w") as f:
            f.write("dim B;\nparam w: f32[8, 8] = normal(0.0, 0.1);\nmodel main(x: f32[B, 8]) -> f32[] {\n"
                    "  var h = x @ w;\n  for l in 0..3 {\n    h = tanh(h);\n  }\n  return mean(h * h);\n}\n")
        for device in ["cpu", "cuda-sim"]:
            out = profile(a, grad_loop, "--bind", "B=3", "--train", "--device", device, "--json")
            if out is not None:
                check_json(f"loop_grad {device}", json.loads(out))
        out = profile(a, charlm, "--bind", "B=2,T=32", "--train", "--optimizer", "adam", "--json")
        if out is not None:
            d = json.loads(out)
            by = check_json("charlm", d)
            check(all(by[c] > 0 for c in CATEGORIES), f"charlm: every category has values: {by}")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
