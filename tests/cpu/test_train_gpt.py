#!/usr/bin/env python3
"""examples/train_gpt.py on the CPU (ctest train_gpt_cpu, label cpu), in about 15 s:
  - a tiny GPT trained with SDPA for 40 steps, seeds 0 and 1, into a temporary directory: the JSON
    has its keys (provenance, the data's entropies, the runs' losses, eval points, tokens/s; the
    second seed under more_seeds, from other initial weights), every loss is
    finite, the loss falls (the last eval point below the first, the last steps' train loss below
    the first ones'), tokens/s > 0, the entropies are ordered (source < bigram < unigram < uniform),
    and the PNG is written (or, without matplotlib, the script says why not);
  - scripts/plot_training.py redraws the PNG from the JSON alone (where matplotlib is installed);
  - the verdict of `both`: with one seed and with three, a difference within 2x the noise, one
    beyond it; too few eval points;
  - --attention ladder (and both) on the CPU exit non-zero, saying the ladder's kernels need a CUDA GPU.

    python3 tests/cpu/test_train_gpt.py

Exit 77 (ctest's skip) when torch is not importable, as python/tests/run.py does."""
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

SKIP = 77
ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples/train_gpt.py"
TINY = ["--device", "cpu", "--layers", "1", "--width", "64", "--heads", "1", "--context", "64", "--batch", "8"]
# One thread: the model is tiny, and the CPU may be shared (a build running beside the tests).
ENV = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def run(*args, timeout=120):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=ENV, timeout=timeout)


class TrainGptOnCpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        out = pathlib.Path(cls.tmp.name)
        cls.proc = run(SCRIPT, "--attention", "sdpa", *TINY, "--steps", "40", "--lr", "1e-2", "--eval-every", "10",
                       "--eval-batches", "4", "--seeds", "2", "--out", out)
        found = sorted(out.glob("*-train-gpt.json"))
        cls.json_path = found[0] if found else None
        cls.result = json.loads(found[0].read_text()) if found else None

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stdout + self.proc.stderr)
        self.assertIsNotNone(self.result, "no <date>-train-gpt.json in --out:\n" + self.proc.stdout)

    def test_json_keys(self):
        r = self.result
        for key in ("provenance", "data", "flops_per_token", "runs"):
            self.assertIn(key, r)
        for key in ("date", "args", "seed", "torch", "commit", "gpu", "device"):
            self.assertIn(key, r["provenance"])
        self.assertEqual(r["provenance"]["device"], "cpu")
        self.assertEqual(list(r["runs"]), ["sdpa"])
        for key in ("train_loss", "eval", "tokens_per_s", "final_train_loss", "final_val_loss", "wall_s"):
            self.assertIn(key, r["runs"]["sdpa"])
        self.assertNotIn("verdict", r)
        self.assertEqual([x["seed"] for x in [r["runs"]["sdpa"]] + r["more_seeds"]["sdpa"]], [0, 1])
        second = r["more_seeds"]["sdpa"][0]
        self.assertNotEqual(second["train_loss"][0], r["runs"]["sdpa"]["train_loss"][0], "the same initial weights")
        self.assertIsNone(second["grad_scale"], "no GradScaler on the CPU")

    def test_losses_finite_and_falling(self):
        run_ = self.result["runs"]["sdpa"]
        train, evals = run_["train_loss"], [loss for _, loss in run_["eval"]]
        self.assertEqual(len(train), 40)
        self.assertEqual([s for s, _ in run_["eval"]], [10, 20, 30, 40])
        self.assertTrue(all(math.isfinite(x) for x in train + evals + [run_["final_val_loss"]]))
        self.assertAlmostEqual(train[0], math.log(256), delta=0.3)  # a fresh model: about uniform
        self.assertLess(evals[-1], evals[0])
        self.assertLess(sum(train[-10:]) / 10, sum(train[:5]) / 5 - 0.3)

    def test_throughput_and_entropies(self):
        run_, d = self.result["runs"]["sdpa"], self.result["data"]
        self.assertGreater(run_["tokens_per_s"], 0)
        self.assertGreater(run_["wall_s"], 0)
        self.assertLess(d["source_entropy"], d["bigram_entropy"])
        self.assertLess(d["bigram_entropy"], d["unigram_entropy"])
        self.assertLess(d["unigram_entropy"], d["uniform"])
        self.assertGreater(d["source_entropy"], 1.0)
        self.assertGreater(d["val_source_entropy"], 1.0)

    def test_png(self):
        png = self.json_path.with_suffix(".png")
        if HAVE_MATPLOTLIB:
            self.assertTrue(png.is_file() and png.stat().st_size > 1000, self.proc.stdout)
        else:
            self.assertIn("matplotlib is not installed", self.proc.stdout)

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
    def test_plot_from_json_alone(self):
        png = pathlib.Path(self.tmp.name) / "again.png"
        p = run(ROOT / "scripts/plot_training.py", self.json_path, "--png", png)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(png.is_file())


class Verdict(unittest.TestCase):
    def test_difference_against_noise(self):
        sys.path.insert(0, str(ROOT / "examples"))
        import train_gpt

        def record(final, wobble, tokens_per_s=1e6, points=10):
            evals = [(100 * (i + 1), final + 0.01 * (points - 1 - i) + wobble * (-1) ** i) for i in range(points)]
            return {"eval": evals, "final_val_loss": evals[-1][1], "tokens_per_s": tokens_per_s}
        def both(s, la, more=()):  # more: further (sdpa, ladder) pairs, one per seed
            result = {"runs": {"sdpa": s, "ladder": la}}
            if more:
                result["more_seeds"] = {"sdpa": [m[0] for m in more], "ladder": [m[1] for m in more]}
            return train_gpt.verdict(result)
        same = both(record(2.0, 0.01), record(2.005, 0.01, 9e5))
        self.assertTrue(same["same_within_noise"], same["line"])
        self.assertAlmostEqual(same["tokens_per_s_ratio"], 0.9)
        self.assertIn("ladder/sdpa = 0.900", same["line"])
        apart = both(record(2.0, 0.001), record(2.1, 0.001))
        self.assertFalse(apart["same_within_noise"])
        self.assertIn("DIFFERENT", apart["line"])
        few = both(record(2.0, 0.01, points=2), record(2.0, 0.01, None, 2))
        self.assertIsNone(few["noise"])
        self.assertIsNone(few["tokens_per_s_ratio"])
        self.assertIn("noise unknown", few["line"])
        # three seeds: the seed-to-seed scatter is the noise (smooth curves: the one-run rule would say 0)
        seeds = [(record(f, 0.0), record(f + d, 0.0)) for f, d in ((2.00, 0.02), (2.06, -0.01), (1.95, 0.03))]
        spread = both(*seeds[0], seeds[1:])
        self.assertAlmostEqual(spread["val_loss_difference"], 0.04 / 3)
        self.assertTrue(spread["same_within_noise"], spread["line"])
        self.assertIn("over 3 and 3 seeds", spread["line"])
        tight = [(record(f, 0.0), record(f + 0.05, 0.0)) for f in (2.0, 2.001, 1.999)]
        self.assertFalse(both(*tight[0], tight[1:])["same_within_noise"])


class LadderNeedsCuda(unittest.TestCase):
    def test_ladder_on_cpu_fails_clearly(self):
        for backend in ("ladder", "both"):
            with tempfile.TemporaryDirectory() as tmp:
                p = run(SCRIPT, "--attention", backend, *TINY, "--steps", "2", "--out", tmp)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn("needs a CUDA GPU", p.stderr)
                self.assertIn("--attention sdpa", p.stderr)
                self.assertEqual(list(pathlib.Path(tmp).iterdir()), [], "nothing is written")


def main():
    try:
        import torch  # noqa: F401
    except Exception as e:  # noqa: BLE001 (any failure to import is a skip: no usable torch here)
        print(f"SKIPPED: torch is not importable ({e}); examples/train_gpt.py needs PyTorch")
        return SKIP
    result = unittest.main(exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
