//===- tcc-run.cpp - the thin runtime CLI for a compiled step -------------===//
//
//   tcc-run STEP.so (--feed DIR | --data FILE) [--steps N] [--accum K] ...
//   tcc-run STEP.so --feed DIR --grads-only [--dump OUT]
//
// Loads a training step compiled by tcc (see runtime/tcc_step.h) and trains
// it: each optimizer step runs K micro-steps (forward and backward, each on
// its own micro-batch, gradients scaled by 1/K and accumulated) and then the
// step's optimizer (tcc_step_apply) with the learning rate of the schedule,
// exactly like PyTorch's
//
//   for step: for micro in range(K): (loss / K).backward()
//             clip_grad_norm_; opt.step(); opt.zero_grad()
//
// Micro-batches come from .npy feeds or a token stream and are prepared by a
// background thread (runtime/train_data.h); checkpoints (runtime/checkpoint.h)
// let a killed run resume bit for bit. With --grads-only it runs one
// micro-step and dumps the loss, outputs and gradients instead.
//
// Deliberately thin: the C++ standard library, POSIX, libdl and pthreads
// only, built with -fno-exceptions. Every error is a message on stderr that
// starts with "tcc-run: error: " and exit code 1; no partial file is ever
// left behind.
//
//===----------------------------------------------------------------------===//

#include "runtime/data_parallel.h"
#include "runtime/lib/options.h"
#include "runtime/lib/report.h"
#include "runtime/lib/resume_flags.h"
#include "runtime/lib/step_library.h"
#include "runtime/lib/text.h"
#include "runtime/lib/trainer.h"
#include "runtime/loss_scale.h"
#include "runtime/tcc_step.h"

#include <algorithm>
#include <sched.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define TCC_RUN_VERSION "0.3.0"
#define TCC_STR2(x) #x
#define TCC_STR(x) TCC_STR2(x)

namespace {

using namespace tcc::run;

/// The processes training together (world size 1 without a launcher).
tcc::dp::World gWorld;
/// Whether the device step sums its gradients with NCCL: across the ranks
/// of a world, or in a world of one process with TCC_NCCL=1 (a check of
/// the NCCL path on one GPU; the sums are then the step's own).
bool gNccl = false;

const char *const kUsage =
    "usage: tcc-run STEP.so (--feed DIR | --data FILE) [training options]\n"
    "       tcc-run STEP.so --feed DIR --grads-only [--dump OUT]\n"
    "\n"
    "Trains a step compiled by tcc (`tcc model.onnx -o step.so`). Each\n"
    "optimizer step runs --accum micro-steps, each on its own micro-batch\n"
    "(forward, and backward with gradients scaled by 1/accum and added up),\n"
    "then the step's optimizer (AdamW or SGD, chosen at compile time), like\n"
    "PyTorch's `for micro in range(K): (loss / K).backward()`, then\n"
    "`clip_grad_norm_`, `opt.step()`, `opt.zero_grad()`.\n"
    "\n"
    "A step compiled with --target=cuda keeps its arena in GPU memory (opened\n"
    "through the step itself: tcc-run does not link CUDA) and needs an NVIDIA\n"
    "GPU with a driver; tcc-run copies the inputs in and the loss, parameters,\n"
    "optimizer state and gradients out where it needs them.\n"
    "\n"
    "data (one of):\n"
    "  --feed DIR     .npy batches: DIR/<input>.npy for each step input ('/'\n"
    "                 in a name becomes '_'; dtype and shape must match the\n"
    "                 step's) is one batch that every micro-step uses; or DIR's\n"
    "                 subfolders, each holding one micro-batch of <input>.npy\n"
    "                 files, taken in name order, cycling\n"
    "  --data FILE    a token stream: .bin (little-endian uint16, as nanoGPT\n"
    "                 writes) or a 1-D integer .npy. A micro-batch is B\n"
    "                 windows; the step's integer inputs [B, T] are filled by\n"
    "                 the roles its model recorded (python/tcc_export.py, or\n"
    "                 tcc --loss): ids = data[i:i+T]; labels = the next tokens\n"
    "                 data[i+1:i+T+1] for a loss that reads them aligned\n"
    "                 (nanoGPT), or the ids for a model that shifts them itself\n"
    "                 (Hugging Face causal LMs); an attention mask = ones. A\n"
    "                 step without that record has tokens then labels and\n"
    "                 needs --labels\n"
    "  --labels shifted|aligned\n"
    "                 (--data) how the loss reads its labels, for a step that\n"
    "                 does not record it: aligned (label t is the target of\n"
    "                 position t, so labels are the next tokens) or shifted\n"
    "                 (the model compares position t with label t + 1, so\n"
    "                 labels are the ids); over a recorded one, a warning\n"
    "  --data-order random|sequential\n"
    "                 (--data) random (default): each i uniform in\n"
    "                 [0, len-T), from a seeded PRNG (SplitMix64);\n"
    "                 sequential: consecutive windows i = 0, T, 2T, ...,\n"
    "                 wrapping around\n"
    "  --seed N       the seed of the data order (--data random) and of the\n"
    "                 model's dropout masks (default 0); a resumed run continues\n"
    "                 both from the checkpoint\n"
    "  --threads N    (CPU steps) the threads the step's GEMMs use (default:\n"
    "                 every core this process may run on; under mpirun, each\n"
    "                 rank's own)\n"
    "  --no-prefetch  prepare each micro-batch when it is needed instead of on\n"
    "                 a background thread (the batches are the same)\n"
    "  --no-cuda-graphs\n"
    "                 (--target=cuda steps) launch the micro-step's kernels\n"
    "                 one by one (TCC_CUDA_GRAPHS=0); by default the step\n"
    "                 captures the micro-step as a CUDA graph on its second\n"
    "                 run and replays it after, and a capture that fails\n"
    "                 falls back to launching the kernels one by one, with a\n"
    "                 note (--cuda-graphs asks for graphs even with\n"
    "                 TCC_CUDA_PROFILE=1, which otherwise turns them off)\n"
    "\n"
    "training:\n"
    "  --steps N      optimizer steps in all (default 1); with --resume, the\n"
    "                 total including the steps already done\n"
    "  --max-steps N  stop this run once N optimizer steps in all are done\n"
    "                 (checkpoint and --save as at the end); --steps stays the\n"
    "                 end of training and the learning rate schedule's horizon\n"
  "  --accum K      micro-steps (gradient accumulation) per optimizer step\n"
    "                 (default 1)\n"
    "  --lr X         peak learning rate (default 1e-3)\n"
    "  --warmup N     linear warmup steps (default 0)\n"
    "  --lr-schedule constant|cosine\n"
    "                 with it the 0-based optimizer step (default constant):\n"
    "                   it < warmup:  lr * (it + 1) / warmup\n"
    "                   constant:     lr\n"
    "                   cosine:       min_lr + 0.5 * (1 + cos(pi * r)) *\n"
    "                                 (lr - min_lr), r = (it - warmup) /\n"
    "                                 (steps - warmup) (0 if steps == warmup);\n"
    "                                 min_lr if it > steps (nanoGPT's get_lr)\n"
    "  --min-lr X     the cosine schedule's final learning rate (default 0;\n"
    "                 the constant schedule ignores it)\n"
    "  --beta1 X      AdamW's beta1 (default 0.9)\n"
    "  --beta2 X      AdamW's beta2 (default 0.999)\n"
    "  --eps X        AdamW's eps (default 1e-8)\n"
    "  --weight-decay X\n"
    "                 AdamW: decoupled weight decay (default 0.01); SGD: L2\n"
    "                 added to the gradient (default 0) - PyTorch's defaults\n"
    "  --no-decay GLOB[,GLOB...]\n"
    "                 no weight decay for parameters whose name matches one of\n"
    "                 the globs (fnmatch: *, ?, [...]); repeatable\n"
    "  --momentum X   SGD's momentum (default 0)\n"
    "  --nesterov     SGD's Nesterov momentum (needs --momentum > 0)\n"
    "  --clip-norm X  clip the global gradient norm to X (default 0: off);\n"
    "                 a step whose gradient norm is not finite is skipped\n"
    "                 (no update) with a warning (with dynamic loss scaling:\n"
    "                 counted, see --loss-scale)\n"
    "  --loss-scale dynamic|off|X\n"
    "                 loss scaling, as torch.cuda.amp.GradScaler: each\n"
    "                 micro-step backpropagates loss * scale / accum and the\n"
    "                 optimizer divides the scale out before the norm,\n"
    "                 clipping and update (grad_norm is unscaled).\n"
    "                 dynamic (the default for --target=cuda steps): scale\n"
    "                 65536, halved on every step whose gradients are not\n"
    "                 finite (the step is skipped: no update, and the\n"
    "                 optimizer's step count, which AdamW's bias correction\n"
    "                 uses, does not advance; the learning rate schedule still\n"
    "                 counts it), doubled after 2000 clean steps in a row;\n"
    "                 skipped steps are counted in the progress line, not\n"
    "                 warned about. X: a static scale (skipped steps warn and\n"
    "                 do not advance the optimizer's step count). off (the\n"
    "                 default for --target=cpu steps): no scaling; a skipped\n"
    "                 step warns and still advances the step count. The\n"
    "                 scaler's state is checkpointed\n"
    "\n"
    "output:\n"
    "  --print-every N\n"
    "                 a progress line on stderr every N steps (default 1):\n"
    "                 step, mean micro-step loss, lr, tokens/s, with loss\n"
    "                 scaling the scale for the next step and the steps\n"
    "                 skipped so far (once there are any), elapsed, eta\n"
    "  --quiet        no progress lines\n"
    "  --metrics FILE.jsonl\n"
    "                 one JSON object per optimizer step: {\"step\", \"loss\"\n"
    "                 (mean over its micro-steps), \"lr\", \"grad_norm\" (before\n"
    "                 clipping; null if not finite), \"tokens\" (since the start\n"
    "                 of training, resumed steps included), \"elapsed_s\" (in\n"
    "                 this process), \"skipped\" (true if the update was\n"
    "                 skipped)}, with loss scaling also \"loss_scale\" (the\n"
    "                 scale this step used) and \"skipped_total\" (steps\n"
    "                 skipped so far, resumed ones included), \"tokens_per_s\"\n"
    "                 (tokens this process trained on per second), for a\n"
    "                 --target=cuda step \"device_peak_bytes\" (the device\n"
    "                 memory peak so far); appended to when resuming (steps\n"
    "                 redone after a kill then appear twice)\n"
    "  --trace FILE.json\n"
    "                 record the first --trace-steps optimizer steps as a\n"
    "                 timeline in the Chrome trace format, for Perfetto\n"
    "                 (ui.perfetto.dev) or chrome://tracing: each op of the\n"
    "                 micro-step (kernels and GEMMs, named by the step's op\n"
    "                 table: the kernel, the fused tcc ops, the ONNX nodes),\n"
    "                 input staging, the data reader thread, the optimizer\n"
    "                 update and checkpoint writes, with counters for the\n"
    "                 plan's live arena bytes and the loss scale. A CUDA step's\n"
    "                 ops are timed with events on its stream, without CUDA\n"
    "                 graphs while traced. Written atomically once the traced\n"
    "                 steps are done. Tracing changes no result\n"
    "  --trace-steps N\n"
    "                 how many optimizer steps --trace records (default 2)\n"
    "  --check-numerics\n"
    "                 look at every op's results after it runs, in every\n"
    "                 micro-step (as TensorFlow's enable_check_numerics and\n"
    "                 PyTorch's anomaly mode): the first op that makes a NaN\n"
    "                 stops the run with an error naming it (the kernel, the\n"
    "                 tcc ops, the ONNX nodes), the type each of its results\n"
    "                 and operands is stored in, their ranges, and the first\n"
    "                 op of the step that made an infinity from finite\n"
    "                 operands (where an fp16 overflow starts; an infinity\n"
    "                 alone does not stop, as a mask's -inf is meant); a loss\n"
    "                 that is not finite stops it too. With a dynamic loss\n"
    "                 scale (the CUDA default), whose scale makes NaNs in the\n"
    "                 backward pass while it is too large, a NaN does not stop\n"
    "                 the run: each skipped step warns, naming the first\n"
    "                 infinity and the first NaN; without one, a skipped step\n"
    "                 stops it. Slow: a CUDA step waits for the GPU and copies\n"
    "                 each op's results to the host\n"
    "  --tensorboard DIR\n"
    "                 also write the metrics as TensorBoard scalars, to a new\n"
    "                 event file DIR/events.out.tfevents.* (tensorboard\n"
    "                 --logdir DIR): train/loss, train/lr, train/grad_norm,\n"
    "                 train/tokens_per_s, train/skipped, and with loss scaling\n"
    "                 train/loss_scale; the same values as --metrics\n"
    "  --val-data FILE\n"
    "                 validation tokens (as --data reads them), evaluated by\n"
    "                 the evaluation step that tcc --with-eval builds into\n"
    "                 step.so (forward and loss, dropout off, no gradients)\n"
    "                 on the trained parameters: at the end, and every\n"
    "                 --eval-every N optimizer steps; its mean loss and\n"
    "                 perplexity go to the progress line, the summary,\n"
    "                 --metrics (val_loss, val_ppl) and --tensorboard\n"
    "                 (val/loss, val/perplexity)\n"
    "  --eval-batches K\n"
    "                 evaluate on the first K micro-batches of consecutive\n"
    "                 windows of --val-data, the same each time (default:\n"
    "                 every whole batch the file holds, at most 100)\n"
    "  --eval-only    evaluate without training: the initial weights,\n"
    "                 --init-weights', or --resume DIR's checkpoint's\n"
    "  --dump OUT     after training, write OUT/losses.npy (float32, every\n"
    "                 micro-step's loss in this process, in order) and\n"
    "                 OUT/params/<name>.npy (the final parameters); each file\n"
    "                 written atomically\n"
    "  --save OUT.onnx\n"
    "                 after training, write the model with its parameters'\n"
    "                 initializers replaced by the trained values (past\n"
    "                 protobuf's 2 GiB, their data in OUT.onnx.data beside it)\n"
    "  --model PATH   the ONNX model --save starts from (default: the one the\n"
    "                 step was compiled from): an inference export of the same\n"
    "                 model (python/tcc_export.py export_inference), which must\n"
    "                 hold every parameter the step trains, under its name;\n"
    "                 one it declares trainable that the step does not train\n"
    "                 is refused (docs/exporting.md)\n"
    "  --checkpoint DIR\n"
    "                 write DIR/checkpoint.bin (parameters, optimizer state,\n"
    "                 step counts, data position, PRNG state and loss scaler\n"
    "                 state) at the end,\n"
    "                 and every --checkpoint-every N steps; written atomically,\n"
    "                 so a kill at any moment leaves the previous one whole\n"
    "  --checkpoint-every N\n"
    "                 checkpoint after every N-th optimizer step\n"
    "  --keep-checkpoints N\n"
    "                 also keep the newest N checkpoints as DIR/step-S/\n"
    "                 folders (hard links, no bytes copied), each one a\n"
    "                 --resume folder; older ones are removed (default 1:\n"
    "                 only DIR/checkpoint.bin, the newest)\n"
    "  --resume DIR   continue from DIR/checkpoint.bin up to --steps in all;\n"
    "                 the run continues exactly as if never interrupted. The\n"
    "                 checkpoint remembers the training flags (DIR/training-\n"
    "                 flags: --steps, --accum, the schedule, the optimizer's\n"
    "                 hyperparameters, clipping, --loss-scale, --data-order,\n"
    "                 --labels); each one not given again is taken from it, and\n"
    "                 one given again overrides it, with a line saying so\n"
    "  --init-weights FILE\n"
    "                 start from these parameter values: one raw fp32 blob in\n"
    "                 the step's parameter order (tcc's weights.bin); needed\n"
    "                 by a step compiled with tcc --no-weights (or --init)\n"
    "  --init normal[:STD]\n"
    "                 start a step compiled with tcc --no-weights from drawn\n"
    "                 values, seeded by --seed: matrices N(0, STD^2) (STD\n"
    "                 default 0.02, Hugging Face's initializer_range), a\n"
    "                 norm's scale (a vector named *.weight, *.scale, *.gamma)\n"
    "                 1, other vectors (biases) 0\n"
    "\n"
    "gradients only:\n"
    "  --grads-only   run one micro-step (forward and backward) without an\n"
    "                 optimizer step; needs --feed DIR with DIR/<input>.npy;\n"
    "                 takes no training options but --loss-scale, --seed\n"
    "                 (the dropout masks: micro-step 0's of that seed) and\n"
    "                 --check-numerics: the backward pass runs with that loss\n"
    "                 scale (default: dynamic for --target=cuda steps,\n"
    "                 starting at 65536 and halved while the gradients are not\n"
    "                 finite; off for CPU steps) and the gradients are divided\n"
    "                 by it\n"
    "  --dump OUT     (with --grads-only) write OUT/loss.npy,\n"
    "                 OUT/outputs/<name>.npy and OUT/grads/<param>.npy (each\n"
    "                 file written atomically)\n"
    "\n"
    "data parallelism:\n"
    "  mpirun -np N tcc-run step.so ... (or srun) trains on N ranks. Each\n"
    "                 takes its share of every optimizer step's N x --accum\n"
    "                 micro-batches (those one process with --accum N*K\n"
    "                 takes), the gradients are summed across the ranks once\n"
    "                 per optimizer step, and every rank makes the same update\n"
    "                 and skip decision; rank 0 prints and writes the outputs,\n"
    "                 every rank takes part in checkpoints. CPU steps sum over\n"
    "                 MPI. CUDA steps sum with NCCL (libnccl.so.2, or\n"
    "                 TCC_NCCL_LIB), in buckets of TCC_DP_BUCKET_MB MiB\n"
    "                 (default 25) while the last micro-step's backward pass\n"
    "                 runs, each rank on the GPU of its local rank.\n"
    "                 TCC_COMM_TIMEOUT=S (default 600): a collective that\n"
    "                 waits longer ends every rank with an error naming it.\n"
    "                 TCC_NCCL=1 runs a CUDA step's NCCL path in a world of\n"
    "                 one process (a check of NCCL on one GPU)\n"
    "  Without MPI, torchrun's variables start a world of CUDA steps:\n"
    "                 RANK, WORLD_SIZE, LOCAL_RANK (default RANK), MASTER_ADDR\n"
    "                 (default 127.0.0.1) and MASTER_PORT: rank 0 listens\n"
    "                 on that address only, at MASTER_PORT (MASTER_PORT+1\n"
    "                 under torchrun, whose store holds MASTER_PORT;\n"
    "                 TCC_MASTER_PORT overrides both). The ranks meet there\n"
    "                 and get the NCCL id; everything after goes over NCCL\n"
    "                 (e.g. torchrun --nproc-per-node=8 --no-python tcc-run\n"
    "                 step.so ...). A process whose TCC_WORLD_TOKEN (else\n"
    "                 TORCHELASTIC_RUN_ID) differs from rank 0's is not of\n"
    "                 this launch: it is dropped, and cannot take a rank\n"
    "\n"
    "  --help         show this help and exit\n"
    "  --version      show the version and exit\n"
    "\n"
    "Flags take their value as `--flag VALUE` or `--flag=VALUE`. Training\n"
    "prints `trained N steps: loss first X -> last Y, T s, Z tok/s` on stdout\n"
    "at the end (with loss scaling followed by `, loss scale S (K of N steps\n"
    "skipped)`). With --grads-only it prints `loss <value>` (with a backward\n"
    "pass; then `loss scale S ...` if S is not 1) and one\n"
    "`output <name> <dtype> [dims]` line per output. A\n"
    "--target=cuda step then adds `device peak P GiB (arena A GiB, budget B\n"
    "GiB, device D GiB)`, the measured device memory, with a warning if it\n"
    "exceeds the budget the step was compiled for (and, for a step built\n"
    "with tcc --offload, `; pinned host buffer H`).\n"
    "Errors exit with code 1 and a `tcc-run: error: ` message, before\n"
    "training where the problem can be known then.\n";

/// The flags that take a value, with the metavariable the usage shows.
struct ValueFlag {
  const char *flag, *meta;
};
const ValueFlag kValueFlags[] = {
    {"--data", "FILE"},          {"--steps", "N"},
    {"--max-steps", "N"},
    {"--accum", "K"},            {"--lr", "X"},
    {"--beta1", "X"},            {"--beta2", "X"},
    {"--eps", "X"},              {"--weight-decay", "X"},
    {"--momentum", "X"},         {"--clip-norm", "X"},
    {"--no-decay", "GLOB[,GLOB...]"},
    {"--warmup", "N"},           {"--lr-schedule", "constant|cosine"},
    {"--min-lr", "X"},           {"--seed", "N"},
    {"--threads", "N"},
    {"--data-order", "random|sequential"},
    {"--labels", "shifted|aligned"},
    {"--metrics", "FILE.jsonl"}, {"--checkpoint", "DIR"},
    {"--checkpoint-every", "N"}, {"--keep-checkpoints", "N"}, {"--resume", "DIR"},
    {"--save", "OUT.onnx"},      {"--model", "PATH"},
    {"--print-every", "N"},      {"--loss-scale", "dynamic|off|X"},
    {"--init-weights", "FILE"},  {"--init", "normal[:STD]"},
    {"--trace", "FILE.json"},    {"--trace-steps", "N"},
    {"--tensorboard", "DIR"},
    {"--val-data", "FILE"},      {"--eval-every", "N"},
    {"--eval-batches", "K"},
};

std::string parseInt(const std::string &flag, const std::string &v,
                     int64_t min, int64_t &out) {
  const char *s = v.c_str();
  char *end = nullptr;
  errno = 0;
  long long x = std::strtoll(s, &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE ||
      std::strchr(" \t\n", v[0]))
    return flag + " takes an integer, not '" + v + "'";
  if (x < min)
    return flag + " must be at least " + std::to_string(min) + " (got " + v +
           ")";
  out = x;
  return "";
}

std::string parseReal(const std::string &flag, const std::string &v,
                      double min, bool minOpen, double maxOpen,
                      double &out) {
  const char *s = v.c_str();
  char *end = nullptr;
  errno = 0;
  double x = std::strtod(s, &end);
  if (v.empty() || *end != '\0' || std::strchr(" \t\n", v[0]) ||
      !std::isfinite(x))
    return flag + " takes a finite number, not '" + v + "'";
  if (minOpen ? !(x > min) : !(x >= min))
    return flag + " must be " + (minOpen ? "greater than " : "at least ") +
           format("%g", min) + " (got " + v + ")";
  if (!(x < maxOpen))
    return flag + " must be less than " + format("%g", maxOpen) + " (got " +
           v + ")";
  out = x;
  return "";
}

/// " (did you mean '--steps'?)" for a flag within two edits of a known
/// one; "" otherwise.
std::string suggestFlag(const std::string &flag) {
  std::vector<std::string> known = {"--feed", "--dump", "--grads-only", "--eval-only",
                                    "--nesterov", "--quiet",
                                    "--no-prefetch", "--cuda-graphs", "--no-cuda-graphs",
                                    "--check-numerics", "--help", "--version"};
  for (const ValueFlag &f : kValueFlags)
    known.push_back(f.flag);
  std::string best;
  size_t bestDistance = 3;
  for (const std::string &k : known) {
    // Levenshtein distance, one row at a time.
    std::vector<size_t> row(k.size() + 1);
    for (size_t j = 0; j <= k.size(); ++j)
      row[j] = j;
    for (size_t i = 1; i <= flag.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= k.size(); ++j) {
        size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (flag[i - 1] != k[j - 1])});
        diag = up;
      }
    }
    if (row[k.size()] < bestDistance) {
      bestDistance = row[k.size()];
      best = k;
    }
  }
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

/// Sets the value flag `flag` (one of kValueFlags, whose metavariable is
/// `meta`) to `value`. Returns an error message, or "".
std::string setValueFlag(const std::string &flag, const char *meta, const std::string &value,
                         Options &opts) {
  const double inf = INFINITY;
  std::string err;
  if (flag == "--data" || flag == "--metrics" || flag == "--checkpoint" ||
      flag == "--resume" || flag == "--save" || flag == "--model" ||
      flag == "--init-weights" || flag == "--trace" || flag == "--tensorboard" ||
      flag == "--val-data") {
    if (value.empty())
      return flag + " needs a non-empty " + meta;
    (flag == "--data"         ? opts.data
     : flag == "--trace"      ? opts.trace
     : flag == "--tensorboard" ? opts.tensorboard
     : flag == "--metrics"    ? opts.metrics
     : flag == "--checkpoint" ? opts.checkpoint
     : flag == "--resume"     ? opts.resume
     : flag == "--save"       ? opts.save
     : flag == "--init-weights" ? opts.initWeights
     : flag == "--val-data"   ? opts.valData
                              : opts.model) = value;
    opts.haveData |= flag == "--data";
  } else if (flag == "--init") {
    // normal, or normal:STD with STD > 0 (Hugging Face's initializer_range
    // is 0.02 for most models).
    std::string std = value == "normal" ? "0.02"
                      : value.rfind("normal:", 0) == 0 ? value.substr(7)
                                                       : std::string();
    if (std.empty())
      return "--init: expected normal or normal:STD (a standard deviation), not '" + value +
             "'";
    err = parseReal(flag, std, 0, true, INFINITY, opts.initStd);
  } else if (flag == "--steps") {
    err = parseInt(flag, value, 1, opts.steps);
  } else if (flag == "--eval-every") {
    err = parseInt(flag, value, 1, opts.evalEvery);
  } else if (flag == "--eval-batches") {
    err = parseInt(flag, value, 1, opts.evalBatches);
  } else if (flag == "--max-steps") {
    err = parseInt(flag, value, 1, opts.maxSteps);
  } else if (flag == "--accum") {
    err = parseInt(flag, value, 1, opts.accum);
  } else if (flag == "--warmup") {
    err = parseInt(flag, value, 0, opts.warmup);
  } else if (flag == "--trace-steps") {
    err = parseInt(flag, value, 1, opts.traceSteps);
  } else if (flag == "--print-every") {
    err = parseInt(flag, value, 1, opts.printEvery);
  } else if (flag == "--checkpoint-every") {
    err = parseInt(flag, value, 1, opts.checkpointEvery);
  } else if (flag == "--keep-checkpoints") {
    err = parseInt(flag, value, 1, opts.keepCheckpoints);
  } else if (flag == "--threads") {
    err = parseInt(flag, value, 1, opts.threads);
  } else if (flag == "--seed") {
    int64_t s = 0;
    err = parseInt(flag, value, 0, s);
    opts.seed = static_cast<uint64_t>(s);
  } else if (flag == "--lr") {
    err = parseReal(flag, value, 0, false, inf, opts.lr);
  } else if (flag == "--min-lr") {
    err = parseReal(flag, value, 0, false, inf, opts.minLr);
  } else if (flag == "--beta1") {
    err = parseReal(flag, value, 0, false, 1, opts.beta1);
  } else if (flag == "--beta2") {
    err = parseReal(flag, value, 0, false, 1, opts.beta2);
  } else if (flag == "--eps") {
    err = parseReal(flag, value, 0, false, inf, opts.eps);
  } else if (flag == "--weight-decay") {
    err = parseReal(flag, value, 0, false, inf, opts.weightDecay);
    opts.haveWeightDecay = true;
  } else if (flag == "--momentum") {
    err = parseReal(flag, value, 0, false, inf, opts.momentum);
  } else if (flag == "--clip-norm") {
    err = parseReal(flag, value, 0, false, inf, opts.clipNorm);
  } else if (flag == "--lr-schedule") {
    if (value != "constant" && value != "cosine")
      err = "--lr-schedule is constant or cosine, not '" + value + "'";
    opts.cosine = value == "cosine";
  } else if (flag == "--loss-scale") {
    err = tcc::parseLossScale(value, opts.lossScaler);
    opts.haveLossScale = true;
  } else if (flag == "--labels") {
    if (value != "shifted" && value != "aligned")
      err = "--labels is shifted or aligned, not '" + value + "'";
    opts.labels = value;
  } else if (flag == "--data-order") {
    if (value != "random" && value != "sequential")
      err = "--data-order is random or sequential, not '" + value + "'";
    opts.sequential = value == "sequential";
  } else if (flag == "--no-decay") {
    size_t begin = 0;
    for (;;) {
      size_t comma = value.find(',', begin);
      std::string glob = value.substr(
          begin, comma == std::string::npos ? std::string::npos
                                            : comma - begin);
      if (glob.empty()) {
        err = "--no-decay takes comma-separated globs; '" + value +
              "' has an empty one";
        break;
      }
      opts.noDecay.push_back(glob);
      if (comma == std::string::npos)
        break;
      begin = comma + 1;
    }
  }
  return err;
}

/// Returns -1 to go on, otherwise the exit code.
int parseArgs(int argc, char **argv, Options &opts) {
  bool haveStep = false, endOfFlags = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (endOfFlags || a.empty() || a[0] != '-') {
      if (haveStep)
        return error("unexpected argument '" + a +
                     "' (only one STEP.so is taken)");
      opts.step = a;
      haveStep = true;
      continue;
    }
    if (a == "--") {
      endOfFlags = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--version") {
      std::puts("tcc-run " TCC_RUN_VERSION
                " (step ABI " TCC_STR(TCC_STEP_ABI_VERSION) ")");
      return 0;
    }
    if (a == "--grads-only") {
      opts.gradsOnly = true;
      continue;
    }
    if (a == "--eval-only") {
      if (opts.evalOnly)
        return error(a + " is given twice");
      opts.evalOnly = true;
      opts.given.push_back(a);
      continue;
    }
    if (a == "--nesterov" || a == "--quiet" || a == "--no-prefetch" ||
        a == "--cuda-graphs" || a == "--no-cuda-graphs" || a == "--check-numerics") {
      if (opts.wasGiven(a.c_str()))
        return error(a + " is given twice");
      opts.given.push_back(a);
      (a == "--nesterov"      ? opts.nesterov
       : a == "--quiet"       ? opts.quiet
       : a == "--no-prefetch" ? opts.noPrefetch
       : a == "--cuda-graphs" ? opts.cudaGraphs
       : a == "--check-numerics" ? opts.checkNumerics
                              : opts.noCudaGraphs) = true;
      continue;
    }
    std::string flag = a, value;
    bool haveValue = false;
    size_t eq = a.find('=');
    if (eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
      haveValue = true;
    }
    if (flag == "--feed" || flag == "--dump") {
      if (!haveValue) {
        if (i + 1 >= argc)
          return error(flag + " needs a directory (" + flag + " DIR)");
        value = argv[++i];
      }
      if (value.empty())
        return error(flag + " needs a non-empty directory");
      bool &have = flag == "--feed" ? opts.haveFeed : opts.haveDump;
      if (have)
        return error(flag + " is given twice");
      have = true;
      (flag == "--feed" ? opts.feed : opts.dump) = value;
      continue;
    }
    const ValueFlag *vf = nullptr;
    for (const ValueFlag &f : kValueFlags)
      if (flag == f.flag)
        vf = &f;
    if (!vf)
      return error("unknown option '" + a + "'" + suggestFlag(flag) + " (see tcc-run --help)");
    if (!haveValue) {
      if (i + 1 >= argc)
        return error(flag + " needs a value (" + flag + " " + vf->meta + ")");
      value = argv[++i];
    }
    if (flag != "--no-decay" && opts.wasGiven(vf->flag))
      return error(flag + " is given twice");
    opts.given.push_back(vf->flag);
    std::string err = setValueFlag(flag, vf->meta, value, opts);
    if (!err.empty())
      return error(err);
  }
  if (!haveStep)
    return error("no step library given (usage: tcc-run STEP.so --feed DIR "
                 "--grads-only [--dump OUT], or tcc-run STEP.so (--feed DIR | "
                 "--data FILE) [training options]; see tcc-run --help)");
  if (opts.gradsOnly) {
    for (const std::string &f : opts.given)
      if (f != "--quiet" && f != "--init-weights" && f != "--init" && f != "--loss-scale" &&
          f != "--seed" && f != "--check-numerics")
        return error("--grads-only runs one micro-step without training; it "
                     "cannot be combined with " +
                     f);
    if (!opts.haveFeed)
      return error("--feed DIR is required: the directory with one "
                   "<input>.npy per step input");
    return -1;
  }
  if (opts.evalOnly) {
    if (opts.valData.empty())
      return error("--eval-only evaluates on --val-data FILE (a token stream, as --data "
                   "reads)");
    for (const std::string &f : opts.given)
      if (f != "--eval-only" && f != "--quiet" && f != "--init-weights" && f != "--init" &&
          f != "--resume" &&
          f != "--val-data" && f != "--eval-batches" && f != "--labels" && f != "--threads")
        return error("--eval-only evaluates without training; it cannot be combined with " +
                     f);
    if (opts.haveFeed || opts.haveData)
      return error("--eval-only evaluates on --val-data, without training data");
    return -1;
  }
  if (opts.wasGiven("--eval-every") && opts.valData.empty())
    return error("--eval-every needs --val-data FILE (what to evaluate on)");
  if (opts.wasGiven("--eval-batches") && opts.valData.empty())
    return error("--eval-batches needs --val-data FILE (what to evaluate on)");
  if (opts.haveFeed && opts.haveData)
    return error("--feed and --data cannot be combined: give one source of "
                 "training data");
  if (!opts.haveFeed && !opts.haveData)
    return error("no training data: pass --feed DIR (.npy batches) or --data "
                 "FILE (a token stream), or --grads-only with --feed DIR");
  if (opts.wasGiven("--keep-checkpoints") && opts.checkpoint.empty())
    return error("--keep-checkpoints needs --checkpoint DIR (where to keep them)");
  if (opts.wasGiven("--checkpoint-every") && opts.checkpoint.empty())
    return error("--checkpoint-every needs --checkpoint DIR (where to write "
                 "the checkpoints)");
  if (opts.nesterov && opts.momentum <= 0)
    return error("--nesterov needs a --momentum greater than 0 (as "
                 "torch.optim.SGD)");
  if (opts.maxSteps && opts.maxSteps > opts.steps && !opts.wasGiven("--resume"))
    return error("--max-steps " + std::to_string(opts.maxSteps) + " is past --steps " +
                 std::to_string(opts.steps) +
                 ": --steps is where training ends (and the learning rate schedule's "
                 "horizon); --max-steps stops this run earlier");
  if (!opts.model.empty() && opts.save.empty())
    return error("--model only says which ONNX model --save starts from; it "
                 "needs --save OUT.onnx");
  if (opts.wasGiven("--trace-steps") && opts.trace.empty())
    return error("--trace-steps says how many optimizer steps --trace records; it needs "
                 "--trace FILE.json");
  return -1;
}

int run(int argc, char **argv) {
  setReportWorld(&gWorld);
  Options opts;
  int rc = parseArgs(argc, argv, opts);
  if (rc >= 0)
    return rc;

  // Under mpirun (or srun), the world; alone, world size 1.
  double timeout = 600;
  if (const char *t = std::getenv("TCC_COMM_TIMEOUT")) {
    // Not atof: "abc" or "0" would turn the watchdog off without a word.
    char *end = nullptr;
    errno = 0;
    timeout = std::strtod(t, &end);
    if (!*t || *end || errno || !std::isfinite(timeout) || timeout <= 0)
      return error(std::string("TCC_COMM_TIMEOUT=") + t +
                   " is not a positive number of seconds (the time a collective may take "
                   "before every rank ends; default 600)");
  }
  std::string err = gWorld.join(timeout);
  if (!err.empty())
    return error(err);
  if (gWorld.parallel()) {
    if (opts.gradsOnly)
      return error("--grads-only runs one micro-step in one process; run it without mpirun");
    // Rank 0 speaks and writes the outputs; every rank reads the inputs
    // (--resume among them) and takes part in the checkpoints.
    if (gWorld.rank() != 0) {
      opts.quiet = true;
      opts.metrics.clear();
      opts.save.clear();
      opts.model.clear();
      opts.haveDump = false;
      opts.dump.clear();
      opts.trace.clear();
      opts.tensorboard.clear();
    }
  }

  if (opts.evalOnly && gWorld.parallel())
    return error("--eval-only evaluates in one process; run it without mpirun or torchrun");
  // A resume takes the training flags its checkpoint remembers, except
  // those given again (runtime/lib/resume_flags.h), into `into`.
  auto takeRecorded = [&](Options &into, std::vector<std::string> &notes) {
    return applyRecordedFlags(
        opts.resume, into,
        [&](const std::string &flag, const std::string &value) {
          for (const ValueFlag &f : kValueFlags)
            if (flag == f.flag)
              return setValueFlag(flag, f.meta, value, into);
          return "unknown flag " + flag;
        },
        notes);
  };
  if (opts.evalOnly && !opts.resume.empty() && opts.labels.empty()) {
    // The one training flag an evaluation reads: how the windows fill the
    // labels, as the run that wrote the checkpoint had it.
    Options recorded = opts;
    std::vector<std::string> notes;
    if (!(err = takeRecorded(recorded, notes)).empty())
      return error(err);
    opts.labels = recorded.labels;
  }
  if (!opts.resume.empty() && !opts.gradsOnly && !opts.evalOnly) {
    std::vector<std::string> notes;
    if (!(err = takeRecorded(opts, notes)).empty())
      return error(err);
    if (gWorld.rank() == 0 && !opts.quiet)
      for (const std::string &n : notes)
        std::fprintf(stderr, "tcc-run: %s\n", n.c_str());
    if (opts.nesterov && opts.momentum <= 0)
      return error("--nesterov (from the checkpoint's flags) needs a --momentum greater than 0");
    if (opts.maxSteps > opts.steps)
      return error("--max-steps " + std::to_string(opts.maxSteps) + " is past --steps " +
                   std::to_string(opts.steps) + ", where training ends");
  }

  Step step;
  err = loadStep(opts.step, step);
  if (!err.empty())
    return error(err);
  if (step.device && opts.threads)
    return error("--threads applies to CPU steps; " + opts.step + " is a CUDA step");
  if (step.setThreads) {
    int64_t threads = opts.threads;
    if (!threads) {
      cpu_set_t cpus;
      threads = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    }
    if (step.setThreads(static_cast<int32_t>(std::min<int64_t>(threads, 1024))) != 0)
      return error(opts.step + ": tcc_step_set_threads(" + std::to_string(threads) + ") failed");
    opts.resolvedThreads = threads;
  }
  if (gWorld.withoutMpi() && !step.device)
    return error(opts.step + " is a CPU step: its data parallelism runs over MPI (mpirun -np " +
                 std::to_string(gWorld.size()) + " tcc-run ...); a launch with torchrun's variables "
                 "and no MPI trains CUDA steps, over NCCL");
  const char *forceNccl = std::getenv("TCC_NCCL");
  gNccl = step.device && (gWorld.parallel() || (forceNccl && std::strcmp(forceNccl, "1") == 0));
  if (gNccl && (!step.setDevice || !step.commId || !step.commOpen || !step.commReduceNext ||
                !step.commInfo))
    return error(opts.step + " is a CUDA step without the data-parallel entry points "
                 "(tcc_step_comm_open, ...): rebuild it with this tcc to run it under " +
                 "a launcher, or run it in one process");
  if (opts.cudaGraphs && opts.noCudaGraphs)
    return error("--cuda-graphs and --no-cuda-graphs contradict each other");
  if (opts.cudaGraphs || opts.noCudaGraphs) {
    const char *flag = opts.cudaGraphs ? "--cuda-graphs" : "--no-cuda-graphs";
    if (step.info->device_arena != 1)
      return error(std::string(flag) +
                   " needs a step compiled with --target=cuda (" + opts.step +
                   " runs on the CPU)");
    // The step reads it at its first micro-step.
    ::setenv("TCC_CUDA_GRAPHS", opts.cudaGraphs ? "1" : "0", 1);
  }
  return opts.gradsOnly ? runGradsOnly(opts, step, gWorld) : runTraining(opts, step, gWorld, gNccl);
}

} // namespace

int main(int argc, char **argv) {
  int rc = run(argc, argv);
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    rc = rc ? rc : error("cannot write to standard output");
  // A rank that failed takes the world down, so that no other rank waits
  // for it in a collective; a stop (128 + signal) was agreed by all.
  if (rc == 1 && gWorld.parallel())
    gWorld.abortWorld(1);
  gWorld.finish();
  return rc;
}
