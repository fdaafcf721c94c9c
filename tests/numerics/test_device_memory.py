#!/usr/bin/env python3
"""Device memory on the simulated GPU: results stay on the device between kernels (a
transformer's 43 launches copy back only what the host reads: loop-carried values and
the output), outputs still match the CPU's, and `--stats` works on every device."""
import os
import re
import subprocess
import tempfile
import unittest

import numpy as np

from dnnc_test_util import Dnnc, run_tests


class DeviceMemory(unittest.TestCase):
    dnnc: Dnnc

    def run_stats(self, model, device, bind):
        d = tempfile.mkdtemp()
        p = subprocess.run([self.dnnc.exe, "run", os.path.join(self.dnnc.examples, model), "--bind", bind, "--device", device,
                            "--stats", "--seed", "1", "--out", d], capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout, np.load(os.path.join(d, "out0.npy"))

    def test_results_stay_on_the_device(self):
        stats, got = self.run_stats("transformer.dnn", "cuda-sim", "B=2,T=9")
        launched = int(re.search(r"^kernels launched: (\d+)$", stats, re.M).group(1))
        uploads, downloads = map(int, re.search(r"^device copies: (\d+) uploads, (\d+) downloads", stats, re.M).groups())
        # Per layer (2) the carried x comes back for the loop, and the output at the end.
        self.assertLessEqual(downloads, 2 * 2 + 1, stats)
        self.assertLess(uploads, launched, stats)  # params and inputs once, not per launch
        _, want = self.run_stats("transformer.dnn", "cpu", "B=2,T=9")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    def test_stats_on_every_device(self):
        for device in ("ref", "cpu", "cuda-sim"):
            stats, _ = self.run_stats("mlp.dnn", device, "B=2")
            self.assertIn("dims: B = 2", stats)


if __name__ == "__main__":
    run_tests(DeviceMemory)
