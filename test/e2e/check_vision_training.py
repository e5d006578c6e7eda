"""A small convolutional classifier, exported as a user would, trains as in
PyTorch: loss and every gradient of tcc's float64 CPU step against PyTorch's
float64 autograd on the same batch, in train() mode.

Usage: VENV/bin/python check_vision_training.py --tcc TCC --tcc-run TCC_RUN --workdir DIR

The model holds what vision and speech models are made of and the
transformer tests do not: Conv2d, BatchNorm2d in training mode (normalized
with the batch's statistics), MaxPool2d with padding, GroupNorm,
AvgPool2d with ceil_mode, a global max, a Linear head and cross-entropy. It
is exported with python/tcc_export.py by both exporters (the
torch.export-based one writes train-mode batch norm as inference
BatchNormalization, which tcc_export corrects), compiled with
`tcc --target=cpu --cpu-precision=f64` and run with `tcc-run --grads-only`.
Beside it, ONNX GroupNormalization itself (torch exports GroupNorm as
InstanceNormalization): opsets 18 and 21, every gradient against
torch.nn.functional.group_norm's within 1e-9. Exit 0 when, for both
exporters, the loss is within 1e-9 relative and every
parameter's gradient within 1e-6 of the largest of its elements (or of 1% of
the largest gradient, for a bias whose gradient a batch norm makes rounding
noise). The exported graph's constants are float32 (GELU's 1/sqrt(2), the
norms' epsilons), which PyTorch's float64 run does not round: that, not the
step, is most of the 1e-8 seen.
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import tcc_export  # noqa: E402


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.gn = nn.GroupNorm(4, 8)
        self.avg = nn.AvgPool2d(2, stride=2, ceil_mode=True)
        self.head = nn.Linear(8, 5)

    def forward(self, x, labels):
        h = self.pool(F.relu(self.bn1(self.conv1(x))))
        h = self.avg(F.gelu(self.gn(self.conv2(h))))
        h = torch.amax(h, dim=(2, 3))
        return F.cross_entropy(self.head(h), labels)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:]))
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--tcc-run", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    torch.manual_seed(0)
    x = torch.randn(4, 3, 9, 9)
    labels = torch.tensor([0, 3, 1, 4])
    failed = 0
    for exporter in ("dynamo", "torchscript"):
        torch.manual_seed(1)
        model = SmallConvNet().train()
        work = os.path.join(args.workdir, exporter)
        os.makedirs(os.path.join(work, "feed"))
        path = os.path.join(work, "model.onnx")
        tcc_export.export(model, (x, labels), path, input_names=["x", "labels"],
                          output_names=["loss"], exporter=exporter, objective=False)
        np.save(os.path.join(work, "feed", "x.npy"), x.double().numpy())  # the f64 step
        np.save(os.path.join(work, "feed", "labels.npy"), labels.numpy())
        try:
            log = run([args.tcc, path, "--target=cpu", "--cpu-precision=f64", "-o",
                       os.path.join(work, "step.so")])
            run([args.tcc_run, os.path.join(work, "step.so"), "--feed", os.path.join(work, "feed"),
                 "--grads-only", "--dump", os.path.join(work, "out")])
        except RuntimeError as e:
            print("FAIL %-11s %s" % (exporter, e))
            failed += 1
            continue
        # PyTorch in float64, train() mode, the same weights and batch.
        ref = SmallConvNet()
        ref.load_state_dict(model.state_dict())
        ref = ref.double().train()
        loss = ref(x.double(), labels)
        loss.backward()
        got_loss = float(np.load(os.path.join(work, "out", "outputs", "loss.npy")))
        worst, where = 0.0, ""
        largest = max(float(p.grad.abs().max()) for p in ref.parameters())
        for name, p in ref.named_parameters():
            got = np.load(os.path.join(work, "out", "grads", name + ".npy")).astype(np.float64)
            want = p.grad.numpy()
            # A bias feeding a batch norm has a gradient of rounding noise
            # (the norm removes the mean): relative to at least 1% of the
            # largest gradient.
            scale = max(float(np.max(np.abs(want))), 0.01 * largest)
            err = float(np.max(np.abs(got - want)) / scale)
            if err > worst:
                worst, where = err, name
        loss_err = abs(got_loss - loss.item()) / abs(loss.item())
        ok = loss_err <= 1e-9 and worst <= 1e-6
        failed += not ok
        print("%s %-11s loss %.12f (PyTorch %.12f, rel %.1e); worst gradient rel %.1e (%s)%s" % (
            "PASS" if ok else "FAIL", exporter, got_loss, loss.item(), loss_err, worst, where,
            "; tcc warned about the running statistics" if "running mean" in log else ""))
    failed += group_norm_check(args)
    print("%d passed, %d failed" % (4 - failed, failed))
    return 1 if failed else 0


def group_norm_check(args):
    """ONNX GroupNormalization as a model states it (torch exports GroupNorm
    as InstanceNormalization instead): opset 18 (scale and bias per group)
    and 21 (per channel), input, scale and bias trained, against
    torch.nn.functional.group_norm's autograd in float64."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 3, 2))
    r = rng.standard_normal((2, 4, 3, 2))
    failed = 0
    for opset in (18, 21):
        per = 2 if opset < 21 else 4
        scale, bias = rng.standard_normal(per), rng.standard_normal(per)
        inits = [numpy_helper.from_array(a, n) for a, n in
                 ((x, "x"), (scale, "scale"), (bias, "bias"), (r, "r"))]
        nodes = [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"],
                                  num_groups=2, epsilon=1e-3),
                 helper.make_node("Mul", ["y", "r"], ["yr"]),
                 helper.make_node("ReduceSum", ["yr"], ["loss"], keepdims=0)]
        g = helper.make_graph(nodes, "gn", [], [helper.make_tensor_value_info(
            "loss", TensorProto.DOUBLE, [])], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        entry = m.metadata_props.add()
        entry.key, entry.value = "tcc.trainable", "x,scale,bias"
        work = os.path.join(args.workdir, "groupnorm%d" % opset)
        os.makedirs(os.path.join(work, "feed"))
        onnx.save(m, os.path.join(work, "m.onnx"))
        try:
            run([args.tcc, os.path.join(work, "m.onnx"), "--target=cpu", "--cpu-precision=f64",
                 "-o", os.path.join(work, "s.so")])
            run([args.tcc_run, os.path.join(work, "s.so"), "--feed", os.path.join(work, "feed"),
                 "--grads-only", "--dump", os.path.join(work, "out")])
        except RuntimeError as e:
            print("FAIL groupnorm%d %s" % (opset, e))
            failed += 1
            continue
        tx, ts, tb = (torch.tensor(a, requires_grad=True) for a in (x, scale, bias))
        # Per group (opset 18): the group's scale repeated over its channels.
        ws = ts.repeat_interleave(2) if per == 2 else ts
        wb = tb.repeat_interleave(2) if per == 2 else tb
        (F.group_norm(tx, 2, ws, wb, eps=1e-3) * torch.tensor(r)).sum().backward()
        worst = 0.0
        for name, t in (("x", tx), ("scale", ts), ("bias", tb)):
            got = np.load(os.path.join(work, "out", "grads", name + ".npy"))
            want = t.grad.numpy()
            worst = max(worst, float(np.max(np.abs(got - want)) / np.max(np.abs(want))))
        ok = worst <= 1e-9
        failed += not ok
        print("%s groupnorm%d worst gradient rel %.1e (x, scale, bias against "
              "torch.nn.functional.group_norm)" % ("PASS" if ok else "FAIL", opset, worst))
    return failed


if __name__ == "__main__":
    sys.exit(main())
