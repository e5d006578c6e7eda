/*===- tcc_step.h - the C ABI of a compiled training step -------*- C -*-===*
 *
 * `tcc model.onnx -o step.so` produces a shared library that exports the
 * functions below. Everything the step touches lives in one arena that the
 * caller allocates (`arena_bytes`, aligned to 64 bytes): parameters, gradient
 * accumulators, inputs, outputs and temporaries, each at a fixed byte offset
 * given by its descriptor. The runtime writes inputs at their offsets, calls
 * `micro_step`, and reads outputs and gradients at theirs.
 *
 * Versioned: a runtime refuses a step whose `abi_version` differs from the
 * TCC_STEP_ABI_VERSION it was built with. Functions return 0 on success.
 *
 *===----------------------------------------------------------------------===*/
#ifndef TCC_RUNTIME_TCC_STEP_H
#define TCC_RUNTIME_TCC_STEP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TCC_STEP_ABI_VERSION 9

/* The state tensor (among tcc_step_info.state) that holds a step's dropout
 * random state, int64 [seed, micro-steps done] (runtime/tcc_random.h):
 * tcc_step_init zeroes it, each micro-step advances the count, and a caller
 * seeds it by writing the seed. Absent from steps without dropout. */
#define TCC_STEP_DROPOUT_STATE "rng/dropout"

/* A step library built with tcc --with-eval carries an evaluation step (a
 * second library of this ABI: the forward pass and the loss, every parameter
 * fixed, dropout off) after its own ELF image, then that image's size in
 * bytes (8, little-endian) and these 8 bytes. */
#define TCC_STEP_EVAL_MAGIC "TCC-EVAL"

/* Element types, numbered as ONNX's TensorProto.DataType. */
enum tcc_dtype {
  TCC_DTYPE_F32 = 1,
  TCC_DTYPE_U8 = 2,
  TCC_DTYPE_I8 = 3,
  TCC_DTYPE_U16 = 4,
  TCC_DTYPE_I16 = 5,
  TCC_DTYPE_I32 = 6,
  TCC_DTYPE_I64 = 7,
  TCC_DTYPE_BOOL = 9, /* one byte per element, 0 or 1 */
  TCC_DTYPE_F16 = 10,
  TCC_DTYPE_F64 = 11,
  TCC_DTYPE_U32 = 12,
  TCC_DTYPE_U64 = 13,
};

typedef struct tcc_tensor_desc {
  const char *name;     /* the ONNX name (initializer, graph input or output) */
  int32_t dtype;        /* enum tcc_dtype */
  int32_t rank;
  const int64_t *dims;  /* `rank` dimensions, row-major layout */
  uint64_t offset;      /* byte offset in the arena, or in the host buffer
                           (location TCC_LOCATION_HOST) */
  uint64_t bytes;       /* size in bytes */
  int32_t location;     /* enum tcc_location */
} tcc_tensor_desc;

/* Where a tensor lives. A plan made with tcc --offload keeps the fp32 master
 * weights and optimizer state of some parameters in pinned host memory (the
 * host buffer, host_bytes of it, which tcc_step_device_open allocates); the
 * optimizer updates them on the host. Only device steps have a host buffer. */
enum tcc_location {
  TCC_LOCATION_ARENA = 0,
  TCC_LOCATION_HOST = 1,
  /* In the arena, but this rank's part of a sharded tensor (tcc
   * --data-parallel=N, below): its bytes differ from rank to rank, and a
   * checkpoint keeps every rank's. */
  TCC_LOCATION_SHARD = 2,
};

typedef struct tcc_step_info {
  uint32_t abi_version;          /* TCC_STEP_ABI_VERSION */
  const char *model;             /* the model file's name */
  const char *model_path;        /* the model file tcc compiled (absolute) */
  const char *target;            /* "cpu" or "cuda" */
  uint64_t arena_bytes;
  int32_t has_backward;          /* 1: micro_step computes gradients */
  int32_t num_params;
  const tcc_tensor_desc *params; /* trainable and frozen parameters */
  const tcc_tensor_desc *grads;  /* one accumulator per parameter, same order;
                                    `bytes` is 0 for frozen parameters */
  int32_t num_inputs;
  const tcc_tensor_desc *inputs;
  int32_t num_outputs;
  const tcc_tensor_desc *outputs; /* with a backward pass, outputs[0] is the loss */
  const char *optimizer;          /* "adamw", "sgd", or "" without a backward pass */
  int32_t num_state;              /* optimizer state tensors (checkpointed) */
  const tcc_tensor_desc *state;   /* named "<kind>/<parameter>", e.g. "exp_avg/wte.weight" */
  uint64_t mem_budget;            /* tcc --mem-budget the plan was made for (0: none);
                                     arena_bytes <= mem_budget */
  int32_t device_arena;           /* 1 (target "cuda"): the arena is device memory,
                                     allocated and accessed only through the
                                     tcc_step_device_* functions below; 0: host
                                     memory the caller allocates */
  int32_t weights_embedded;       /* 1: tcc_step_init writes the model's initial
                                     weights; 0 (tcc --no-weights): it zeroes
                                     the parameters, and the caller must load
                                     weights (a checkpoint or a raw blob in
                                     `params` order) before training */
  int32_t num_ops;                /* the micro-step's ops that run code, in the
                                     order they run (what tcc_step_set_trace_hook
                                     times) */
  const char *const *ops;         /* op k: the kernel or library call, the tcc op
                                     (a fusion's ops) and the ONNX nodes it came
                                     from, e.g. "cuBLASLt matmul: tcc.matmul
                                     /h.0/attn/MatMul" */
  const uint64_t *op_live_bytes;  /* op k: the arena bytes the memory plan has
                                     live while it runs (the persistent slots and
                                     the temporaries live at it) */
  uint64_t host_bytes;            /* the host buffer (TCC_LOCATION_HOST tensors;
                                     0: none), outside arena_bytes and the
                                     budget */
  const char *objective;          /* how the loss reads the inputs, "" if the
                                     model does not say: ';'-separated fields
                                     task=causal-lm|masked-lm, ids=INPUT,
                                     labels=INPUT, mask=INPUT,
                                     labels-shift=shifted (the model compares
                                     position t with label t + 1, as Hugging
                                     Face causal LMs do: labels are the ids)
                                     | aligned (label t is the target of
                                     position t: the next token). ABI 9 */
} tcc_step_info;

/* Run-time hyperparameters of `tcc_step_apply` (PyTorch's names and
 * semantics: torch.optim.AdamW, torch.optim.SGD,
 * torch.nn.utils.clip_grad_norm_). */
typedef struct tcc_optim_args {
  double lr;
  double beta1, beta2, eps;  /* AdamW */
  double weight_decay;       /* AdamW: decoupled; SGD: added to the gradient */
  double momentum;           /* SGD */
  int32_t nesterov;          /* SGD */
  double clip_norm;          /* > 0: clip the global gradient norm to this */
  int64_t step;              /* 1-based count of optimizer steps, this one included */
  const uint8_t *decay;      /* per parameter: 1 to apply weight decay, 0 not;
                                NULL applies it to all */
  double grad_norm;          /* out: the global gradient norm before clipping
                                (of the unscaled gradients) */
  double loss_scale;         /* > 0: the accumulators hold gradients multiplied
                                by this (dynamic loss scaling); `apply` divides
                                by it before the norm, clipping and the update.
                                0 or 1: no scaling */
} tcc_optim_args;

/* The step's tables; valid for the lifetime of the library. */
const tcc_step_info *tcc_step_get_info(void);

/* Writes the initial parameter values (the model's initializers) into the
 * arena and zeroes the gradient accumulators. */
int tcc_step_init(void *arena);

/* Zeroes the gradient accumulators. */
int tcc_step_zero_grads(void *arena);

/* One micro-step: the forward pass from the parameters and inputs in the
 * arena, writing the outputs; with a backward pass, also adds the gradient of
 * (loss * grad_scale) with respect to each trainable parameter into its
 * accumulator (grad_scale = 1/accum gives PyTorch's `(loss / accum).backward()`). */
int tcc_step_micro_step(void *arena, double grad_scale);

/* One optimizer step from the accumulated gradients of the trainable
 * parameters (frozen ones are left alone): clip, update the parameters and
 * the optimizer state, then zero the accumulators. Returns 2 when the
 * gradient norm is not finite (nothing is updated; the accumulators are
 * zeroed). */
int tcc_step_apply(void *arena, tcc_optim_args *args);

/* Per-op timing (tcc-run --trace). With a hook set, each micro-step that
 * follows reports its marks: mark 0 starts the micro-step's body and mark k
 * (1..num_ops) ends ops[k-1]. A CPU step calls hook(ctx, k, -1) as mark k
 * happens, on the calling thread, so the caller reads its own clock. A CUDA
 * step records an event on its stream at each mark (CUDA graphs are off
 * while a hook is set) and calls hook(ctx, k, seconds) for every mark when
 * the micro-step ends (in tcc_step_micro_step or _end), `seconds` being the
 * time from mark 0 to mark k on the device. NULL turns timing off. Without
 * a hook a mark costs a load and a branch. */
typedef void (*tcc_step_trace_hook)(void *ctx, int32_t mark, double seconds);
int tcc_step_set_trace_hook(tcc_step_trace_hook hook, void *ctx);

/* Numerics checks (tcc-run --check-numerics). Optional exports: a runtime
 * looks them up with dlsym, and a step without them cannot be checked.
 *
 * tcc_step_op_values gives the value table: for each op of the op table
 * (tcc_step_info.ops), the arena buffers it read (role 0, `index` its
 * operand) and wrote (role 1, `index` its result), each as a descriptor
 * whose dtype is the type it is stored in (fp16 on the CUDA target for
 * most activations), in op order. Buffers outside the arena (constants in
 * the library's read-only data) are not listed. An op may write a result
 * over an operand's buffer (in place): then both rows have the same
 * offset.
 *
 * With a check hook set, every micro-step that follows calls hook(ctx, k)
 * at each mark k (0 before the first op, k after ops[k-1]) with the
 * results of ops[k-1] in the arena: a CUDA step synchronizes its stream
 * first (and runs without CUDA graphs while a hook is set). A hook that
 * returns non-zero stops the micro-step there: it returns
 * TCC_STEP_STOPPED, with the gradient accumulators partly added to (zero
 * them before the next optimizer step). NULL turns checking off. */
#define TCC_STEP_STOPPED 9
typedef struct tcc_op_value {
  int32_t op;              /* index in tcc_step_info.ops */
  int32_t role;            /* 0: read by the op, 1: written by it */
  int32_t index;           /* the operand's or the result's number */
  tcc_tensor_desc tensor;  /* name "", the dtype stored, the arena offset */
} tcc_op_value;
const tcc_op_value *tcc_step_op_values(int32_t *count);
typedef int (*tcc_step_check_hook)(void *ctx, int32_t mark);
int tcc_step_set_check_hook(tcc_step_check_hook hook, void *ctx);

/* Device steps (`device_arena` = 1) only. Every function returns 0 on
 * success; on failure it writes a message that starts with the CUDA error's
 * name (e.g. "cudaErrorInsufficientDriver") into `err` (NUL-terminated, at
 * most `err_len` bytes) where it has one.
 *
 * tcc_step_device_open picks the current device, creates the step's stream,
 * allocates the arena (one cudaMalloc of arena_bytes) and zeroes it;
 * tcc_step_init, tcc_step_micro_step, ... then take the returned pointer.
 * Copies are synchronous with respect to the step's stream. */
int tcc_step_device_open(void **arena, char *err, uint64_t err_len);
int tcc_step_device_close(void *arena);
int tcc_step_copy_in(void *arena, uint64_t offset, const void *src,
                     uint64_t bytes, char *err, uint64_t err_len);
int tcc_step_copy_out(const void *arena, uint64_t offset, void *dst,
                      uint64_t bytes, char *err, uint64_t err_len);
/* Steps with a host buffer (host_bytes > 0) only: copies into and out of
 * it, `offset` being a TCC_LOCATION_HOST tensor's. Writing a parameter's
 * master weights refreshes its fp16 working copy on the device before the
 * next micro-step. */
int tcc_step_host_copy_in(void *arena, uint64_t offset, const void *src,
                          uint64_t bytes, char *err, uint64_t err_len);
int tcc_step_host_copy_out(const void *arena, uint64_t offset, void *dst,
                           uint64_t bytes, char *err, uint64_t err_len);
/* The next micro-step's inputs, uploaded while the current one computes.
 * tcc_step_stage_inputs copies `bytes` bytes at `src` (every input, in the
 * order of tcc_step_info.inputs, back to back; `bytes` must be their total)
 * into the step's pinned buffer, queues their upload on the step's copy
 * stream and returns without waiting for it; it may be called while a
 * micro-step runs (between tcc_step_micro_step_begin and _end). The next
 * micro-step then takes its inputs from there instead of from its arena
 * slots (which it overwrites with them). At most one set of inputs is
 * staged at a time: staging again before a micro-step consumed the last
 * set fails. */
int tcc_step_stage_inputs(void *arena, const void *src, uint64_t bytes,
                          char *err, uint64_t err_len);
/* tcc_step_micro_step in two halves: _begin queues the micro-step on the
 * step's stream and returns (non-zero: it could not be queued), _end waits
 * for it and returns what tcc_step_micro_step would have. */
int tcc_step_micro_step_begin(void *arena, double grad_scale);
int tcc_step_micro_step_end(void *arena);
/* The measured device memory: `peak` is the largest (total - free) seen by
 * cudaMemGetInfo since tcc_step_device_open, minus what was in use before
 * the step's first allocation (the CUDA context and other processes);
 * `total` is the device's memory. */
int tcc_step_device_memory(uint64_t *peak, uint64_t *total);

/* Data parallelism (tcc-run under mpirun or srun, or TCC_NCCL=1 in one
 * process), device steps only; a runtime looks these up only then.
 * tcc_step_set_device picks the rank's GPU before tcc_step_device_open (a
 * rank that sees a single GPU takes it). Rank 0 makes the world's id with
 * tcc_step_comm_id; the runtime sends it to every rank, and each opens the
 * step's communicator with it after tcc_step_device_open and before the
 * first micro-step (NCCL: libnccl.so.2 is loaded then; the CUDA emulation
 * goes over the runtime's MPI plugin). A step whose gradient accumulators
 * are in host memory is refused. With a communicator open the micro-steps
 * run without CUDA graphs. tcc_step_comm_reduce_next marks the next
 * micro-step as the optimizer step's last: its gradient accumulators are
 * summed across the world as the backward pass finishes each one, and
 * tcc_step_apply waits for the sums before the norm and the update (so
 * every rank takes the same skip decision); tcc_step_comm_info describes
 * the communicator. tcc_step_apply returns 6 when the all-reduce failed.
 * tcc_step_device_close closes the communicator (aborting it after a
 * failure). The comm functions' messages name NCCL's error, not CUDA's. */
#define TCC_STEP_COMM_ID_BYTES 128
int tcc_step_set_device(int32_t device, char *err, uint64_t err_len);
int tcc_step_comm_id(unsigned char *id, char *err, uint64_t err_len);
int tcc_step_comm_open(void *arena, const unsigned char *id, int32_t nranks,
                       int32_t rank, char *err, uint64_t err_len);
int tcc_step_comm_reduce_next(void *arena);
/* The open communicator in words (library, ranks, bucket size, what it has
 * summed so far), NUL-terminated in at most `len` bytes. */
int tcc_step_comm_info(void *arena, char *text, uint64_t len);
/* tcc-run's own collectives (runtime/comm/tcc_comm.h's table: sums,
 * maximum, gather, broadcast, barrier, abort) over the open communicator,
 * for a world launched without MPI (torchrun's variables), or NULL when no
 * communicator is open. Host buffers, synchronous. */
struct tcc_comm_api;
const struct tcc_comm_api *tcc_step_comm_api(void *arena);
/* With a trace hook set: the collectives of the last optimizer step (at
 * most `max`), each's start and end in seconds after mark 0 of the
 * micro-step that queued its gradients (the optimizer step's last), its
 * bytes and what it is. Call after tcc_step_apply (or the ZeRO-1 calls).
 * Returns how many, or -1. */
int tcc_step_comm_trace(void *arena, double *start, double *end, uint64_t *bytes,
                        const char **names, int32_t max);

/* Sharded optimizer state (ZeRO stage 1, `tcc --data-parallel=N`). A CPU
 * step exports tcc_step_get_shards only when sharded (a runtime looks it up
 * with dlsym); a CUDA step always does, and returns NULL when its state is
 * whole. Such a step trains under exactly `ranks` ranks:
 * every rank holds the whole model and its gradient accumulators, but the
 * optimizer state (TCC_LOCATION_SHARD tensors) of one chunk of the flat
 * parameter space. The trainable parameters lie back to back from
 * `params_offset`, their accumulators from `grads_offset`, with the same
 * element indices, `flat_elems` = ranks * chunk_elems in all (the padding
 * between and after tensors is never read). One optimizer step:
 *   1. the runtime reduce-scatters (sums) the accumulators' flat space so
 *      that rank r's chunk r, elements [r * chunk_elems, (r + 1) *
 *      chunk_elems), lands in the shard buffer at `shard_grads_offset`;
 *   2. tcc_step_shard_sumsq gives the sum of squares of the rank's chunk;
 *      the runtime sums them across the ranks;
 *   3. tcc_step_shard_apply takes that world sum (so every rank sees the
 *      same norm, clipping and skip decision), updates the rank's chunk of
 *      the parameters and its optimizer state, and zeroes the accumulators
 *      (returning 2, with nothing updated, when the norm is not finite);
 *   4. the runtime all-gathers the parameters' flat space in place (chunk
 *      r from rank r).
 * A CUDA step (device arena) does steps 1 and 4 itself, over its NCCL
 * communicator (tcc_step_comm_open, which names the rank): the
 * reduce-scatter is queued after the micro-step that tcc_step_comm_reduce_next
 * marked, tcc_step_shard_sumsq waits for it (and zeroes the accumulators),
 * and tcc_step_shard_apply all-gathers the fp32 parameters and refreshes
 * their fp16 copies before it returns (6: a collective failed).
 * tcc_step_apply returns 7 for a sharded step. */
typedef struct tcc_shard_info {
  int32_t ranks;
  int32_t dtype;             /* TCC_DTYPE_F32 or _F64: both flat spaces' elements */
  uint64_t flat_elems;
  uint64_t chunk_elems;
  uint64_t params_offset;
  uint64_t grads_offset;
  uint64_t shard_grads_offset;
} tcc_shard_info;
const tcc_shard_info *tcc_step_get_shards(void);
int tcc_step_shard_sumsq(void *arena, int32_t rank, double *sumsq);
int tcc_step_shard_apply(void *arena, int32_t rank, tcc_optim_args *args,
                         double world_sumsq);

#ifdef __cplusplus
}
#endif

#endif /* TCC_RUNTIME_TCC_STEP_H */
