"""Exports a Hugging Face causal LM for tcc, as README's fine-tuning loop
uses it:

  OUT/model.onnx        the training graph (the loss inside, dropout in
                        training mode), for `tcc --with-eval`
  OUT/model.infer.onnx  the logits, eval mode, any batch and length, for
                        `tcc-run --save ... --model` and onnxruntime
  OUT/config/           the model's config.json, for `tcc_hf.py safetensors`

  python examples/hf_export.py MODEL_DIR --batch 8 --seq 256 --out OUT
  python examples/hf_export.py CONFIG_DIR --random-init ...   (no weights)

MODEL_DIR is a local folder (from_pretrained's); nothing is downloaded.
"""
import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from tcc_export import export, export_inference  # noqa: E402


class WithLoss(torch.nn.Module):
    """docs/exporting.md's training wrapper: the model's own loss."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, input_ids, labels):
        return self.m(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                      labels=labels, use_cache=False).loss


class Logits(torch.nn.Module):
    """The inference wrapper: the model under the same attribute, logits out."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("model", help="a local folder with config.json (and the weights)")
    p.add_argument("--batch", type=int, default=8, help="the micro-batch tcc compiles (8)")
    p.add_argument("--seq", type=int, default=256, help="the sequence length it compiles (256)")
    p.add_argument("--out", default=".", help="where the files go (.)")
    p.add_argument("--random-init", action="store_true",
                   help="build the model from config.json with random weights")
    args = p.parse_args()
    import transformers as Tr
    if args.random_init:
        model = Tr.AutoModelForCausalLM.from_config(Tr.AutoConfig.from_pretrained(args.model))
    else:
        model = Tr.AutoModelForCausalLM.from_pretrained(args.model)
    os.makedirs(args.out, exist_ok=True)
    train, infer = os.path.join(args.out, "model.onnx"), os.path.join(args.out, "model.infer.onnx")
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq))
    model.train()  # dropout exported in training mode
    export(WithLoss(model), (ids, ids.clone()), train,
           input_names=["input_ids", "labels"], output_names=["loss"])
    export_inference(Logits(model), (ids,), infer, training_model=train,
                     input_names=["input_ids"], output_names=["logits"])
    model.config.save_pretrained(os.path.join(args.out, "config"))
    print("wrote %s, %s and %s" % (train, infer, os.path.join(args.out, "config")))


if __name__ == "__main__":
    main()
