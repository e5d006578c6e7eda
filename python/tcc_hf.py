"""From tcc back to Hugging Face: trained weights as safetensors, and text as tokens.

    python tcc_hf.py safetensors TRAINED.onnx OUT_DIR [--prefix m.] [--config-from DIR]
                     [--peft] [--adapter-config-from DIR]
    python tcc_hf.py tokens --tokenizer DIR --out DIR [--val-fraction 0.1] FILE...

`safetensors` reads the model that `tcc-run --save` wrote (the exported
graph with the trained weights, external data included) and writes its
parameters under the module's own names (the wrapper's attribute prefix,
`m.` in docs/exporting.md's `WithLoss`, removed) as `model.safetensors`,
which `from_pretrained(OUT_DIR)` loads beside the `config.json` that
`--config-from` copies (a folder `model.save_pretrained` or
`config.save_pretrained` wrote before training). A weight tied to another
(GPT-2's lm_head and wte) is one initializer and one tensor; transformers
ties it again on load. Buffers (masks, position tables, the exporter's
constants) are not written: transformers makes its own.

With `--peft` (a PEFT LoRA model exported with tcc_export, its base in
`tcc.frozen`), only the trained parameters (the model's `tcc.trainable`
metadata) are written, as PEFT names them (`.default` removed), into
`adapter_model.safetensors`, beside the `adapter_config.json` that
`--adapter-config-from` copies (`peft_model.save_pretrained` before
training): `PeftModel.from_pretrained(base, OUT_DIR)` loads it.

`tokens` is nanoGPT's prepare.py for any tokenizer `transformers` can load
from a local folder (`AutoTokenizer.from_pretrained(DIR)`; nothing is
downloaded): each FILE is one document, tokenized, followed by the
tokenizer's end-of-text token when it has one; the stream's last
`--val-fraction` becomes `val.bin`, the rest `train.bin` (little-endian
uint16, what `tcc-run --data` reads; a vocabulary over 65536 writes
`train.npy`/`val.npy` of int32 instead).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys


def _metadata(proto) -> dict:
    return {p.key: p.value for p in proto.metadata_props}


def _strip(name: str, prefix: str) -> str:
    return name[len(prefix):] if prefix and name.startswith(prefix) else name


def trained_tensors(onnx_path: str, prefix: str = "m.", trainable_only: bool = False) -> dict:
    """The float initializers of `onnx_path` that are parameters (the
    model's tcc.trainable and tcc.frozen metadata; every float initializer
    without it), as numpy arrays under their names less `prefix`."""
    import onnx
    from onnx import numpy_helper
    proto = onnx.load(onnx_path)  # external data is read from beside the file
    meta = _metadata(proto)
    if "tcc.trainable" in meta:
        trained = {n for n in meta["tcc.trainable"].split(",") if n}
        frozen = {n for n in meta.get("tcc.frozen", "").split(",") if n}
        wanted = trained if trainable_only else trained | frozen
    else:
        if trainable_only:
            raise SystemExit("%s has no tcc.trainable metadata, so which tensors are the "
                             "adapters is unknown; export it with python/tcc_export.py" % onnx_path)
        wanted = None
    out = {}
    for t in proto.graph.initializer:
        if wanted is not None and t.name not in wanted:
            continue
        if t.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                               onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE):
            continue
        out[_strip(t.name, prefix)] = numpy_helper.to_array(t)
    return out


def write_safetensors(onnx_path: str, out_dir: str, prefix: str = "m.",
                      config_from: str | None = None, peft: bool = False,
                      adapter_config_from: str | None = None) -> list[str]:
    """Writes the trained parameters of `onnx_path` into `out_dir` (see the
    module's doc). Returns the tensor names written."""
    import numpy as np
    from safetensors.numpy import save_file
    tensors = trained_tensors(onnx_path, prefix, trainable_only=peft)
    if peft:
        # PEFT's own names: the adapter's name ("default") is not in them.
        tensors = {n.replace(".default.", "."): v for n, v in tensors.items()}
        filename, config_name, config_src = ("adapter_model.safetensors", "adapter_config.json",
                                             adapter_config_from)
    else:
        filename, config_name, config_src = "model.safetensors", "config.json", config_from
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, "." + filename + ".tmp")
    save_file({n: np.ascontiguousarray(v) for n, v in tensors.items()}, tmp,
              metadata={"format": "pt"})
    os.replace(tmp, os.path.join(out_dir, filename))
    if config_src:
        src = os.path.join(config_src, config_name)
        if not os.path.isfile(src):
            raise SystemExit("%s has no %s" % (config_src, config_name))
        shutil.copyfile(src, os.path.join(out_dir, config_name))
    return sorted(tensors)


def write_tokens(tokenizer_dir: str, files: list[str], out_dir: str,
                 val_fraction: float = 0.1) -> dict:
    """Tokenizes `files` (see the module's doc). Returns the counts."""
    import numpy as np
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    ids: list[int] = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            ids.extend(tok(fh.read(), add_special_tokens=False)["input_ids"])
        if tok.eos_token_id is not None:
            ids.append(tok.eos_token_id)
    if not 0 <= val_fraction < 1:
        raise SystemExit("--val-fraction must be in [0, 1)")
    n_val = int(len(ids) * val_fraction)
    vocab = len(tok)
    small = vocab <= 65536
    arr = np.array(ids, dtype=np.uint16 if small else np.int32)
    os.makedirs(out_dir, exist_ok=True)
    parts = {"train": arr[:len(arr) - n_val], "val": arr[len(arr) - n_val:]}
    for name, part in parts.items():
        if name == "val" and not n_val:
            continue
        path = os.path.join(out_dir, name + (".bin" if small else ".npy"))
        tmp = path + ".tmp"
        if small:
            part.tofile(tmp)
        else:
            with open(tmp, "wb") as fh:
                np.save(fh, part)
        os.replace(tmp, path)
    return {"vocab": vocab, "train": int(len(parts["train"])), "val": int(n_val)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("safetensors", help="trained weights as safetensors for from_pretrained")
    s.add_argument("onnx")
    s.add_argument("out")
    s.add_argument("--prefix", default="m.", help="the export wrapper's attribute prefix")
    s.add_argument("--config-from", help="a folder with the model's config.json")
    s.add_argument("--peft", action="store_true", help="write the trained adapters only")
    s.add_argument("--adapter-config-from", help="a folder with adapter_config.json")
    t = sub.add_parser("tokens", help="text files to a train.bin/val.bin token stream")
    t.add_argument("files", nargs="+")
    t.add_argument("--tokenizer", required=True, help="a local tokenizer folder")
    t.add_argument("--out", required=True)
    t.add_argument("--val-fraction", type=float, default=0.1)
    a = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.command == "safetensors":
        names = write_safetensors(a.onnx, a.out, a.prefix, a.config_from, a.peft,
                                  a.adapter_config_from)
        print("%s: %d tensors" % (a.out, len(names)))
    else:
        counts = write_tokens(a.tokenizer, a.files, a.out, a.val_fraction)
        print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
