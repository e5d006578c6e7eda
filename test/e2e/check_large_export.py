"""A model whose initializers pass 2 GiB, exported and compiled (issue 48).

Usage: VENV/bin/python check_large_export.py --tcc TCC [--tcc-run TCC_RUN] --workdir DIR

A protobuf message cannot reach 2 GiB, so python/tcc_export.py writes such a
model's initializers as ONNX external data (MODEL.onnx.data beside it). Here a
600,000 x 1,024 embedding and a small head (614,465,600 fp32 values, 2.46 GB;
random init, nothing downloaded) is exported by the torch.export-based
exporter, then:
  - the model file is small and MODEL.onnx.data holds every byte;
  - `tcc --no-weights --emit=summary` reads it: three trainable parameters,
    the embedding's shape, and the recorded objective;
  - `tcc --target=cpu --no-weights -o` plans and builds its step (no
    weights embedded; tcc-run --init-weights would give them).
Also a small model exported with external_data=True: compiled with its
weights read from the data file, one training step, and `tcc-run --save`
of it loads in onnx with the trained values.
Every file is removed at the end (pass, fail or crash). About 70 s and 8 GB
of memory on 2 cores.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import tcc_export  # noqa: E402

ROWS, WIDTH, CLASSES = 600_000, 1024, 64


class Big(torch.nn.Module):
    def __init__(self, rows=ROWS, width=WIDTH):
        super().__init__()
        self.emb = torch.nn.Embedding(rows, width)
        self.head = torch.nn.Linear(width, CLASSES)

    def forward(self, input_ids, labels):
        h = self.head(self.emb(input_ids))
        return torch.nn.functional.cross_entropy(h.reshape(-1, CLASSES), labels.reshape(-1))


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))
    return r.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run")
    p.add_argument("--workdir", required=True)
    args = p.parse_args()
    torch.set_num_threads(2)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    problems = []
    try:
        # A small model with external data on request: weights read back.
        torch.manual_seed(0)
        small = Big(rows=300, width=16)
        ids = torch.randint(0, CLASSES, (2, 8))
        path = os.path.join(args.workdir, "small.onnx")
        tcc_export.export(small, (ids, ids.clone()), path, input_names=["input_ids", "labels"],
                          output_names=["loss"], external_data=True)
        if not os.path.isfile(path + ".data"):
            problems.append("external_data=True wrote no small.onnx.data")
        step = os.path.join(args.workdir, "small.so")
        run([args.tcc, path, "--target=cpu", "-o", step])
        if args.tcc_run:
            feed = os.path.join(args.workdir, "feed")
            os.makedirs(feed)
            np.save(os.path.join(feed, "input_ids.npy"), ids.numpy())
            np.save(os.path.join(feed, "labels.npy"), ids.numpy())
            saved = os.path.join(args.workdir, "small_trained.onnx")
            run([args.tcc_run, step, "--feed", feed, "--steps", "1", "--lr", "0.1", "--quiet",
                 "--save", saved])
            import onnx
            from onnx import numpy_helper
            got = {t.name: numpy_helper.to_array(t) for t in onnx.load(saved).graph.initializer}
            start = small.emb.weight.detach().numpy()
            if got["emb.weight"].shape != start.shape or np.array_equal(got["emb.weight"], start):
                problems.append("--save of the external-data model: emb.weight not trained")
        print("small model with external data: compiled, trained one step, saved")

        # Past 2 GiB.
        t0 = time.time()
        with torch.no_grad():
            big = Big()
        path = os.path.join(args.workdir, "big.onnx")
        tcc_export.export(big, (ids, ids.clone()), path, input_names=["input_ids", "labels"],
                          output_names=["loss"])
        del big
        export_s = time.time() - t0
        model_bytes, data_bytes = os.path.getsize(path), os.path.getsize(path + ".data")
        want = (ROWS * WIDTH + CLASSES * WIDTH) * 4  # the bias (256 bytes) may stay inline
        if data_bytes < want or model_bytes > 1 << 20:
            problems.append("big.onnx %d bytes, big.onnx.data %d bytes (the parameters are %d)"
                            % (model_bytes, data_bytes, want))
        t0 = time.time()
        summary = run([args.tcc, path, "--no-weights", "--emit=summary"])
        for needle in ("3 trainable", "emb.weight", "[600000, 1024]", "objective"):
            if needle not in summary:
                problems.append("the summary lacks %r:\n%s" % (needle, summary))
        run([args.tcc, path, "--target=cpu", "--no-weights", "-o",
             os.path.join(args.workdir, "big.so")])
        print("2.46 GB model: exported in %.1f s (big.onnx %d bytes, big.onnx.data %d bytes); "
              "summary and --no-weights CPU step in %.1f s" % (export_s, model_bytes, data_bytes,
                                                               time.time() - t0))
    except Exception as e:  # noqa: BLE001
        problems.append(str(e))
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    for prob in problems:
        print("FAIL: " + prob)
    print("%d problem(s)" % len(problems) if problems else "large export: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
