#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kl.py's arithmetic and files: KL on distributions whose divergence is known, the per-step lists, the
table's pooling and floor ratio, and refusals of inputs that do not fit. Needs numpy (python3-numpy)."""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kl  # noqa: E402


def run_kl(*args):
    return subprocess.run([sys.executable, os.path.join(HERE, "kl.py")] + list(args), capture_output=True, text=True)


class Compare(unittest.TestCase):
    def test_known_divergence(self):
        # p = (1/2, 1/2), q = (3/4, 1/4): KL(p || q) = 1/2 log(4/3).
        ref = np.array([[0.0, 0.0]], dtype=np.float32)
        run = np.array([[math.log(3.0), 0.0]], dtype=np.float32)
        out = kl.compare(ref, run)
        self.assertAlmostEqual(out["kl"][0], 0.5 * math.log(4.0 / 3.0), places=7)
        self.assertEqual(out["top1_ref"], [0])  # the first of equal maxima
        self.assertEqual(out["top1_run"], [0])
        self.assertEqual(out["ref_margin"], [0.0])
        self.assertFalse(out["equal"][0])

    def test_direction_is_reference_first(self):
        ref = np.array([[math.log(3.0), 0.0]], dtype=np.float32)  # p = (3/4, 1/4)
        run = np.array([[0.0, 0.0]], dtype=np.float32)            # q = (1/2, 1/2)
        expected = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
        self.assertAlmostEqual(kl.compare(ref, run)["kl"][0], expected, places=7)

    def test_identical_and_shifted_logits_diverge_by_nothing(self):
        rng = np.random.default_rng(1)
        ref = rng.normal(0, 4, size=(40, 1000)).astype(np.float32)
        out = kl.compare(ref, ref.copy())
        self.assertEqual(out["kl"], [0.0] * 40)
        self.assertTrue(all(out["equal"]))
        self.assertEqual(out["top1_ref"], out["top1_run"])
        shifted = kl.compare(ref, ref + np.float32(2.0))  # softmax ignores a constant
        self.assertLess(max(shifted["kl"]), 1e-12)
        self.assertFalse(any(shifted["equal"]))

    def test_large_logits_do_not_overflow(self):
        ref = np.array([[1e4, 1e4 - 1.0, -1e4]], dtype=np.float32)
        run = np.array([[1e4 - 1.0, 1e4, -1e4]], dtype=np.float32)
        out = kl.compare(ref, run)
        e = math.exp(-1.0)
        p0 = 1 / (1 + e)
        self.assertAlmostEqual(out["kl"][0], (2 * p0 - 1) * 1.0, places=6)  # p0 - p1, times the log ratio 1
        self.assertEqual(out["top1_ref"], [0])
        self.assertEqual(out["top1_run"], [1])
        self.assertAlmostEqual(out["ref_margin"][0], 1.0, places=3)
        self.assertAlmostEqual(out["max_abs_diff"][0], 1.0, places=3)

    def test_steps_past_a_chunk_are_all_there(self):
        rng = np.random.default_rng(2)
        ref = rng.normal(0, 1, size=(kl.CHUNK * 2 + 3, 50)).astype(np.float32)
        run = ref + rng.normal(0, 0.01, size=ref.shape).astype(np.float32)
        out = kl.compare(ref, run)
        self.assertEqual(len(out["kl"]), ref.shape[0])
        # Small perturbations: KL is about half the variance of the logit change under p.
        lp = kl.log_softmax(ref.astype(np.float64))
        p = np.exp(lp)
        d = (run - ref).astype(np.float64)
        approx = 0.5 * ((p * d * d).sum(1) - (p * d).sum(1) ** 2)
        np.testing.assert_allclose(out["kl"], approx, rtol=0.05)

    def test_nonfinite_run_steps_are_counted(self):
        ref = np.zeros((3, 4), dtype=np.float32)
        run = ref.copy()
        run[1, 2] = np.nan
        out = kl.compare(ref, run)
        self.assertEqual(out["nonfinite_steps"], 1)
        self.assertTrue(math.isnan(out["kl"][1]))
        self.assertEqual(out["kl"][0], 0.0)

    def test_mismatched_shapes_are_refused(self):
        with self.assertRaises(kl.KlError):
            kl.compare(np.zeros((3, 4), np.float32), np.zeros((3, 5), np.float32))
        bad_ref = np.zeros((1, 4), np.float32)
        bad_ref[0, 0] = np.inf
        with self.assertRaises(kl.KlError):
            kl.compare(bad_ref, np.zeros((1, 4), np.float32))


class Files(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        rng = np.random.default_rng(3)
        self.ref = rng.normal(0, 4, size=(8, 300)).astype(np.float32)
        np.save(os.path.join(self.dir, "ref.npy"), self.ref)

    def tearDown(self):
        self.tmp.cleanup()

    def steps(self, name, run, **meta):
        np.save(os.path.join(self.dir, name + ".npy"), run)
        args = ["steps", "--ref", os.path.join(self.dir, "ref.npy"), "--run", os.path.join(self.dir, name + ".npy"),
                "--out", os.path.join(self.dir, "steps", name + ".json")]
        for k, v in meta.items():
            args += ["--meta", "%s=%s" % (k, v)]
        os.makedirs(os.path.join(self.dir, "steps"), exist_ok=True)
        r = run_kl(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return os.path.join(self.dir, "steps", name + ".json")

    def test_table_pools_steps_and_divides_by_the_floor(self):
        common = {"model": "synthetic-8b", "dtype": "bfloat16", "logits": "head"}
        self.steps("floor", self.ref + np.float32(0.01) * self.ref[::-1], kind="floor", wire="exact",
                   compared="TP=1 vs TP=2 exact", **common)
        self.steps("int8", self.ref + np.float32(0.1) * self.ref[::-1], kind="wire", wire="int8",
                   compared="int8 vs exact", **common)
        self.steps("fp8", self.ref.copy(), kind="wire", wire="fp8", compared="fp8 vs exact", **common)
        with open(os.path.join(self.dir, "steps", "notes.json"), "w") as f:
            json.dump({"other": 1}, f)  # a folder may hold other JSON: left alone
        r = run_kl("table", os.path.join(self.dir, "steps"), "--json", os.path.join(self.dir, "table.json"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.dir, "table.json")) as f:
            rows = json.load(f)["rows"]
        self.assertEqual([x["wire"] for x in rows], ["exact", "int8", "fp8"])  # the floor first, then wire order
        floor, int8, fp8 = rows
        with open(os.path.join(self.dir, "steps", "int8.json")) as f:
            doc = json.load(f)
        self.assertAlmostEqual(int8["mean_kl"], sum(doc["kl"]) / len(doc["kl"]))
        self.assertAlmostEqual(int8["max_kl"], max(doc["kl"]))
        self.assertAlmostEqual(int8["kl_over_floor"], int8["mean_kl"] / floor["mean_kl"])
        self.assertGreater(int8["kl_over_floor"], 50)  # ten times the perturbation: about 100 times the KL
        self.assertIsNone(floor["kl_over_floor"])
        agree = sum(1 for a, b in zip(doc["top1_ref"], doc["top1_run"]) if a == b) / 8
        self.assertAlmostEqual(int8["top1_agreement"], agree)
        self.assertEqual(fp8["equal_steps"], 8)
        self.assertIn("did not use the wire", fp8["flag"])
        self.assertIn("(!)", r.stdout)
        self.assertIn("| synthetic-8b | bfloat16 | head | int8 vs exact |", r.stdout)

    def test_bad_inputs_fail_with_one_line(self):
        np.save(os.path.join(self.dir, "short.npy"), self.ref[:4])
        r = run_kl("steps", "--ref", os.path.join(self.dir, "ref.npy"), "--run", os.path.join(self.dir, "short.npy"),
                   "--out", os.path.join(self.dir, "x.json"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("differ in shape", r.stderr)
        with open(os.path.join(self.dir, "not.npy"), "w") as f:
            f.write("text")
        r = run_kl("steps", "--ref", os.path.join(self.dir, "ref.npy"), "--run", os.path.join(self.dir, "not.npy"),
                   "--out", os.path.join(self.dir, "x.json"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot read", r.stderr)
        r = run_kl("table", os.path.join(self.dir, "ref.npy"))
        self.assertEqual(r.returncode, 1)
        r = run_kl("steps", "--ref", "a", "--run", "b", "--out", "c", "--meta", "novalue")
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
