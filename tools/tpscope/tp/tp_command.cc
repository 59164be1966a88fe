// SPDX-License-Identifier: Apache-2.0
// tp/tp_command.cc - `tpscope tp`: options, checks, and running the phases.
#include "tp/tp_command.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "topology/topology.h"
#include "workload/model.h"
#include "workload/roofline.h"
#include "workload/token_decode.h"

namespace tpscope::cli {

namespace {

tpsBackend_t backendOf(const std::string& name) {
  if (name == "host") return tpsBackendHost;
  if (name == "p2p") return tpsBackendP2p;
  if (name == "nccl") return tpsBackendNccl;
  return tpsBackendAuto;
}

class TpCommand : public Command {
 public:
  explicit TpCommand(CLI::App& app) {
    sub_ = app.add_subcommand("tp",
                              "Synthetic transformer (real GEMMs, KV cache) in split none|layer|tensor: "
                              "prefill and decode tokens/s");
    sub_->add_option("--preset", preset_, "Model shape: tiny, 8b, 32b")->capture_default_str();
    sub_->add_option("--dims", dims_, "Override dimensions: hidden=,ffn=,layers=,q_heads=,kv_heads=,head_dim=,rope=");
    sub_->add_option("--split", split_, "none (one GPU), layer (layer ranges) or tensor (heads/FFN columns)")
        ->check(CLI::IsMember({"none", "layer", "tensor"}))
        ->capture_default_str();
    sub_->add_option("--devices", devices_, "GPU indices, comma-separated (default: 0 for none, 0,1 otherwise)");
    sub_->add_option("--backend", o_.backend, "AllReduce backend for split tensor")
        ->check(CLI::IsMember({"auto", "host", "p2p", "nccl"}))
        ->capture_default_str();
    sub_->add_option("--prefill-attention", o_.prefill_attention,
                     "Prefill attention: cudnn (cuDNN's flash attention), kernel (tpscope's own), auto (cudnn where it "
                     "loads)")
        ->check(CLI::IsMember({"auto", "cudnn", "kernel"}))
        ->capture_default_str();
    sub_->add_option("--reduction", o_.reduction,
                     "Split tensor: pushed (the projections send their partials, p2p), fused (one library kernel "
                     "for the AllReduce, residual add and norm, p2p), plain (AllReduce, then the add + norm kernel); "
                     "pushed and fused fall back to plain where they do not apply")
        ->check(CLI::IsMember({"pushed", "fused", "plain"}))
        ->capture_default_str();
    sub_->add_option(
            "--rope-kernel", o_.rope_kernel,
            "Decode RoPE and K/V store: inside the attention kernel (attention) or a kernel before it (kernel)")
        ->check(CLI::IsMember({"attention", "kernel"}))
        ->capture_default_str();
    sub_->add_option("--attention-pdl", o_.attention_pdl,
                     "Decode attention as a programmatic dependent of the kernel before it: on, off, auto (on except "
                     "a tensor slice with GQA groups of 8 or more)")
        ->check(CLI::IsMember({"auto", "on", "off"}))
        ->capture_default_str();
    sub_->add_option("--phase", o_.phase, "prefill, decode or both")
        ->check(CLI::IsMember({"prefill", "decode", "both"}))
        ->capture_default_str();
    sub_->add_option("--prompt", o_.prefill.prompt, "Prefill: prompt tokens T")->capture_default_str();
    sub_->add_option("--ubatch", o_.prefill.ubatch, "Prefill: micro-batch U")->capture_default_str();
    sub_->add_option("--tokens", o_.decode.tokens, "Decode: tokens to emit n")->capture_default_str();
    sub_->add_option("--ctx", o_.decode.ctx, "Decode: context length c")->capture_default_str();
    sub_->add_option("--tokens-per-step", o_.decode.tokens_per_step, "Decode: tokens verified per step k")
        ->capture_default_str();
    sub_->add_option("--accept", o_.decode.accept, "Decode: acceptance rate of drafted tokens, 0..1")
        ->capture_default_str();
    sub_->add_flag("--no-graph", no_graph_, "Decode eagerly instead of as a CUDA graph");
    sub_->add_flag("--no-roofline", no_roofline_, "Skip measuring the copy rate for decode's memory roofline");
    sub_->add_flag("--profile", profile_,
                   "Also time one forward of each phase op by op on every GPU (eager, ops back to back)");
    sub_->add_option("--seed", o_.seed, "Seed of the generated weights, context and inputs")->capture_default_str();
    sub_->add_flag("--estimate", estimate_only_, "Print the memory needed per GPU and exit (no GPU needed)");
    // The wires' end-to-end accuracy (benchmarks/wires): a token decode instead of the timed phases.
    sub_->add_option("--logits-out", logits_out_,
                     "Instead of timing: prefill --prompt, then decode --tokens steps one token at a time at growing "
                     "positions (token embeddings in, a 32000-token vocabulary head out) and write each step's "
                     "logits to this .npy file (float32, steps x 32000); stdout gets the run (tokens, wire, paths)");
    sub_->add_option("--force-tokens", force_tokens_,
                     "With --logits-out: the steps' input tokens from this JSON file's \"tokens\" (an earlier "
                     "run's --format json output) instead of the run's own greedy tokens");
    sub_->add_option("--capture-allreduce", capture_dir_,
                     "With --logits-out and --split tensor: write the AllReduce inputs of the prompt's first "
                     "micro-batch and of the first decode step to this folder (index.json, prefill.bin, decode.bin)");
    sub_->add_option("--capture-rows", capture_rows_,
                     "With --capture-allreduce: rows kept per call, spread evenly (0: every row)")
        ->capture_default_str();
    sub_->add_option("--format", o_.format, "Output format")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str();
  }
  CLI::App* subcommand() const override { return sub_; }

  int run() override {
    validate();
    workload::RunShape shape = runShape(o_);
    if (!logits_out_.empty()) {  // the token decode: the prompt and every step's position in the cache
      shape.ctx_capacity = o_.prefill.prompt + o_.decode.tokens;
      shape.max_tokens = std::min(o_.prefill.ubatch, o_.prefill.prompt);
    }
    const std::vector<workload::GpuMemory> need =
        workload::estimateMemory(o_.config, o_.split, static_cast<int>(o_.devices.size()), shape);
    if (estimate_only_) return print(need, {});

    int count = 0;
    std::string why;
    if (cudaDeviceCount(&count, &why) != tpsSuccess || count == 0)
      return fail(kExitRuntime, "tpscope tp needs a GPU: " + (why.empty() ? "none is visible" : why));
    for (int d : o_.devices)
      if (d >= count)
        throw UsageError(fmt::format("GPU {} does not exist: this machine has {} GPU{} (0..{})", d, count,
                                     count == 1 ? "" : "s", count - 1));
    // The copy rate is measured before the model takes the memory (it needs 2 GiB per GPU).
    std::vector<double> copy_gbps;
    if (o_.phase != "prefill" && !no_roofline_ && logits_out_.empty()) {
      for (int d : o_.devices) {
        double g = 0;
        if (workload::measureCopyBandwidth(d, &g) != tpsSuccess) {
          copy_gbps.clear();
          break;
        }
        copy_gbps.push_back(g);
      }
    }
    workload::ModelOptions mo;
    mo.config = o_.config, mo.split = o_.split, mo.devices = o_.devices, mo.backend = backendOf(o_.backend);
    mo.seed = o_.seed, mo.shape = shape;
    for (size_t i = 0; i < o_.devices.size(); ++i)
      for (size_t j = 0; j < i; ++j) mo.shared_devices = mo.shared_devices || o_.devices[i] == o_.devices[j];
    mo.prefill_attention = *workload::parsePrefillAttention(o_.prefill_attention);
    mo.kernels.reduction = *workload::parseReduction(o_.reduction);
    mo.kernels.rope = *workload::parseRopeKernel(o_.rope_kernel);
    mo.kernels.attention_pdl = *workload::parseAttentionPdl(o_.attention_pdl);
    std::unique_ptr<workload::Model> model;
    std::string reason;
    if (tpsResult_t r = workload::Model::create(mo, &model, &reason); r != tpsSuccess)
      return fail(r == tpsInvalidArgument ? kExitUsage : kExitRuntime, reason);
    o_.prefill_attention = workload::prefillAttentionName(model->options().prefill_attention);
    o_.attention_pdl = workload::attentionPdlName(model->options().kernels.attention_pdl);
    if (tpsConfig_t cfg; model->comm() && tpsCommGetConfig(model->comm(), &cfg) == tpsSuccess) o_.communicator = cfg;
    if (!logits_out_.empty()) return runTokenDecode(*model);
    std::vector<workload::PhaseResult> results;
    if (o_.phase != "decode") {
      workload::PhaseResult r;
      if (workload::runPrefill(*model, o_.prefill, nullptr, &r, &reason) != tpsSuccess)
        return fail(kExitRuntime, reason);
      // The prompt's last micro-batch: it attends to every earlier position, the costliest forward.
      const int last = o_.prefill.prompt - (o_.prefill.prompt - 1) / o_.prefill.ubatch * o_.prefill.ubatch;
      r.profile_pos0 = o_.prefill.prompt - last;
      if (profile_ && model->profileForward(last, r.profile_pos0, &r.profile) != tpsSuccess)
        return fail(kExitRuntime, "profiling a prefill forward failed (see the log)");
      results.push_back(r);
    }
    if (o_.phase != "prefill") {
      workload::PhaseResult r;
      if (workload::runDecode(*model, o_.decode, nullptr, &r, &reason) != tpsSuccess) return fail(kExitRuntime, reason);
      r.profile_pos0 = o_.decode.ctx;
      if (profile_ && model->profileForward(o_.decode.tokens_per_step, o_.decode.ctx, &r.profile) != tpsSuccess)
        return fail(kExitRuntime, "profiling a decode forward failed (see the log)");
      for (size_t i = 0; i < copy_gbps.size(); ++i) {
        const double ms = need[i].weights / (copy_gbps[i] * 1e9) * 1e3;
        if (ms > r.roofline_ms_per_step) r.roofline_ms_per_step = ms, r.copy_gbps = copy_gbps[i];
      }
      results.push_back(r);
    }
    return print(need, results);
  }

 private:
  // Every check that needs no GPU; throws UsageError with one sentence.
  void validate() {
    std::optional<workload::ModelConfig> c = workload::presetConfig(preset_);
    if (!c) throw UsageError("unknown preset '" + preset_ + "': use tiny, 8b or 32b");
    if (std::string bad = workload::applyOverrides(dims_, &*c); !bad.empty()) throw UsageError("--dims: " + bad);
    o_.config = *c;
    o_.split = *workload::parseSplitMode(split_);
    // Tensor split may repeat a GPU ("0,0"): its positions share it (tpsConfig_t.shared_devices), so
    // the split's AllReduces can be watched on one GPU (decode then runs eagerly: no graph).
    o_.devices = parseDeviceList(devices_, "--devices", /*repeats=*/o_.split == workload::SplitMode::kTensor);
    if (o_.devices.empty())
      o_.devices = o_.split == workload::SplitMode::kNone ? std::vector<int>{0} : std::vector<int>{0, 1};
    if (o_.decode.tokens_per_step < 1)
      throw UsageError(fmt::format("--tokens-per-step must be at least 1 (got {})", o_.decode.tokens_per_step));
    if (!(o_.decode.accept >= 0.0 && o_.decode.accept <= 1.0))
      throw UsageError(fmt::format("--accept must lie in [0, 1] (got {})", o_.decode.accept));
    if (o_.prefill.prompt < 1 || o_.prefill.ubatch < 1) throw UsageError("--prompt and --ubatch must be at least 1");
    if (o_.decode.tokens < 1) throw UsageError("--tokens must be at least 1");
    if (o_.decode.ctx < 0) throw UsageError("--ctx must be 0 or more");
    if (o_.split != workload::SplitMode::kTensor && o_.backend != "auto")
      throw UsageError("--backend applies to --split tensor only");
    o_.decode.graph = !no_graph_;
    if (logits_out_.empty() && (!force_tokens_.empty() || !capture_dir_.empty()))
      throw UsageError("--force-tokens and --capture-allreduce go with --logits-out");
    if (!capture_dir_.empty() && o_.split != workload::SplitMode::kTensor)
      throw UsageError("--capture-allreduce needs --split tensor (no AllReduce otherwise)");
    if (capture_rows_ < 0) throw UsageError("--capture-rows must be 0 (every row) or more");
    if (std::string error; !force_tokens_.empty() && !workload::readTokens(force_tokens_, &forced_, &error))
      throw UsageError("--force-tokens: " + error);
    if (!logits_out_.empty() && !std::ofstream(logits_out_, std::ios::binary))  // before a model is made
      throw UsageError("--logits-out: cannot write " + logits_out_ + ": give a file in a folder that exists");
    const std::string bad = workload::validateConfig(o_.config, o_.split, static_cast<int>(o_.devices.size()));
    if (!bad.empty()) throw UsageError(bad);
  }

  // --logits-out: the token decode, its logits to the file, the run on stdout.
  int runTokenDecode(workload::Model& model) {
    workload::TokenDecodeOptions t;
    t.prompt = o_.prefill.prompt, t.ubatch = o_.prefill.ubatch, t.steps = o_.decode.tokens;
    t.forced = forced_;
    t.capture_dir = capture_dir_, t.capture_rows = capture_rows_;
    std::string reason, error;
    workload::TokenDecodeResult r;
    nlohmann::json doc = workload::tokenDecodeJson(model, t, r);  // the settings, for the capture's index
    for (const char* k : {"tokens", "greedy", "rank_mismatch_steps", "allreduce_calls_by_path", "capture"})
      doc.erase(k);
    t.capture_model = doc;
    if (tpsResult_t e = workload::runTokenDecode(model, t, &r, &reason); e != tpsSuccess)
      return fail(e == tpsInvalidArgument ? kExitUsage : kExitRuntime, reason);
    if (!workload::writeNpy(logits_out_, r.logits.data(), {r.tokens.size(), size_t(workload::kVocab)}, &error))
      return fail(kExitRuntime, error);
    doc = workload::tokenDecodeJson(model, t, r);
    doc["logits"] = logits_out_;
    if (o_.format == "json") {
      std::printf("%s\n", doc.dump(1).c_str());
    } else {
      std::printf("# token decode: %s split %s, wire %s, %d steps after a %d-token prompt; logits in %s\n",
                  doc["preset"].get<std::string>().c_str(), doc["split"].get<std::string>().c_str(),
                  doc["wire"].get<std::string>().c_str(), t.steps, t.prompt, logits_out_.c_str());
      std::printf("rank_mismatch_steps %d\nallreduce_calls_by_path %s\n", r.rank_mismatch_steps,
                  doc["allreduce_calls_by_path"].dump().c_str());
    }
    return kExitOk;
  }

  int print(const std::vector<workload::GpuMemory>& need, const std::vector<workload::PhaseResult>& results) {
    if (o_.format == "json")
      std::printf("%s\n", tpDocument(o_, need, results, processArgv()).dump(2).c_str());
    else
      std::fputs(formatTpTable(o_, need, results).c_str(), stdout);
    return kExitOk;
  }

  CLI::App* sub_ = nullptr;
  TpOptions o_;
  std::string preset_ = "8b", dims_, split_ = "none", devices_;
  std::string logits_out_, force_tokens_, capture_dir_;
  int capture_rows_ = 0;
  std::vector<int> forced_;
  bool no_graph_ = false, no_roofline_ = false, estimate_only_ = false, profile_ = false;
};

}  // namespace

std::unique_ptr<Command> makeTpCommand(CLI::App& app) { return std::make_unique<TpCommand>(app); }

}  // namespace tpscope::cli
