"""Builds the bundled training demo: a character-level corpus and a tiny GPT.

Usage: /usr/bin/python3 examples/make_demo.py [CORPUS.txt]

Writes, beside this script:
  data/corpus.txt       the text (default: the GNU GPL v3 text Debian ships in
                        /usr/share/common-licenses/GPL-3, which may be copied
                        verbatim)
  data/train.bin        the text as uint16 character ids (nanoGPT's format)
  data/vocab.txt        the characters, one id per line as its code point
  tiny_gpt_demo.onnx    a tiny GPT (2 layers, width 64, context 32, batch 8)
                        exported with training=TRAINING, do_constant_folding=False,
                        with its tcc.objective metadata (python/tcc_export.py)
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "models"))
from export_models import TinyGPT  # noqa: E402
import tcc_export  # noqa: E402  (test/models put python/ on the path)

VOCAB = 80          # room for the corpus' characters
BLOCK, BATCH = 32, 8


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/common-licenses/GPL-3"
    text = open(src, encoding="utf-8").read()
    chars = sorted(set(text))
    if len(chars) > VOCAB:
        sys.exit("the corpus has %d distinct characters; the demo model has %d"
                 % (len(chars), VOCAB))
    data = os.path.join(HERE, "data")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    ids = np.array([chars.index(c) for c in text], dtype=np.uint16)
    ids.tofile(os.path.join(data, "train.bin"))
    with open(os.path.join(data, "vocab.txt"), "w") as f:
        f.write("".join("%d\n" % ord(c) for c in chars))

    torch.manual_seed(0)
    model = TinyGPT(vocab=VOCAB, block_size=BLOCK, n_embd=64, n_layer=2, n_head=4,
                    gelu_approx="tanh")
    model.train()
    idx = torch.zeros(BATCH, BLOCK, dtype=torch.long)
    path = os.path.join(HERE, "tiny_gpt_demo.onnx")
    torch.onnx.export(model, (idx, idx), path,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=["idx", "targets"], output_names=["loss"])
    # The objective, as python/tcc_export.py records it: which input is
    # which, and that the loss reads its targets aligned (targets[t] is the
    # token after idx[t]), measured on the module; tcc-run --data reads it.
    import onnx
    objective = tcc_export.infer_objective(model, (idx, idx.clone()), ["idx", "targets"])
    m = onnx.load(path)
    entry = m.metadata_props.add()
    entry.key, entry.value = tcc_export.OBJECTIVE_KEY, tcc_export.format_objective(objective)
    onnx.save(m, path)
    print("corpus: %d characters, %d distinct; model: tiny_gpt_demo.onnx" % (len(text), len(chars)))


if __name__ == "__main__":
    main()
