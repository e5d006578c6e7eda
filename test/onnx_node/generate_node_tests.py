"""Write the ONNX backend node tests of the pip `onnx` package, opsets 18 and up.

Usage: VENV/bin/python generate_node_tests.py OUT_DIR [--min-opset 18]

Debian's libonnx-testdata (onnx 1.12) holds the node tests up to opset 17.
The pip onnx package (1.23) ships the test cases as code, not as data:
`onnx.backend.test.case.node.collect_testcases()` builds each case's model
and its inputs and expected outputs (computed by ONNX's own reference
implementations). This script writes those whose model imports an opset of
at least --min-opset in the layout of the backend test data
(OUT_DIR/<test_name>/model.onnx, test_data_set_<i>/input_<k>.pb,
output_<k>.pb), for run_node_tests.py --data OUT_DIR. A stamp file records
the onnx version, so a second run with the same version does nothing.
"""
import argparse
import os
import shutil
import sys
import warnings


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--min-opset", type=int, default=18)
    args = p.parse_args()

    import numpy as np
    import onnx
    from onnx import numpy_helper

    stamp = os.path.join(args.out, ".generated-by")
    want = "onnx %s, min opset %d\n" % (onnx.__version__, args.min_opset)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return 0
    from onnx.backend.test.case import node as node_test

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            cases = node_test.collect_testcases()
    tmp = args.out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    written = 0
    for case in cases:
        opsets = [o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")]
        if not opsets or opsets[0] < args.min_opset:
            continue
        graph = case.model.graph
        tensors_only = all(vi.type.HasField("tensor_type")
                           for vi in list(graph.input) + list(graph.output))
        if not tensors_only:
            continue  # sequences, maps, optionals: not tensors, tcc refuses them anyway
        d = os.path.join(tmp, case.name)
        os.makedirs(d)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets):
            sd = os.path.join(d, "test_data_set_%d" % i)
            os.makedirs(sd)
            for kind, values, infos in (("input", inputs, case.model.graph.input),
                                        ("output", outputs, case.model.graph.output)):
                for j, v in enumerate(values):
                    t = v if isinstance(v, onnx.TensorProto) else numpy_helper.from_array(
                        np.asarray(v), infos[j].name if j < len(infos) else "")
                    with open(os.path.join(sd, "%s_%d.pb" % (kind, j)), "wb") as f:
                        f.write(t.SerializeToString())
        written += 1
    shutil.rmtree(args.out, ignore_errors=True)
    os.replace(tmp, args.out)
    with open(stamp, "w") as f:
        f.write(want)
    print("wrote %d node tests (opset >= %d) of onnx %s to %s"
          % (written, args.min_opset, onnx.__version__, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
