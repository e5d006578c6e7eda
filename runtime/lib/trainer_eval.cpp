//===- trainer_eval.cpp - validation during and without training ----------===//
//
// The Trainer's validation (tcc-run --val-data, --eval-only): the token
// stream of the validation file and the evaluation step that tcc --with-eval
// builds into step.so (runtime/lib/evaluator.h), fed the current parameters.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/trainer_impl.h"

namespace tcc::run::detail {

int Trainer::openValidation(std::vector<tcc::data::TokenColumn> columns) {
  // Rank 0 evaluates; the other ranks wait for it at the next collective.
  if (world.rank() != 0)
    return kGoOn;
  const int64_t B = info.inputs[0].dims[0], T = info.inputs[0].dims[1];
  if (!(err = valTokens.open(opts.valData)).empty())
    return error("--val-data: " + err);
  const uint64_t windows = valTokens.size() > static_cast<uint64_t>(T)
                               ? (valTokens.size() - 1) / static_cast<uint64_t>(T)
                               : 0;
  const int64_t whole = static_cast<int64_t>(windows / static_cast<uint64_t>(B));
  if (whole < 1)
    return error("the validation file " + opts.valData + " has " +
                 std::to_string(valTokens.size()) + " tokens; one validation batch of " +
                 std::to_string(B) + " windows of " + std::to_string(T) + " needs at least " +
                 std::to_string(B * T + 1));
  if (opts.evalBatches > whole)
    return error("--eval-batches " + std::to_string(opts.evalBatches) + ": the validation file " +
                 opts.valData + " holds " + std::to_string(whole) + " batches of " +
                 std::to_string(B) + "x" + std::to_string(T) + " tokens");
  valBatches = opts.evalBatches ? opts.evalBatches : std::min<int64_t>(whole, 100);
  valMaker.reset(new tcc::data::TokenBatchMaker(valTokens, B, T, std::move(columns),
                                                tcc::data::Order::Sequential));
  evaluator.reset(new Evaluator());
  bool found = false;
  if (!(err = evaluator->open(step, world, opts.resolvedThreads, found)).empty())
    return error(err);
  if (!found)
    return error("--val-data: " + opts.step +
                 " carries no evaluation step; compile it with tcc --with-eval (the "
                 "forward pass and loss with dropout off, planned within the same "
                 "--mem-budget)");
  return kGoOn;
}

std::string Trainer::evaluate() {
  std::string why;
  if (step.device && !(why = mem.copyOutParamsAndState(false)).empty())
    return why;
  if (!(why = evaluator->loadParameters(step, arena)).empty() ||
      !(why = evaluator->evaluate(*valMaker, valBatches, valLoss)).empty())
    return why;
  lastValLoss = valLoss;
  return "";
}

int Trainer::evaluateOnly() {
  std::vector<tcc::data::TokenColumn> columns;
  if (!(err = tokenColumns(columns)).empty())
    return error("--val-data: " + err);
  if (int r = openValidation(std::move(columns)); r != kGoOn)
    return r;
  if (!(err = prepareArena(step, mem, world, nccl)).empty() ||
      !(err = loadInitWeights(opts.initWeights, opts.initStd, opts.seed, !opts.resume.empty(), step, mem)).empty())
    return error(err);
  arena = mem.host;
  int64_t at = 0;
  std::string from = opts.initWeights.empty() ? "the initial weights"
                                              : "the weights of " + opts.initWeights;
  if (!opts.resume.empty()) {
    // Into the host mirror, and from there to a device step's arena, which
    // evaluate() copies the parameters out of.
    if (!(err = tcc::ckpt::read(opts.resume, info, ck, arena, world.rank(), world.size()))
             .empty() ||
        !(err = mem.copyIn(info.params, info.num_params)).empty())
      return error(err);
    at = ck.step;
    from = "the checkpoint " + tcc::ckpt::filePath(opts.resume) + " (step " +
           std::to_string(at) + ")";
  }
  if (!(err = evaluate()).empty())
    return error("--val-data: " + err);
  if (world.rank() == 0)
    std::printf("validation loss %.6f, perplexity %.4f: %lld batches of %s from %s, %s\n",
                valLoss, std::exp(valLoss), static_cast<long long>(valBatches),
                (std::to_string(info.inputs[0].dims[0]) + "x" +
                 std::to_string(info.inputs[0].dims[1]))
                    .c_str(),
                opts.valData.c_str(), from.c_str());
  return 0;
}

} // namespace tcc::run::detail
