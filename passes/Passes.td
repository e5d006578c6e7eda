//===- Passes.td - tcc passes ----------------------------*- tablegen -*-===//

#ifndef TCC_PASSES_PASSES_TD
#define TCC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def CheckImportContract : Pass<"tcc-check-import-contract", "ModuleOp"> {
  let summary = "Checks that a module is what the importer promises later stages";
  let description = [{
    The contract between the importer and the rest of the pipeline; it runs
    right after import (the `tcc` driver runs it) and can run on any
    hand-written module in tests. It holds when:

    - the module has exactly one `func.func` (the model) with a body;
    - every argument carries exactly one of `tcc.param = "<name>"` (a
      floating-point tensor) or `tcc.input = "<name>"`, and the names are
      unique across both; every result carries `tcc.output = "<name>"`;
    - every op in the body is a `tcc` op or the terminator, and every tensor
      has a static shape of at most 2^45 elements (256 TiB at 8 bytes each),
      so that no size or offset the planner computes overflows.

    It changes nothing. A module that breaks the contract gets one error per
    problem, on the offending op or function, and the pass fails:

    ```mlir
    // error: argument 0 of @main has neither tcc.param nor tcc.input
    func.func @main(%arg0: tensor<4xf32>) -> (tensor<4xf32> {tcc.output = "y"})
    ```
  }];
  let dependentDialects = ["::mlir::tcc::TccDialect", "::mlir::func::FuncDialect"];
}

def AppendLoss : Pass<"tcc-append-loss", "ModuleOp"> {
  let summary = "Appends a loss to a model that outputs predictions";
  let description = [{
    For a model whose output is logits or predictions, appends the loss the
    way ONNX Runtime's training artifacts do, adding the labels (or targets)
    as a new graph input:

    - `cross-entropy`: `output` is `[..., C]` logits; the new input `target`
      is `[...]` int64 class indices; the loss is the mean softmax cross
      entropy over all positions, ignoring label -100 (PyTorch's default).
    - `mse`: the new input `target` has `output`'s shape and type; the loss
      is `mean((output - target)^2)`.

    The loss becomes the first output, named "loss"; the original outputs
    stay. Before:

    ```mlir
    func.func @main(%w: ..., %x: ...) -> (tensor<8x4xf32> {tcc.output = "pred"})
    ```

    after `--tcc-append-loss="kind=mse output=pred target=y"`:

    ```mlir
    func.func @main(%w: ..., %x: ..., %y: tensor<8x4xf32> {tcc.input = "y"})
        -> (tensor<f32> {tcc.output = "loss"}, tensor<8x4xf32> {tcc.output = "pred"})
    ```

    Must run on a module that satisfies the import contract.
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"\"",
           "cross-entropy or mse">,
    Option<"output", "output", "std::string", /*default=*/"\"\"",
           "the model output the loss is computed from">,
    Option<"target", "target", "std::string", /*default=*/"\"\"",
           "the name of the new input holding labels or targets">,
  ];
  let dependentDialects = ["::mlir::tcc::TccDialect", "::mlir::func::FuncDialect"];
}

def BuildBackward : Pass<"tcc-build-backward", "ModuleOp"> {
  let summary = "Builds the training micro-step: forward plus reverse-mode gradients";
  let description = [{
    Turns the model function into `@micro_step`: the forward pass, then the
    gradient of the loss with respect to every trainable parameter, built
    in reverse from the loss (seeded with 1) by each op's gradient rule
    (`GradientOpInterface`). Contributions to a value used several times
    (a tied embedding) are summed.

    The loss is the model's one scalar floating-point output; it becomes
    result 0, the other outputs follow, then one result per trainable
    parameter carrying `tcc.grad = "<parameter>"`. A parameter that does not
    reach the loss gets a zero gradient and a warning. An op on a path from
    a parameter to the loss without a gradient rule is an error that names
    it. Before:

    ```mlir
    func.func @main(%w: tensor<4xf32> {tcc.param = "w"}, %x: tensor<4xf32> {tcc.input = "x"})
        -> (tensor<f32> {tcc.output = "loss"}) {
      %0 = tcc.mul %w, %x : ...
      %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : ...
      return %1 : tensor<f32>
    }
    ```

    after (before canonicalization):

    ```mlir
    func.func @micro_step(...) -> (tensor<f32> {tcc.output = "loss"}, tensor<4xf32> {tcc.grad = "w"}) {
      %0 = tcc.mul %w, %x
      %1 = tcc.reduce_sum %0 {keepdims = 0 : i64}
      %seed = tcc.constant {value = dense<1.0> : tensor<f32>}
      %g0 = tcc.reshape %seed {shape = array<i64: 1>}
      %g1 = tcc.expand %g0 {shape = array<i64: 4>}
      %gw = tcc.mul %g1, %x
      return %1, %gw
    }
    ```

    Must run on a module that satisfies the import contract (after
    `tcc-append-loss` where the model has no loss of its own).
  }];
  let dependentDialects = ["::mlir::tcc::TccDialect", "::mlir::func::FuncDialect"];
}

def Legalize : Pass<"tcc-legalize", "ModuleOp"> {
  let summary = "Lowers ONNX-level ops to tcc's core set and recognises fused patterns";
  let description = [{
    Rewrites the imported model towards the op set that autodiff, fusion and
    codegen share, one pattern family per file (`passes/legalize/`):

    - `Gemm` becomes `matmul` (with `transpose` for `transA`/`transB`), a
      `mul` by alpha and an `add` of beta * C;
    - the LayerNorm that `torch.onnx.export` decomposes before opset 17
      (ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add
      beta over trailing axes) becomes one `layer_normalization`;
    - the erf and tanh forms of GELU become one `gelu`.
    - `dropout` with a non-zero ratio in training mode becomes a
      `random_keep` mask (numbered in order as random streams, reading a
      random-state argument `tcc.rng` that the pass adds) and a `where` of
      the input scaled by 1/(1 - ratio).
    - the ONNX ops that usually fold at import (`passes/legalize/LowerOnnxOps.cpp`),
      where one is left on a value computed at run time: `less_or_equal` and
      `greater_or_equal` as `or` of a comparison and `equal`, `max`/`min` as
      a `where`, `pad` as slices and a `concat` with constant blocks, `trilu`
      as a `where` with a constant triangle, `is_nan` as `not(equal(x, x))`,
      and the `where(is_nan(softmax), 0, softmax)` guard of the exporters'
      attention dropped where no mask row is wholly non-finite. An op with
      the `ImportOnly` trait that is still there is an error that names it.

    A pattern applies only when every intermediate value is used inside the
    pattern alone, so nothing is computed twice. Before:

    ```mlir
    %y = tcc.gemm %x, %w, %b {transB = 1 : i64} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    ```

    after:

    ```mlir
    %t = tcc.transpose %w {perm = array<i64: 1, 0>} : (tensor<32x16xf32>) -> tensor<16x32xf32>
    %m = tcc.matmul %x, %t : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %y = tcc.add %m, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    ```

    Runs after import (and tcc-append-loss), before tcc-build-backward.
  }];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
}

def PlanMemory : Pass<"tcc-plan-memory", "ModuleOp"> {
  let summary = "Lays out every buffer of the step in one arena, reusing memory by lifetime";
  let description = [{
    Gives each buffer of the step function a byte offset in one arena:

    - persistent slots for the whole run: parameters (fp32 master weights),
      one gradient accumulator per trainable parameter, the optimizer state
      (`state-per-param` tensors each), inputs and outputs;
    - temporaries (every op result that is not a static constant), in the
      program's order: a value lives from its op to its last use (a value the
      function returns, to the end); two temporaries share memory only when
      their lifetimes are disjoint. Offsets are assigned largest first at the
      lowest aligned address free for the whole lifetime (best fit).

    Results: `tcc.offsets = array<i64: ...>` on every op (one per result, -1
    for a constant kept in the library's read-only data), and on the function
    `tcc.layout` with `arena_bytes`, the slots of `params`, `grads` (-1 for
    frozen parameters), `state`, `inputs` and `results`, and the bytes per
    category. With `budget` > 0, a plan that needs more is an error that says
    what occupies it. A constant or view is stored like any value for now
    (no aliasing). Before:

    ```mlir
    %0 = tcc.exp %x : (tensor<4xf32>) -> tensor<4xf32>
    %1 = tcc.exp %0 : (tensor<4xf32>) -> tensor<4xf32>
    %2 = tcc.exp %1 : (tensor<4xf32>) -> tensor<4xf32>
    ```

    after (%0 is dead when %2 is made, so they share):

    ```mlir
    %0 = tcc.exp %x {tcc.offsets = array<i64: 128>}
    %1 = tcc.exp %0 {tcc.offsets = array<i64: 192>}
    %2 = tcc.exp %1 {tcc.offsets = array<i64: 128>}
    ```

    Runs last, on the function the emitter will lower (after
    tcc-build-backward and cleanup).
  }];
  let options = [
    Option<"floatBytesOption", "float-bytes", "int64_t", /*default=*/"0",
           "bytes per floating-point element: 4 (f32), 8 (f64), or 2 for the CUDA target's mixed precision (fp16 activations and working weights, fp32 master weights, gradients, state, statistics and loss); 0 (the default): the module's #tcc.target says, 4 without one">,
    Option<"statePerParam", "state-per-param", "int64_t", /*default=*/"2",
           "optimizer state tensors per trainable parameter (AdamW 2, SGD 1)">,
    Option<"budget", "budget", "int64_t", /*default=*/"0",
           "the most bytes the arena may take (0: no limit)">,
    Option<"dataParallel", "data-parallel", "int64_t", /*default=*/"1",
           "ranks the optimizer state is sharded across (ZeRO-1; 1: not sharded). Each rank keeps the state of 1/N of the parameters (#tcc.shards), and the budget applies per rank">,
  ];
  let dependentDialects = ["::mlir::tcc::TccDialect", "::mlir::func::FuncDialect"];
}

def Remat : Pass<"tcc-remat", "ModuleOp"> {
  let summary = "Recomputes forward values in the backward pass until the step fits its budget";
  let description = [{
    When the memory plan of `@micro_step` exceeds `budget`, drops forward
    values that the backward pass keeps alive and recomputes them right
    before their first backward use: the op that made the value is cloned
    there (marked `tcc.remat`, which also keeps CSE from merging it back),
    and the backward uses read the clone.

    The cost model is apart from the transformation: a candidate is a
    saved forward value whose op can be recomputed (elementwise ops, views,
    softmax, normalization, GELU, dropout masks, whose random state is always
    live, and matmuls; never a gather or the loss),
    scored by bytes freed per recomputed FLOP. Candidates are tried cheap
    ops first and matmuls only after them, best score first; each is kept only if the replanned arena does not grow,
    else undone. The search stops when the plan fits or nothing helps; if it still
    does not fit, the segment schedules below are tried on the original step
    (sqrt(n) segments, then every layer) and the first that fits is taken.
    Every
    kept decision is recorded in `tcc.remat_decisions` on the function
    (value, op, bytes freed, FLOPs recomputed, arena after). Deterministic:
    the same module and budget give the same plan.

    A budget already met leaves the module alone. Runs before
    tcc-plan-memory, with the same `float-bytes` (by default, both take it
    from the module's `#tcc.target`) and `state-per-param`.

    Host memory (`offload`, CUDA target only). With `offload=auto` the
    pass also weighs keeping parameters' fp32 master weights and optimizer
    state in pinned host memory (updated on the host), and then their
    gradient accumulators, largest parameters first, against
    recomputation: it tries amounts of host state (none, and a quarter,
    half, three quarters and all of what the unrecomputed plan would need
    to fit), runs the search above on each, and keeps the feasible plan
    with the least estimated time (passes/tiers/TierCostModel.h: each op a
    roofline at the device's published rates, transfers at `pcie-gbps`,
    the host's work at `host-gbps`, no overlap counted, one micro-step per
    optimizer step). The choice is recorded in `tcc.tiers` (#tcc.tiers) on
    the function, which tcc-plan-memory reads. `optimizer` keeps every
    candidate's master weights and state on the host, `all` also every
    gradient accumulator; `none` (the default) keeps all on the device. The
    host memory used must fit `host-budget`.
  }];
  let options = [
    Option<"budget", "budget", "int64_t", /*default=*/"0",
           "the most bytes the arena may take (0: leave alone)">,
    Option<"floatBytesOption", "float-bytes", "int64_t", /*default=*/"0",
           "bytes per floating-point element: 4 (f32), 8 (f64), or 2 for the CUDA target's mixed precision (fp16 activations and working weights, fp32 master weights, gradients, state, statistics and loss); 0 (the default): the module's #tcc.target says, 4 without one">,
    Option<"statePerParam", "state-per-param", "int64_t", /*default=*/"2",
           "optimizer state tensors per trainable parameter">,
    Option<"dataParallel", "data-parallel", "int64_t", /*default=*/"1",
           "ranks the optimizer state is sharded across (as tcc-plan-memory's option)">,
    Option<"policy", "policy", "std::string", /*default=*/"\"greedy\"",
           "greedy (the search above, under `budget`), or a reference "
           "schedule applied whatever the budget: checkpoint-every-layer "
           "(keep each block's input, recompute the whole block before its "
           "backward) or checkpoint-sqrt (the same with segments of "
           "ceil(sqrt(layers)) blocks, Chen et al.); blocks are recognised "
           "by node names such as /h.3/...">,
    Option<"offload", "offload", "std::string", /*default=*/"\"none\"",
           "none, auto (host memory where it costs less than recomputation), "
           "optimizer or all (see the description)">,
    Option<"pcieGbps", "pcie-gbps", "double", /*default=*/"31.5",
           "host-device bandwidth per direction in GB/s (PCIe 4.0 x16)">,
    Option<"hostGbps", "host-gbps", "double", /*default=*/"30",
           "host memory bandwidth the host update reaches, in GB/s">,
    Option<"hostBudget", "host-budget", "int64_t", /*default=*/"-1",
           "bytes of host memory the plan may use (-1: what the machine has "
           "available, MemAvailable)">,
  ];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
}

def SwapActivations : Pass<"tcc-swap-activations", "ModuleOp"> {
  let summary = "Swaps saved activations to host memory instead of recomputing them (CUDA)";
  let description = [{
    Runs after tcc-remat on a CUDA step. For each forward value that
    tcc-remat recomputes for the backward pass (a `tcc.remat` clone whose
    result a backward op reads, traced back to the forward op it copies),
    the step can instead copy the value to pinned host memory and back:

        %h = tcc.swap_out %v swap 0     right after the op that makes %v
        tcc.swap_wait %v swap 0         2 ops later: %v's buffer lives to here
        %v2 = tcc.swap_in %h swap 0     2 ops before the first backward reader
        tcc.swap_wait %v2 swap 0        right before it

    The backward readers then read `%v2`, and the clones nothing reads any
    more are erased. The copies run on the host tier's copy streams
    (runtime: host_tier.cuh), so they overlap the kernels around them, as
    far as the two ops each has allow; the values are the forward
    pass's own bits, so the step computes exactly what the recomputing one
    does. tcc-plan-memory places each swapped value in the host buffer
    (`tcc.host_offset`). A clone that is not an exact copy of a forward op
    (a multi-output fusion's recomputed tail) stays a recomputation.

    `mode`: `none` leaves the step alone; `all` swaps every such value;
    `auto` swaps them all when the estimate says it pays: the copies'
    time at `pcie-gbps` (one direction each way; the plan's #tcc.tiers
    rate where it has host tiers, whose own traffic then shares the link),
    less what the forward and backward passes hide (their roofline times),
    against the recomputation's roofline time. The swapped plan must still fit
    `budget` (the copies keep each value a few ops longer) and its host
    buffer (host tiers included) `host-budget`: where swapping every
    candidate does not fit, auto swaps the most candidates, first ones
    first, that do (by bisection) if those pay by the same estimate, and
    none otherwise; `all` fails
    when the host buffer does not fit. The choice and
    its figures are recorded in `tcc.swaps` on the function.
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"none\"",
           "none, auto or all (see the description)">,
    Option<"budget", "budget", "int64_t", /*default=*/"0",
           "the most bytes the plan may take (0: no limit); auto keeps recomputation above it">,
    Option<"hostBudget", "host-budget", "int64_t", /*default=*/"-1",
           "bytes of host memory the plan may use, host tiers included (-1: what the machine "
           "has available, MemAvailable); auto keeps recomputation above it, all fails">,
    Option<"pcieGbps", "pcie-gbps", "double", /*default=*/"31.5",
           "host-device bandwidth per direction in GB/s (PCIe 4.0 x16)">,
    Option<"statePerParam", "state-per-param", "int64_t", /*default=*/"2",
           "optimizer state tensors per trainable parameter (as tcc-plan-memory's option)">,
    Option<"dataParallel", "data-parallel", "int64_t", /*default=*/"1",
           "ranks the optimizer state is sharded across (as tcc-plan-memory's option)">,
  ];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
}

def SetTarget : Pass<"tcc-set-target", "ModuleOp"> {
  let summary = "Records the compilation target on the module (#tcc.target)";
  let description = [{
    Sets `tcc.target = #tcc.target<...>` on the module: the first pass of
    `tcc-plan-pipeline`, so every pass and emitter after it reads the target
    from the IR (tcc-plan-memory's and tcc-remat's float bytes, the step
    emitter's CUDA or C++, the CUDA build's architecture). Fails on an
    unknown target or precision, a precision given for the CUDA target
    (whose storage is f16), or an architecture that is not a positive
    compute capability. A target already on the module is replaced.

    ```mlir
    // tcc-opt --tcc-set-target="target=cuda arch=90", before:
    module {...}
    // after:
    module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {...}
    ```

    Runs after tcc-build-backward's cleanup (the training pipeline does
    not depend on the target), before every pass of the plan pipeline.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cuda\"",
           "cuda (fp16 storage, fp32 master weights) or cpu">,
    Option<"arch", "arch", "int64_t", /*default=*/"90",
           "the CUDA target's compute capability (90: H100/H200)">,
    Option<"precision", "precision", "std::string", /*default=*/"\"\"",
           "the CPU target's float type: f32 (the default) or f64">,
  ];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
}

def MixedPrecision : Pass<"tcc-mixed-precision", "ModuleOp"> {
  let summary = "Makes the CUDA target's fp16 GEMMs and concatenations well-typed";
  let description = [{
    Under the CUDA target's mixed precision (tcc-plan-memory with
    `float-bytes=2`), values that `keepsF32` names (reduction results,
    statistics, the loss, scalars, and broadcasts or views of them) are
    stored in fp32 and everything else in fp16. A GEMM and the attention
    kernels read fp16 operands (the attention's log-sum-exp excepted) and a
    concatenation writes one storage type, so an fp32 operand of any of them
    gets an explicit `tcc.cast` to its own type, which is stored in fp16:

    ```mlir
    %p = tcc.reduce_mean %x {axes = array<i64: 1>} : (tensor<4x8x16xf32>) -> tensor<4x1x16xf32>
    %h = tcc.cast %p {to = f32} : (tensor<4x1x16xf32>) -> tensor<4x1x16xf32>
    %y = tcc.matmul %h, %w : ...
    ```

    Runs after tcc-set-target and before tcc-fuse (the cast may fuse with
    its producer's elementwise group).
  }];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
}

def PadGemms : Pass<"tcc-pad-gemms", "ModuleOp"> {
  let summary = "Pads the CUDA target's GEMM dimensions to multiples of 8";
  let description = [{
    cuBLASLt's fast fp16 kernels need the stored rows of A, B and C 16-byte
    aligned: a multiple of 8 elements. A GEMM of at least `min-gflops`
    GFLOPs whose K or N (or M, when A is read transposed) is not gets its
    operands padded with zeros (`tcc.slice_grad`) and its result sliced back
    (`tcc.slice`); K's zeros add nothing to the product. An operand that is a
    transpose of the last two dimensions is padded before the transpose, so
    that tcc-fuse still folds the transpose into the GEMM:

    ```mlir
    %wt = tcc.transpose %w {perm = array<i64: 1, 0>} : (tensor<50257x768xf32>) -> tensor<768x50257xf32>
    %y = tcc.matmul %x, %wt : (tensor<1024x768xf32>, tensor<768x50257xf32>) -> tensor<1024x50257xf32>
    ```
    becomes
    ```mlir
    %wp = tcc.slice_grad %w {shape = array<i64: 50264, 768>, starts = array<i64: 0>, ends = array<i64: 50257>, axes = array<i64: 0>} : ...
    %wt = tcc.transpose %wp {perm = array<i64: 1, 0>} : (tensor<50264x768xf32>) -> tensor<768x50264xf32>
    %yp = tcc.matmul %x, %wt : (tensor<1024x768xf32>, tensor<768x50264xf32>) -> tensor<1024x50264xf32>
    %y = tcc.slice %yp {starts = array<i64: 0, 0>, ends = array<i64: 1024, 50257>, axes = array<i64: 0, 1>} : ...
    ```

    A weight gradient padded along M or N is sliced before its fp32
    accumulation, so its product is rounded to fp16 first (as under
    PyTorch's autocast) instead of added into the accumulator in place.

    On an H200, GPT-2's output projection (vocabulary 50257) ran its three
    GEMMs per 1024-row loss chunk in 0.86, 0.59 and 0.60 ms, and padded to
    50304 in 0.14, 0.13 and 0.14 ms (bench/gpu/RESULTS.md). Runs after
    tcc-mixed-precision and before tcc-fuse, on the CUDA target only (tcc
    --gemm-padding); a CSE after it merges the copies of one padded value.
  }];
  let options = [
    Option<"minGflops", "min-gflops", "double", "1.0",
           "pad only GEMMs of at least this many GFLOPs (the copies cost "
           "memory traffic; 0 pads every misaligned GEMM)">,
  ];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
}

def FuseLoss : Pass<"tcc-fuse-loss", "ModuleOp"> {
  let summary = "Computes a cross-entropy loss and its gradient in one op";
  let description = [{
    After tcc-build-backward, a `tcc.softmax_cross_entropy_loss` on `[N, C]`
    scores (reduction "mean" or "sum") whose log-probabilities only its
    gradient op reads becomes one `tcc.softmax_cross_entropy_loss_with_grad`
    that takes the backward pass's seed: the log-probabilities (as large as
    the logits, and kept in fp32) are never stored, and the gradient is ready
    when the loss is. Before:

    ```mlir
    %loss, %logp = tcc.softmax_cross_entropy_loss %s, %l : ...
    %d = tcc.softmax_cross_entropy_loss_grad %seed, %logp, %l : ...
    ```

    after:

    ```mlir
    %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %s, %l, %seed : ...
    ```

    Runs before tcc-remat and tcc-plan-memory, which then plan without the
    log-probabilities.
  }];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
}

def FuseAttention : Pass<"tcc-fuse-attention", "ModuleOp"> {
  let summary = "Recognises scaled dot-product attention as one tcc.attention op";
  let description = [{
    Before the backward pass is built, rewrites the attention that
    `torch.onnx.export` writes for `softmax(q k^T * scale [masked]) v`:

    ```mlir
    %s = tcc.matmul %q, %kt            // [B, H, Sq, D] x [B, H, D, Sk]
    %t = tcc.mul %s, %c                // optional: a scalar constant (or tcc.div)
    %u = tcc.where %mask, %ninf, %t    // optional: the causal mask, -inf above the diagonal
    %p = tcc.softmax %u {axis = -1}
    %o = tcc.matmul %p, %v             // [B, H, Sq, Sk] x [B, H, Sk, Dv]
    ```

    into

    ```mlir
    %k = tcc.transpose %kt {perm = array<i64: 0, 1, 3, 2>}
    %o, %lse = tcc.attention %q, %k, %v {scale = c, causal = true}
    ```

    so that the backward pass gets one `tcc.attention_grad` that recomputes
    the probabilities from `%lse`, and neither the scores nor the
    probabilities (`B x H x Sq x Sk`) are stored: on the CUDA target the op is
    one kernel that works a tile of queries and keys at a time.

    Also recognised:
    - scales (Mul or Div by a scalar constant) anywhere between the product
      and the softmax, or on the queries or the transposed keys before it
      (nn.MultiheadAttention's `q / sqrt(d)`, Falcon's d^-1/4 on both);
    - additive biases (BERT's padding mask `(1 - mask) * -10000`,
      `[B, 1, 1, Sk]`, BLOOM's ALiBi `[B*H, 1, Sk]`, any term that
      broadcasts to the scores with one value per key), before or after the
      scales (a bias is multiplied by the scales after it) when no trainable
      parameter reaches it (it gets no gradient); several are summed into
      the op's `bias`;
    - fixed masks, constants whose `[Sq, Sk]` matrices are all the same:
      `where(c, scores, fill)` (Hugging Face's GPT-2), `scores + m` with `m`
      0 where kept (nn.MultiheadAttention's `attn_mask`) and Keras' masked
      softmax `scores * k + m` (`k` 0 or 1, `m` 0 where `k` is 1), each with
      a fill that is at most -1e4 once the scales after it apply (so the
      hidden probabilities are 0). A mask that keeps exactly the keys up to
      each query is the `causal` flag (a second one changes nothing); any
      other (GPT-Neo's local windows) is a bias of 0 where kept and -3e4
      elsewhere, if every query keeps a key (a row that hides every key is a
      uniform softmax, which a bias cannot give); an additive one that is
      not causal is a bias as it is;
    - views between the product, the softmax and the product with the
      values: reshapes, squeezes and unsqueezes that keep the scores'
      `[.., Sq, Sk]` (BLOOM's `[B*H, Sq, Sk]` and `[B, H, Sq, Sk]`, the
      `[B, H, Sq, Sk, 1]` of tf2onnx's einsums), and casts between float
      types (the mixed_float16 softmax in float32): the op works in the
      softmax's `[B, H]` (`[1, B*H]` for `[B*H, S, D]` operands) and reads
      the operands as views of it;
    - a key and value broadcast over the query heads (multi-query
      attention), expanded to every head;
    - dropout on the probabilities in tcc-legalize's form,
      `where(random_keep, probs * 1/(1 - p), 0)`, which becomes the op's
      `dropout`, `dropout_stream` and `rng` (the op draws the mask the
      random_keep draws, element by element, so a mask with other readers
      stays as well).

    Applies only where every intermediate value has that one reader, the
    total scale is positive, q, k, v and the result have one float type,
    and both head sizes are at most `max-head-size`. Anything else (a bias
    that a parameter reaches, such as a learned position bias or
    DeBERTa's relative terms; a mask computed from an input that may hide
    every key of a query; returned attention weights; a soft cap
    `c * tanh(s / c)`) is left as it is.

    Then the layout: where query, key and value are `[B, S, H*D]` tensors
    (the projections' outputs) seen as `[B, H, S, D]` through a reshape to
    `[B, S, H, D]` and transposes that amount to `(0, 2, 1, 3)`, the op reads
    those tensors directly (token-major, `heads = H`) and its result is the
    `[B, S, H*Dv]` that the output projection reads; and where the three are
    the thirds of one split of a fused projection (GPT-2's `c_attn`), the op
    reads the projection's output with each operand's `columns` (packed), so
    the split copy disappears as well, and in the backward pass
    `tcc.attention_grad` writes that output's gradient in one piece. The
    head transposes and their gradients are then neither copied nor stored.
  }];
  let options = [
    Option<"maxHeadSize", "max-head-size", "int64_t", /*default=*/"128",
           "the largest query/key and value head size to fuse">,
  ];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
}

def ChunkLoss : Pass<"tcc-chunk-loss", "ModuleOp"> {
  let summary = "Computes the output projection, the loss and their gradients a chunk of rows at a time";
  let description = [{
    After tcc-fuse-loss, a language model's logits are the largest value of
    the step (GPT-2 small: 8192 tokens x 50257 classes, 0.77 GiB in fp16, and
    the gradient written over them): they live from the output projection to
    its two backward GEMMs. This pass computes them a chunk of rows (tokens)
    at a time, so that only one chunk's logits are ever live:

    ```mlir
    %logits = tcc.matmul %x, %w                     // [N, D] x [D, V]
    %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %logits, %labels, %seed
    %dx = tcc.matmul %d, %u                         // [N, V] x [V, E]
    %dw = tcc.matmul %xT, %d                        // [E, N] x [N, V]
    ```

    becomes, for each chunk k of rows r0..r1, a slice of `%x` and of the
    labels, its logits, `tcc.softmax_cross_entropy_loss_with_grad` with
    reduction "sum" and seed `%seed / count` (mean: the labels that are not
    `ignore_index`, counted once over all rows), its rows of `%dx`, and its
    term of `%dw`; then `%dx` is the concatenation of the chunks' rows, `%dw`
    the sum of their terms, and the loss the sum of theirs (divided by the
    count for "mean"). Views (reshapes that keep the class dimension) may
    sit between the ops; a transpose of `%dw` is folded by computing the
    terms transposed. A bias added to the product (`[V]`, nn.Linear's) is
    added to each chunk's, and its gradient (the gradient summed over all
    but the class dimension) is the sum of the chunks' row sums.

    Applies to a loss of reduction "mean" or "sum" without class weights
    whose scores are a GEMM with an unbatched second operand read by nothing
    else, and whose gradient is read only by GEMMs of the two kinds above
    (their other operands made before the loss, or, for `%u`, the transpose
    of such a value, which an untied head's backward pass makes after it:
    the chunks make it once, before them).
    Anything else is left alone. Chunks have `chunk-rows` rows (the last
    fewer), or with `chunk-rows=0` as few as keep each chunk's scores at
    most `max-chunk-elements` elements, rounded up to a multiple of 8 rows;
    scores that small already stay whole.
  }];
  let options = [
    Option<"chunkRows", "chunk-rows", "int64_t", /*default=*/"0",
           "rows per chunk (0: from max-chunk-elements)">,
    Option<"maxChunkElements", "max-chunk-elements", "int64_t",
           /*default=*/"(int64_t(1) << 26)",
           "with chunk-rows=0, the most score elements a chunk may hold">,
  ];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
}

def SplitGradientSums : Pass<"tcc-split-gradient-sums", "ModuleOp"> {
  let summary = "Returns a parameter's gradient that is a sum as one result per term";
  let description = [{
    A gradient that is a sum of terms (the uses of a tied weight, the chunks
    of tcc-chunk-loss) becomes one result per term of `@micro_step`, all with
    the parameter's `tcc.grad` name. The step adds each result into the
    parameter's fp32 accumulator right after the op that makes it, so a term
    is not kept alive until the last one is ready, and the sum is formed in
    fp32 rather than in the working precision. Before:

    ```mlir
    %g = tcc.add %a, %b : ...
    return %loss, %g : tensor<f32>, tensor<4x8xf32>  // {tcc.grad = "w"}
    ```

    after:

    ```mlir
    return %loss, %a, %b : ...  // both {tcc.grad = "w"}
    ```

    Only adds of two operands of the result's type whose result nothing
    else reads are split (recursively: a chain of adds gives all its terms).
  }];
  let dependentDialects = ["::mlir::tcc::TccDialect", "::mlir::func::FuncDialect"];
}

def Fuse : Pass<"tcc-fuse", "ModuleOp"> {
  let summary = "Fuses elementwise ops, reductions and GEMM prologues/epilogues into tcc.fusion kernels";
  let description = [{
    Groups elementwise ops of one loop shape (broadcast operands fuse for
    free) that feed one another into a `tcc.fusion` region, which a code
    generator emits as one loop nest with no intermediate buffers; values
    used outside the group become the fusion's results. Groups that an op
    reads merge, and an op that shares a full-size input with a group joins
    it as a sibling (`passes/fusion/LoopGroups.h` states the rules that keep
    the result acyclic). With `reductions`, producers fuse into the
    reductions that read them, and a reduction over the last axis keeps its
    group open for the ops that read its per-row result (softmax, LayerNorm
    and their backward passes). A transpose of the last two dimensions read
    by a matmul, and a transpose of a matmul's result, fold into the GEMM;
    with `gemm-epilogues`, the elementwise chain after a GEMM joins it.

    The profitability model (`passes/fusion/FusionCostModel.h`) is apart
    from the transformation and returns a decision with a reason for every
    op it is asked about; the decisions are recorded on the function
    (`tcc.fusion_decisions`) with the op and kernel counts, and the driver's
    `--fusion-report` writes them as JSON. A group is placed where its last
    op was, and no op outside it reads its values before that, so fusion
    never creates a cycle; it never duplicates a matmul. Before:

    ```mlir
    %0 = tcc.mul %a, %b : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %1 = tcc.tanh %0 : (tensor<64xf32>) -> tensor<64xf32>
    ```

    after:

    ```mlir
    %1 = tcc.fusion loop(%a, %b) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32> {
    ^bb0(%x: tensor<64xf32>, %y: tensor<64xf32>):
      %0 = tcc.mul %x, %y : ...
      %2 = tcc.tanh %0 : ...
      tcc.yield %2 : tensor<64xf32>
    }
    ```

    Runs after tcc-build-backward, before tcc-remat and tcc-plan-memory
    (which plan and recompute whole fused kernels).
  }];
  let options = [
    Option<"maxOps", "max-ops", "int64_t", /*default=*/"64",
           "the most ops one fusion may hold (kernel size limit)">,
    Option<"gemmEpilogues", "gemm-epilogues", "bool", /*default=*/"true",
           "fuse the chain of elementwise ops that consumes a GEMM's result "
           "(bias, residual, activation) into the GEMM (CPU target)">,
    Option<"cublasLtEpilogues", "cublaslt-epilogues", "bool", /*default=*/"false",
           "with gemm-epilogues, only the epilogues cuBLASLt runs (CUDA "
           "target): a bias over a GEMM with an unbatched second operand, then "
           "a tanh GELU (its input kept as the auxiliary output when it is "
           "read elsewhere) or a residual add">,
    Option<"moves", "data-movement", "bool", /*default=*/"true",
           "fuse a split with the views and transposes of its parts, and a "
           "concat with those of its operands, into one copy loop (CPU target)">,
    Option<"reductions", "reductions", "bool", /*default=*/"true",
           "fuse elementwise producers into the reduce_sum / reduce_mean that "
           "consumes them (input fusion; the CPU target emits one loop nest)">,
    Option<"rowReductionsOnly", "row-reductions-only", "bool", /*default=*/"false",
           "with reductions, fuse only reductions over the last axis (row "
           "statistics, one warp or block per row on the CUDA target); other "
           "reductions stay separate kernels">,
  ];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
}

def LowerToKernels : Pass<"tcc-lower-to-kernels", "ModuleOp"> {
  let summary = "Lowers the planned step to the kernel-level dialect (tcck)";
  let description = [{
    Stage 6 of the pipeline: after tcc-plan-memory, every op of the step
    becomes the kernel it runs, over views of the arena (`tcck.view` at the
    value's planned offset, typed with its storage type), with a
    DialectConversion pattern set per op family:

    - constants: `tcck.global` (read-only data) or a view and `tcck.fill`;
    - views (reshape, squeeze, unsqueeze, identity): `tcck.alias`;
    - unfused elementwise ops: `tcck.ew`;
    - library ops (softmax, LayerNorm, reductions, gathers, slices, the
      loss, attention, ...): `tcck.call` with their options resolved
      (normalized axes, reduction masks, slice starts and steps);
    - GEMMs: `tcck.matmul`, with its epilogue as a region;
    - fusions: `tcck.loop` with the loop structure recorded (tcck.role and
      tcck.stage on each body op), `tcck.copy_loop` for moves.

    What the emitter used to work out is explicit: each gradient's
    `tcck.accumulate` right after the kernel that makes it (or at the end),
    the outputs' `tcck.store`, the seed, the random state's advance, and a
    `tcck.mark` per entry of the step's op table with its label and live
    bytes.

    Before converting, a contract check reports every op the module's
    target cannot lower, on the op.

    On the cuda target each buffer's element type is its storage type:
    fp16, or fp32 for what keepsF32 names and for the masters of
    arguments without an fp16 working copy. A weight's or a bias's
    gradient that its GEMM or reduce adds straight into the fp32
    accumulator (accumulatedInPlace) is a `tcck.matmul {accumulate}` or a
    reduce with `accumulate`, into a view of the accumulator. Gradients
    whose accumulators are in host memory (#tcc.tiers) are
    `tcck.host_accumulate` copies, numbered in queue order, each waited for
    (`tcck.wait_host_copy`) two ops later; each device accumulator is handed
    to the all-reduce (`tcck.grad_ready`) after its last write.
  }];
  let dependentDialects = ["::mlir::tcck::TcckDialect", "::mlir::tcc::TccDialect",
                           "::mlir::func::FuncDialect"];
}

#endif // TCC_PASSES_PASSES_TD
