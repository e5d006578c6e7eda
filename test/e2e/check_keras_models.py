"""Keras models exported by tf2onnx train in tcc as in TensorFlow.

Usage: VENV_TF/bin/python check_keras_models.py --tcc TCC --tcc-run TCC_RUN --workdir DIR
       [--models a,b] [--markdown FILE]

VENV_TF is TensorFlow (CPU) and tf2onnx in their own environment
(scripts/requirements-tf.txt; scripts/setup.sh makes it, TCC_NO_TF=1 skips it). Each model is
a tiny Keras model (random init) whose loss is a tf.function of the model in
training mode; tf2onnx converts that function (its variables become
initializers, with no metadata: tcc decides what is trained by the
initializers' roles, compiler/Import/Trainable.h). For each model:

  - import: `tcc --emit=summary` (refusals are reported with tcc's
    diagnostic), the attentions tcc fuses, the trained parameters;
  - the float64 CPU step (`tcc --cpu-precision=f64`, `tcc-run --grads-only`):
    its loss and every gradient against tf.GradientTape on the same model
    rebuilt in float64 with the same weights, each initializer matched to
    its variable by value (as is, or transposed);

Exit 0 when every model imports, every variable is a trained initializer,
and the float64 loss is within 1e-6 relative and every gradient within 1e-4
of its variable's largest (1e-6 of the model's largest for one that is zero
in exact arithmetic); under mixed_float16, whose weights tf2onnx writes as
float16 initializers (the variables rounded to fp16), 1e-3 and 1e-2. One
known limitation is checked as such: tf2onnx writes the tied LM's embedding
twice (the output projection a transposed copy), tcc warns that it trains
the two apart, and that row passes when the warning is there and every
other gradient matches.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402

V = 48      # vocabulary
S = 8       # sequence length
B = 2       # batch
D = 32      # width


def models(keras, tf):
    """name -> (what it exercises, build(dtype) -> model, (inputs...), labels, loss(labels, out, inputs))."""
    layers = keras.layers
    rng = np.random.default_rng(0)
    # Biases start random, not zero: tf2onnx's optimizer removes an Add of a
    # constant zero, so a zero-initialized bias is not in the exported graph
    # (and is not trained; see docs/exporting.md).
    # Every variable starts random, so that each initializer matches one
    # variable by value (LayerNorm's ones would match each other).
    init = {"bias_initializer": "random_normal"}
    mha = {"bias_initializer": "random_normal"}
    ln = {"gamma_initializer": "random_normal", "beta_initializer": "random_normal"}
    ids = rng.integers(1, V, size=(B, S)).astype(np.int32)
    padded = ids.copy()
    padded[1, S - 3:] = 0  # padding id 0
    mlm_labels = np.where(rng.random((B, S)) < 0.4, ids, -100).astype(np.int32)
    mlm_labels[0, 0] = ids[0, 0]
    mlm_labels[1, S - 3:] = -100
    classes = np.array([1, 3], np.int32)
    feats = rng.standard_normal((B, 12)).astype(np.float32)

    def sparse_ce(labels, logits):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))

    def mlp(dtype):
        x = keras.Input((12,), dtype=dtype)
        h = layers.Dense(16, activation="relu", dtype=dtype, **init)(x)
        h = layers.Dense(16, activation="tanh", dtype=dtype, **init)(h)
        return keras.Model(x, layers.Dense(4, dtype=dtype, **init)(h))

    def encoder(dtype):
        x = keras.Input((S,), dtype="int32")
        h = layers.Embedding(V, D, dtype=dtype)(x)
        a = layers.MultiHeadAttention(num_heads=2, key_dim=D // 2, dtype=dtype, **mha)(h, h)
        h = layers.LayerNormalization(dtype=dtype, **ln)(h + a)
        f = layers.Dense(2 * D, activation="relu", dtype=dtype, **init)(h)
        h = layers.LayerNormalization(dtype=dtype, **ln)(
            h + layers.Dense(D, dtype=dtype, **init)(f))
        h = layers.GlobalAveragePooling1D(dtype=dtype)(h)
        return keras.Model(x, layers.Dense(4, dtype=dtype, **init)(h))

    class TiedLM(keras.Model):
        """A causal LM whose output projection is its embedding, transposed."""

        def __init__(self, dtype):
            super().__init__(dtype=dtype)
            self.emb = layers.Embedding(V, D, dtype=dtype)
            self.attn = layers.MultiHeadAttention(num_heads=2, key_dim=D // 2, dtype=dtype, **mha)
            self.norm = layers.LayerNormalization(dtype=dtype, **ln)

        def call(self, x, training=False):
            h = self.emb(x)
            h = self.norm(h + self.attn(h, h, use_causal_mask=True, training=training))
            return tf.matmul(h, self.emb.embeddings, transpose_b=True)

    def tied_lm(dtype):
        m = TiedLM(dtype)
        m(ids[:, :-1])
        return m

    def mlm(dtype):
        x = keras.Input((S,), dtype="int32")
        pad = keras.ops.not_equal(x, 0)
        h = layers.Embedding(V, D, dtype=dtype)(x)
        mask = keras.ops.logical_and(pad[:, None, :], pad[:, :, None])
        a = layers.MultiHeadAttention(num_heads=2, key_dim=D // 2, dtype=dtype, **mha)(h, h, attention_mask=mask)
        h = layers.LayerNormalization(dtype=dtype, **ln)(h + a)
        return keras.Model(x, layers.Dense(V, dtype=dtype, **init)(h))

    def masked_ce(labels, logits):
        keep = tf.cast(labels != -100, logits.dtype)
        safe = tf.where(labels == -100, tf.zeros_like(labels), labels)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe, logits=logits)
        return tf.reduce_sum(ce * keep) / tf.reduce_sum(keep)

    return {
        "mlp": ("Dense, ReLU, tanh", mlp, (feats,), classes, sparse_ce),
        "mha_encoder": ("MultiHeadAttention, LayerNormalization, GlobalAveragePooling1D",
                        encoder, (ids,), classes, sparse_ce),
        "tied_causal_lm": ("causal mask, tied embedding (transposed)", tied_lm, (ids[:, :-1],),
                           ids[:, 1:], sparse_ce),
        "padded_mlm": ("padding mask from the ids, masked labels", mlm, (padded,), mlm_labels,
                       masked_ce),
        "mixed_float16": ("the encoder under the mixed_float16 policy", encoder, (ids,), classes,
                          sparse_ce),
    }


# The attentions tcc-fuse-attention must fuse in each model. padded_mlm's
# mask (query and key padding, from the ids) hides every key of a padded
# query, which Keras' masked softmax turns into a uniform row: an additive
# bias cannot say that, so that attention stays unfused.
FUSED = {"mlp": 0, "mha_encoder": 1, "tied_causal_lm": 1, "padded_mlm": 0, "mixed_float16": 1}


def match_initializers(model_proto, variables):
    """variable name -> (initializer name, transposed) by value."""
    from onnx import numpy_helper
    inits = {t.name: numpy_helper.to_array(t) for t in model_proto.graph.initializer
             if t.data_type in (1, 10, 11)}
    out = {}
    for v in variables:
        for name, arr in inits.items():
            if name in {n for n, _ in out.values()}:
                continue
            a = arr.astype(np.float32)
            # A float16 initializer (the mixed_float16 policy's casts, folded
            # by tf2onnx) holds the variable rounded to fp16.
            want = v.numpy().astype(arr.dtype).astype(np.float32)
            if a.shape == want.shape and np.array_equal(a, want):
                out[v.path] = (name, False)
                break
            if a.ndim == 2 and a.T.shape == want.shape and np.array_equal(a.T, want):
                out[v.path] = (name, True)
                break
            if a.size == want.size and np.array_equal(a.ravel(), want.ravel()):
                out[v.path] = (name, False)  # reshaped (EinsumDense kernels)
                break
    return out


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def first_error(text):
    lines = [ln for ln in text.splitlines() if "error" in ln]
    return (lines[0] if lines else text.strip().splitlines()[-1] if text.strip() else "?")[:300]


def gradient_error(got, want):
    """The worst of max|got - want| / max|want| over the variables, by
    bench/gpu/compare.py's rule (a gradient zero in exact arithmetic, such as
    an attention key bias's, against 1e-2 of the model's largest; a NaN where
    the reference is finite is inf)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                                    "gpu"))
    import compare  # noqa: E402
    model_max = max(float(np.max(np.abs(w), initial=0.0)) for w in want)
    return max(compare.rel_error(w, g, model_max) for g, w in zip(got, want))


def cuda_check(row, work, path, args, matched, model, grads, keras, tf, build, inputs, labels,
               loss_fn, agree):
    """The precision issue's bound on a Keras model: tcc's fp16 CUDA step
    (through the CUDA emulation, one --grads-only micro-step) against
    TensorFlow float64, beside TensorFlow's own mixed_float16 policy on the
    same weights and batch (float16 compute, float32 variables, the loss
    scaled by 2^10 and the gradients unscaled, as a LossScaleOptimizer
    starts). Pass: within 1e-2, or within 2x TensorFlow's error + 1e-3 where
    that is larger. Over the variables `agree` (indices) only. Sets
    row["cuda_rel"], row["tf16_rel"], and row["cuda_fail"] on a failure."""
    step = os.path.join(work, "step_cuda.so")
    rc, out = run([args.tcc, path, "--target=cuda", "--cuda-emulation", "-o", step])
    if rc == 0:
        rc, out = run([args.tcc_run, step, "--feed", os.path.join(work, "feed32"), "--grads-only",
                       "--dump", os.path.join(work, "out_cuda")])
    if rc != 0:
        row["cuda_fail"] = "CUDA emulation: " + first_error(out)
        return
    variables = [model.trainable_variables[i] for i in agree]
    want = [grads[i].numpy() if grads[i] is not None else np.zeros(variables[n].shape)
            for n, i in enumerate(agree)]
    got = []
    for v, w in zip(variables, want):
        init, transposed = matched[v.path]
        g = np.load(os.path.join(work, "out_cuda", "grads", init.replace("/", "_") + ".npy"))
        g = g.astype(np.float64)
        got.append((g.T if transposed else g).reshape(w.shape))
    row["cuda_rel"] = gradient_error(got, want)
    keras.utils.set_random_seed(1)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        half = build(None)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    half.set_weights(model.get_weights())
    scale = 1024.0
    with tf.GradientTape() as tape:
        out16 = half(*[tf.constant(a) for a in inputs], training=True)
        scaled = tf.cast(loss_fn(tf.constant(labels), tf.cast(out16, tf.float32)), tf.float32) * scale
    g16 = [(tf.convert_to_tensor(g).numpy().astype(np.float64) / scale) if g is not None
           else np.zeros(v.shape)
           for v, g in zip(half.trainable_variables, tape.gradient(scaled, half.trainable_variables))]
    row["tf16_rel"] = gradient_error([g16[i] for i in agree], want)
    bound = max(1e-2, 2 * row["tf16_rel"] + 1e-3)
    if row["cuda_rel"] > bound:
        row["cuda_fail"] = "fp16 CUDA gradients %.1e from float64, over %.1e" % (row["cuda_rel"], bound)


def check(name, spec, args, keras, tf, tf2onnx):
    what, build, inputs, labels, loss_fn = spec
    work = os.path.join(args.workdir, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "feed"))
    row = {"name": name, "what": what}
    keras.utils.set_random_seed(1)
    if name == "mixed_float16":
        keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = build("float32" if name != "mixed_float16" else None)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    sig = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype), name="x%d" % i) for i, a in enumerate(inputs)]
    sig.append(tf.TensorSpec(labels.shape, tf.int32, name="labels"))

    @tf.function(input_signature=sig)
    def step_loss(*args_):
        out = model(*args_[:-1], training=True)
        return tf.cast(loss_fn(args_[-1], tf.cast(out, tf.float32)), tf.float32)

    path = os.path.join(work, "model.onnx")
    try:
        proto, _ = tf2onnx.convert.from_function(step_loss, input_signature=sig, opset=17,
                                                 output_path=path)
    except Exception as e:  # noqa: BLE001
        row.update(status="export fails", notes=str(e).splitlines()[0][:300])
        return row
    in_names = [i.name for i in proto.graph.input]
    os.makedirs(os.path.join(work, "feed32"))
    for name_, arr in zip(in_names, list(inputs) + [labels]):
        for feed in ("feed", "feed32"):
            np.save(os.path.join(work, feed, name_.replace("/", "_") + ".npy"), arr)
    rc, out = run([args.tcc, path])
    if rc != 0:
        row.update(status="refused by tcc", notes=first_error(out))
        return row
    ops = re.search(r"^ops\s+(.*)$", out, re.M)
    row["ops"] = ops.group(1).strip() if ops else ""
    step = os.path.join(work, "step64.so")
    rc, out = run([args.tcc, path, "--target=cpu", "--cpu-precision=f64", "-o", step])
    if rc != 0:
        row.update(status="refused by tcc (f64 step)", notes=first_error(out))
        return row
    rc, outp = run([args.tcc, path, "--target=cpu", "--emit=training"])
    row["attention"] = outp.count("tcc.attention ") if rc == 0 else "-"
    # The feeds as the f64 step declares them.
    for f in os.listdir(os.path.join(work, "feed")):
        a = np.load(os.path.join(work, "feed", f))
        if a.dtype == np.float32:
            np.save(os.path.join(work, "feed", f), a.astype(np.float64))
    rc, out = run([args.tcc_run, step, "--feed", os.path.join(work, "feed"), "--grads-only",
                   "--dump", os.path.join(work, "out64")])
    if rc != 0:
        row.update(status="fails in tcc-run", notes=first_error(out))
        return row

    # TensorFlow in float64: the same model, the same weights.
    keras.utils.set_random_seed(1)
    ref = build("float64")
    ref.set_weights([w.astype(np.float64) for w in model.get_weights()])
    feeds64 = [tf.constant(a.astype(np.float64) if a.dtype == np.float32 else a) for a in inputs]
    with tf.GradientTape() as tape:
        loss = loss_fn(tf.constant(labels), ref(*feeds64, training=True))
    grads = [tf.convert_to_tensor(g) if g is not None else None
             for g in tape.gradient(loss, ref.trainable_variables)]
    matched = match_initializers(proto, model.trainable_variables)
    got_loss = float(np.load(os.path.join(work, "out64", "outputs", os.listdir(
        os.path.join(work, "out64", "outputs"))[0])))
    row["loss_rel"] = abs(got_loss - float(loss)) / abs(float(loss))
    largest = max(float(np.max(np.abs(g.numpy()))) for g in grads if g is not None)
    worst, missing, errors = 0.0, [], {}
    for v, g in zip(model.trainable_variables, grads):
        if v.path not in matched:
            missing.append(v.path)
            continue
        init, transposed = matched[v.path]
        f = os.path.join(work, "out64", "grads", init.replace("/", "_") + ".npy")
        if not os.path.exists(f):
            missing.append(v.path + " (" + init + " not trained)")
            continue
        got = np.load(f).astype(np.float64)
        got = got.T if transposed else got
        want = g.numpy() if g is not None else np.zeros(v.shape)
        got = got.reshape(want.shape)
        scale = max(float(np.max(np.abs(want))), 1e-6 * largest)
        errors[init] = float(np.max(np.abs(got - want))) / scale
        worst = max(worst, errors[init])
    row["grad_rel"] = worst
    notes = []
    fp16 = any(t.data_type == 10 for t in proto.graph.initializer)
    loss_bound, grad_bound = (1e-3, 1e-2) if fp16 else (1e-6, 1e-4)
    cuda = args.cuda_emulation and (args.cuda_emulation == "all" or
                                    name in args.cuda_emulation.split(","))
    if cuda and not missing:
        # The variables the float64 step matched (not the tied pair, which
        # tcc trains apart: reported above).
        agree = [i for i, v in enumerate(model.trainable_variables)
                 if errors.get(matched[v.path][0], 1.0) < grad_bound]
        cuda_check(row, work, path, args, matched, model, grads, keras, tf, build, inputs, labels,
                   loss_fn, agree)
    if missing:
        notes.append("not trained or not matched: " + ", ".join(missing[:3]))
    # mixed_float16: tf2onnx folds the casts into float16 initializers, the
    # weights rounded to fp16 (2^-11 relative): the bounds are that rounding's.
    if fp16:
        notes.append("float16 initializers (weights rounded to fp16)")
    ok = not missing and row["loss_rel"] < loss_bound and worst < grad_bound
    if row["attention"] != FUSED[name]:
        notes.append("%s attentions fused where %d should be" % (row["attention"], FUSED[name]))
        ok = False
    if "cuda_fail" in row:
        notes.append(row["cuda_fail"])
        ok = False
    if name == "tied_causal_lm" and not ok:
        # tf2onnx writes the tied embedding twice (the output projection a
        # transposed copy): tcc trains the two apart and says so. Known and
        # reported, not passed: the row must show that warning and every
        # gradient but the tied pair's must match.
        rc, log = run([args.tcc, path])
        tied = re.search(r'initializer "([^"]+)" holds the values of "([^"]+)", transposed', log)
        rest = max((e for n, e in errors.items() if tied and n != tied.group(2)), default=0.0)
        if (tied and not missing and row["loss_rel"] < loss_bound and rest < grad_bound and
                row["attention"] == FUSED[name] and "cuda_fail" not in row):
            notes.append("tf2onnx writes the tied embedding twice (a transposed copy): tcc "
                         "warns and trains two; the other gradients within %.1e" % rest)
            row["status"] = "known: trains two copies"
            row["notes"] = "; ".join(notes)
            return row
    row["status"] = "trains" if ok else "wrong against TensorFlow"
    row["notes"] = "; ".join(notes)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--tcc-run", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--models")
    ap.add_argument("--markdown")
    ap.add_argument("--cuda-emulation", nargs="?", const="all", metavar="MODELS",
                    help="also the fp16 CUDA step through the CUDA emulation, against TensorFlow's "
                         "own mixed_float16 error on the same batch (all models, or those listed)")
    args = ap.parse_args()
    import keras
    import tensorflow as tf
    import tf2onnx
    os.makedirs(args.workdir, exist_ok=True)
    specs = models(keras, tf)
    names = args.models.split(",") if args.models else list(specs)
    rows, failed = [], 0
    for name in names:
        t0 = time.time()
        row = check(name, specs[name], args, keras, tf, tf2onnx)
        rows.append(row)
        # The tied LM's known limitation (tcc does not tie a weight tf2onnx
        # wrote twice) is reported as such, and checked: see check().
        failed += row["status"] not in ("trains", "known: trains two copies")
        e = lambda k: "%.1e" % row[k] if k in row else "-"  # noqa: E731
        print("%-15s %-26s loss %-8s grad %-8s fp16 %-8s tf16 %-8s attn %-2s %5.1fs %s" % (
            name, row["status"], e("loss_rel"), e("grad_rel"), e("cuda_rel"), e("tf16_rel"),
            row.get("attention", "-"), time.time() - t0, row.get("notes", "")), flush=True)
    if args.markdown:
        lines = ["| model | what it exercises | status | attn | loss | grad | fp16 | tf16 | notes |",
                 "|---|---|---|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            e = lambda k: "%.1e" % r[k] if k in r else "-"  # noqa: E731
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["name"], r["what"], r["status"], r.get("attention", "-"), e("loss_rel"),
                e("grad_rel"), e("cuda_rel"), e("tf16_rel"), r.get("notes", "").replace("|", "\\|")))
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    print("%d passed, %d failed" % (len(rows) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
