"""Real log shapes, one line each, table-driven: the loss, the main throughput (name, value,
and whether it is a time per step read inversely) and the step each line gives.

Every line keeps the format its framework prints, byte for byte (separators, spacing, colour
escapes, logger headers); numbers were changed. SOURCE says which repository and function
prints it (or, for lines from tests/fixtures/logs, the fixture whose SOURCES.md entry says
where it is from). Each line is read both by the reference parser and by scan's templates.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from runward.agent import logmetrics as lm  # noqa: E402
from runward.agent.logmetrics.line import units  # noqa: E402

# Colours as torchtitan's Color (torchtitan/tools/utils.py) and Keras' Progbar print them.
RED, GREEN, BLUE, CYAN, MAGENTA, RESET = ("\x1b[31m", "\x1b[32m", "\x1b[34m", "\x1b[36m",
                                          "\x1b[35m", "\x1b[39m")
ORANGE, TURQUOISE = "\x1b[38;2;180;60;0m", "\x1b[38;2;54;234;195m"
BAR = "\u2501" * 20

# (framework, source, line, loss (name, value) | None, throughput (name, value, inverse) |
#  None, step (name, value) | None)
SHAPES = [
    ("torchtitan", "pytorch/torchtitan torchtitan/components/metrics.py MetricsProcessor.log;"
     " header: torchtitan/tools/logging.py init_logger; colours: tools/utils.py Color",
     "[titan] 2025-03-05 10:12:41,105 - root - INFO - " + RED + "step: 120  " + GREEN
     + "loss:  2.7521  " + ORANGE + "grad_norm:  0.4213  " + TURQUOISE
     + "memory: 31.72GiB(40.04%)  " + BLUE + "tps: 5,432  " + CYAN + "tflops: 301.55  "
     + MAGENTA + "mfu: 30.49%" + RESET,
     ("loss", 2.7521), ("tps", 5432, False), ("step", 120)),
    ("torchtitan, metrics.disable_color_printing",
     "pytorch/torchtitan torchtitan/components/metrics.py MetricsProcessor.log (NoColor)",
     "[titan] 2025-03-05 10:12:41,105 - root - INFO - step: 120  loss:  2.7521  "
     "grad_norm:  0.4213  memory: 31.72GiB(40.04%)  tps: 5,432  tflops: 301.55  mfu: 30.49%",
     ("loss", 2.7521), ("tps", 5432, False), ("step", 120)),
    ("torchtitan validation",
     "pytorch/torchtitan torchtitan/components/metrics.py MetricsProcessor.log_validation",
     "[titan] 2025-03-05 10:20:02,551 - root - INFO - validate step: 500  loss:  2.6108  "
     "memory: 35.10GiB(44.31%)  tps: 17,104",
     ("loss", 2.6108), ("tps", 17104, False), ("validate_step", 500)),
    ("Megatron-LM, --log-throughput",
     "NVIDIA/Megatron-LM megatron/training/training.py training_log",
     " [2025-08-01 07:19:50] iteration        2/    5000 | consumed samples:          256 | "
     "elapsed time per iteration (ms): 12936.1 | throughput per GPU (TFLOP/s/GPU): 118.7 | "
     "learning rate: 1.395349E-07 | global batch size:   128 | lm loss: 1.044022E+01 | "
     "loss scale: 1.0 | grad norm: 26.305 | number of skipped iterations:   0 | "
     "number of nan iterations:   0 |",
     ("lm_loss", 10.44022), ("throughput_per_gpu_tflop_s_gpu", 118.7, False),
     ("iteration", 2)),
    ("Megatron-LM", "NVIDIA/Megatron-LM megatron/training/training.py training_log",
     " [2025-08-01 07:19:50] iteration        2/    5000 | consumed samples:          256 | "
     "elapsed time per iteration (ms): 12936.1 | learning rate: 1.395349E-07 | "
     "global batch size:   128 | lm loss: 1.044022E+01 | loss scale: 1.0 | grad norm: 26.305 |"
     " number of skipped iterations:   0 | number of nan iterations:   0 |",
     ("lm_loss", 10.44022), ("elapsed_time_per_iteration_ms", 12936.1, True),
     ("iteration", 2)),
    ("Megatron-LM (before the timestamp)",
     "NVIDIA/Megatron-LM megatron/training.py training_log (issue 19's line)",
     " iteration      120/  500000 | consumed samples:       122880 | elapsed time per "
     "iteration (ms): 812.3 | learning rate: 1.500E-04 | global batch size:  1024 | lm loss: "
     "2.345678E+00 | loss scale: 1.0 | grad norm: 0.273 | number of skipped iterations:   0 | "
     "number of nan iterations:   0 |",
     ("lm_loss", 2.345678), ("elapsed_time_per_iteration_ms", 812.3, True),
     ("iteration", 120)),
    ("nanotron", "huggingface/nanotron src/nanotron/trainer.py train_step_logs; "
     "logging/base.py LoggerWriter.add_scalars_from_list, human_format, "
     "set_logger_verbosity_format",
     "\x1b[2;3m01/12 10:41:07 [INFO|DP=0|PP=0|TP=0|ip-26-0-161-138]\x1b[0m: iteration: 10 / "
     "100 | consumed_tokens: 655K | elapsed_time_per_iteration_ms: 1.53K | tokens_per_sec: "
     "428K | tokens_per_sec_per_gpu: 53.5K | global_batch_size: 160 | lm_loss: 10.1 | "
     "lr: 0.000285 | model_tflops_per_gpu: 12.3 | hardware_tflops_per_gpu: 12.3 | "
     "grad_norm: 2.31",
     ("lm_loss", 10.1), ("tokens_per_sec", 428000, False), ("iteration", 10)),
    ("LitGPT pretrain", "Lightning-AI/litgpt litgpt/pretrain.py fit (fabric.print)",
     "Epoch 1 | iter 100 step 25 | loss train: 2.345, val: n/a | iter time: 412.30 ms (step) "
     "remaining time: 1:23:45",
     ("loss_train", 2.345), ("iter_time_ms", 412.3, True), ("step", 25)),
    ("LitGPT validation", "Lightning-AI/litgpt litgpt/pretrain.py fit (validation print)",
     "iter 600: val loss 2.1432, val time: 3021.45 ms",
     ("val_loss", 2.1432), None, ("iter", 600)),
    ("Composer", "mosaicml/composer composer/loggers/console_logger.py "
     "ConsoleLogger.log_to_console", "\t Train loss/train/total: 2.3456",
     ("train_loss_train_total", 2.3456), None, None),
    ("Composer throughput", "mosaicml/composer composer/loggers/console_logger.py "
     "ConsoleLogger.log_to_console (SpeedMonitor's metrics)",
     "\t Train throughput/device/tokens_per_sec: 5120.3125",
     None, ("train_throughput_device_tokens_per_sec", 5120.3125, False), None),
    ("Composer throughput", "mosaicml/composer composer/loggers/console_logger.py "
     "ConsoleLogger.log_to_console (SpeedMonitor's metrics)",
     "\t Train throughput/samples_per_sec: 39.5000",
     None, ("train_throughput_samples_per_sec", 39.5, False), None),
    ("Keras 3, verbose=2", "keras-team/keras keras/src/utils/progbar.py Progbar.update "
     "(verbose == 2), _format_time",
     "1875/1875 - 3s - 2ms/step - accuracy: 0.8782 - loss: 0.4258",
     ("loss", 0.4258), ("ms_step", 2, True), None),
    ("Keras 3, verbose=1 into a file", "keras-team/keras keras/src/utils/progbar.py "
     "Progbar.update (verbose == 1, no dynamic display), _format_time",
     "\x1b[1m1875/1875\x1b[0m \x1b[32m" + BAR + "\x1b[0m\x1b[37m\x1b[0m \x1b[1m3s\x1b[0m "
     "1ms/step - accuracy: 0.8782 - loss: 0.4258",
     ("loss", 0.4258), ("ms_step", 1, True), None),
    ("NeMo 1.x (Lightning bar, TimingCallback)", "NVIDIA/NeMo exp_manager TimingCallback's "
     "`train_step_timing in s` on the Lightning bar, as printed in NVIDIA's DGX Cloud "
     "benchmarking recipe (Expected Performance)",
     "Epoch 0: : 100%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588| 50/50 "
     "[31:51<00:00, reduced_train_loss=6.130, global_step=50.0, consumed_samples=76800.0, "
     "train_step_timing in s=5.900, val_loss=6.250]",
     ("reduced_train_loss", 6.13), ("train_step_timing_in_s", 5.9, True),
     ("global_step", 50)),
    ("NeMo (Lightning bar)", "fixture nemo_nccl_timeout.log (pytorch/pytorch#118369)",
     "Epoch 0:   6%|\u2588\u2588        | 32040/500150 [6:28:43<94:39:17,  1.74it/s, "
     "loss=2.98, v_num=95nc, reduced_train_loss=2.527, global_step=3.2e+4, "
     "consumed_samples=2.93e+7]",
     ("loss", 2.98), ("it_s", 1.74, False), ("global_step", 32000)),
    ("torchtune", "pytorch/torchtune torchtune/training/metric_logging.py "
     "StdoutLogger.log_dict",
     "Step 120 | loss:1.2345 lr:2e-05 tokens_per_second_per_gpu:1534.2 ",
     ("loss", 1.2345), ("tokens_per_second_per_gpu", 1534.2, False), ("step", 120)),
    ("llm.c", "karpathy/llm.c train_gpt2.cu main (printf0 of each step)",
     "step   10/74 | loss 8.736542 (-1.32z)| norm 3.1236 (-0.78z)| lr 6.00e-05 | "
     "1254.28 ms | 418 tok/s",
     ("loss", 8.736542), ("tok_s", 418, False), ("step", 10)),
    ("llm.c, first steps", "karpathy/llm.c train_gpt2.cu main (z-scores are nan at first)",
     "step    2/74 | loss 10.944567 (+nanz)| norm 13.6130 (+nanz)| lr 1.20e-05 | 1261.64 ms |"
     " 416 tok/s",
     ("loss", 10.944567), ("tok_s", 416, False), ("step", 2)),
    ("Hugging Face Trainer", "fixture hf_trainer.log (huggingface/transformers#14531)",
     "{'loss': 0.6931, 'grad_norm': 2.4117, 'learning_rate': 4.855e-05, 'epoch': 0.09}",
     ("loss", 0.6931), None, None),
    ("Hugging Face Trainer tqdm", "fixture hf_trainer.log",
     "  3%|\u258e         | 10/345 [00:04<02:31,  2.21it/s]",
     None, ("it_s", 2.21, False), None),
    ("Hugging Face Trainer eval", "fixture hf_trainer.log (huggingface/transformers#11818)",
     "{'eval_loss': 0.5873, 'eval_runtime': 3.1042, 'eval_samples_per_second': 131.43, "
     "'eval_steps_per_second': 16.43, 'epoch': 1.0}",
     ("eval_loss", 0.5873), ("eval_samples_per_second", 131.43, False), None),
    ("Hugging Face Trainer end", "fixture hf_trainer.log (huggingface/transformers#11818)",
     "{'train_runtime': 160.2271, 'train_samples_per_second': 68.676, "
     "'train_steps_per_second': 2.153, 'train_loss': 0.4815, 'epoch': 3.0}",
     ("train_loss", 0.4815), ("train_samples_per_second", 68.676, False), None),
    ("Hugging Face Trainer (logging)", "fixture hf_trainer_tf.log "
     "(huggingface/transformers#9613)",
     "[INFO|trainer_tf.py:398] 2021-01-15 10:28:50,371 >> {'loss': 0.6412, 'learning_rate': "
     "4.89e-05, 'epoch': 0.087, 'step': 10}",
     ("loss", 0.6412), None, ("step", 10)),
    ("PyTorch Lightning, s/it", "fixture lightning_progress.log "
     "(Lightning-AI/pytorch-lightning#4225)",
     "Epoch 0:   6%|\u258c         | 1/18 [00:08<02:29,  8.14s/it, loss=10.78, v_num=7]",
     ("loss", 10.78), ("it_s", 1 / 8.14, False), None),
    ("PyTorch Lightning, it/s", "fixture lightning_progress.log",
     "Epoch 1:  39%|\u2588\u2588\u2588\u2588\u2588\u258d    | 4846/12331 [05:59<09:15, "
     "13.84it/s, loss=0.0173, v_num=1]",
     ("loss", 0.0173), ("it_s", 13.84, False), None),
    ("DeepSpeed engine", "fixture deepspeed.log (deepspeedai/DeepSpeed#1825)",
     "[2022-03-11 02:06:58,985] [INFO] [logging.py:69:log_dist] [Rank 0] step=40, skipped=2, "
     "lr=[5e-05], mom=[[0.9, 0.936]]",
     None, None, ("step", 40)),
    ("DeepSpeed ThroughputTimer", "fixture deepspeed.log (deepspeedai/DeepSpeed#1825)",
     "[2022-03-11 02:06:58,985] [INFO] [timer.py:189:stop] 0/40, SamplesPerSec=83.88, "
     "MemAllocated=0.63GB, MaxMemAllocated=9.39GB",
     None, ("samplespersec", 83.88, False), None),
    ("Megatron-DeepSpeed timer", "fixture deepspeed_megatron.log "
     "(deepspeedai/DeepSpeed#3742)",
     "[2023-07-25 21:03:17,269] [INFO] [timer.py:215:stop] epoch=0/micro_step=34/"
     "global_step=34, RunningAvgSamplesPerSec=7.801, CurrSamplesPerSec=8.046, "
     "MemAllocated=59.02GB, MaxMemAllocated=63.68GB",
     None, ("currsamplespersec", 8.046, False), ("step", 34)),
    ("Megatron-DeepSpeed", "fixture deepspeed_megatron.log (deepspeedai/DeepSpeed#3742)",
     " samples/sec: 7.736 | iteration       34/   10000 | elapsed time per iteration (ms): "
     "4103.1 | learning rate: 2.148E-06 | approx flops per GPU: 112.9TFLOPS | lm_loss: "
     "1.118602E+01 | number of skipped iterations:   0 | number of nan iterations:   0 |",
     ("lm_loss", 11.18602), ("samples_sec", 7.736, False), ("iteration", 34)),
    ("Megatron-DeepSpeed (BLOOM)", "fixture megatron_ds_nan.log "
     "(bigscience-workshop/Megatron-DeepSpeed#396)",
     " iteration     5426/  250000 | consumed samples:        43408 | consumed tokens:     "
     "88899584 | elapsed time per iteration (ms): 4247.9 | learning rate: 2.936E-04 | global "
     "batch size:     8 | loss scale: 1.0 | grad norm: nan | actual seqlen:  2048 | number of "
     "skipped iterations:   0 | number of nan iterations:   0 | samples per second: 1.820 | "
     "TFLOPs: 78.73 |",
     None, ("samples_per_second", 1.82, False), ("iteration", 5426)),
    ("vLLM V0", "fixture vllm_v0.log (vllm-project/vllm#12314)",
     "INFO 01-22 18:27:20 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation "
     "throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV "
     "cache usage: 2.0%, CPU KV cache usage: 0.0%.",
     None, ("avg_generation_throughput", 41.7, False), None),
    ("vLLM V1", "fixture vllm_v1.log (vllm-project/vllm#43295)",
     "(APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt "
     "throughput: 0.0 tokens/s, Avg generation throughput: 1055.3 tokens/s, Running: 18 reqs, "
     "Waiting: 43 reqs, GPU KV cache usage: 95.9%, Prefix cache hit rate: 0.0%",
     None, ("avg_generation_throughput", 1055.3, False), None),
    ("nanoGPT", "fixture nanogpt.log (karpathy/nanoGPT#178)",
     "iter 10: loss 3.2239, time 893.13ms, mfu 16.05%",
     ("loss", 3.2239), None, ("iter", 10)),
    ("nanoGPT evaluation", "fixture nanogpt.log (karpathy/nanoGPT#178)",
     "step 250: train loss 1.5477, val loss 1.7257",
     ("train_loss", 1.5477), None, ("step", 250)),
    ("fairseq <= 0.9", "fixture fairseq_legacy.log (facebookresearch/fairseq#940)",
     "| epoch 001:    450 / 1891 loss=11.558, nll_loss=10.818, ppl=1886.42, wps=52922, "
     "ups=0.5, wpb=104928, bsz=5325, num_updates=445, lr=8.90826e-05, gnorm=1.580, clip=0%, "
     "oom=0, loss_scale=2.037, wall=882, train_wall=756",
     ("loss", 11.558), ("wps", 52922, False), ("num_updates", 445)),
    ("fairseq <= 0.9, epoch", "fixture fairseq_legacy.log (facebookresearch/fairseq#514)",
     "| epoch 008 | loss 6.363 | nll_loss 5.130 | ppl 36.95 | wps 12876 | ups 4.9 | wpb 2578 | "
     "bsz 108 | num_updates 21896 | lr 0.000213743 | gnorm 1.238 | clip 0% | oom 0 | wall 4634 "
     "| train_wall 4309",
     ("loss", 6.363), ("wps", 12876, False), ("num_updates", 21896)),
    ("fairseq (hydra)", "fixture fairseq_hydra.log (facebookresearch/fairseq#1967)",
     "2020-04-05 18:52:01 | INFO | train_inner | epoch 001:    100 / 487 loss=4.655, "
     "nll_loss=3.912, ppl=15.05, wps=11873.2, ups=3.41, wpb=3481.5, bsz=128, num_updates=100, "
     "lr=1.25e-05, gnorm=1.802, train_wall=29, gb_free=10.1, wall=40",
     ("loss", 4.655), ("wps", 11873.2, False), ("num_updates", 100)),
    ("fairseq --log-format json", "fixture fairseq_json.log (facebookresearch/fairseq#233)",
     '{"epoch": 25, "loss": "3.034", "nll_loss": "1.365", "ppl": "2.88", "wps": 1667443, '
     '"ups": "2.7", "wpb": 617156, "bsz": 16626, "num_updates": 53749, "lr": '
     '0.00019096019143386802, "gnorm": "0.131", "clip": "100%", "oom": 0.063, '
     '"loss_scale": "4.037", "wall": 20721}',
     ("loss", 3.034), ("wps", 1667443, False), ("num_updates", 53749)),
    ("timm", "fixture timm.log (huggingface/pytorch-image-models train.py)",
     "Train: 0 [  50/1251 (  4%)]  Loss: 6.9304 (6.93)  Time: 0.392s, 2612.24/s  "
     "(0.470s, 2178.72/s)  LR: 1.000e-06  Data: 0.012 (0.072)",
     ("loss", 6.9304), ("rate", 2612.24, False), None),
    ("timm validate", "fixture timm.log (huggingface/pytorch-image-models validate)",
     "Test: [   0/48]  Time: 2.245 (2.245)  Loss:  6.8770 (6.8770)  Acc@1:  0.1953 ( 0.1953)"
     "  Acc@5:  0.8789 ( 0.8789)",
     ("loss", 6.877), None, None),
    ("Accelerate nlp_example", "fixture accelerate.log (huggingface/accelerate "
     "examples/nlp_example.py)",
     "epoch 0: {'accuracy': 0.6838235294117647, 'f1': 0.8122270742358079}",
     None, None, None),
    ("DGL GraphSAGE", "fixture graphsage.log (SijingYu/GraphSAGE_MultiGPU)",
     "Epoch 00000 | Step 00020 | Loss 2.6687 | Train Acc 0.3437 | Speed (samples/sec) "
     "43672.9695 | GPU 401.2 MB",
     ("loss", 2.6687), ("speed_samples_sec", 43672.9695, False), ("step", 20)),
    ("Axolotl", "axolotl-ai-cloud/axolotl src/axolotl/core/trainers/base.py "
     "AxolotlTrainer.log (memory keys; line as in axolotl issue #3196)",
     "{'loss': 0.8984, 'grad_norm': 45.0, 'learning_rate': 4.828728948150395e-06, "
     "'memory/max_mem_active(gib)': 34.89, 'memory/max_mem_allocated(gib)': 34.89, "
     "'memory/device_mem_reserved(gib)': 41.26, 'epoch': 3.0}",
     ("loss", 0.8984), None, ("epoch", 3.0)),
    ("Axolotl, include_tkps", "axolotl-ai-cloud/axolotl src/axolotl/core/trainers/base.py "
     "AxolotlTrainer.log (PR #3072: tokens_per_second_per_gpu, memory/... (GiB))",
     "{'loss': 1.2031, 'grad_norm': 0.5625, 'learning_rate': 1.9e-05, "
     "'memory/max_active (GiB)': 12.41, 'memory/max_allocated (GiB)': 12.41, "
     "'memory/device_reserved (GiB)': 14.2, 'tokens_per_second_per_gpu': 5321.4, "
     "'epoch': 0.12}",
     ("loss", 1.2031), ("tokens_per_second_per_gpu", 5321.4, False), ("epoch", 0.12)),
    ("Axolotl, token metrics", "axolotl-ai-cloud/axolotl src/axolotl/utils/callbacks/"
     "tokens_per_second.py (PR #3293/#3344 names: tokens/train_per_sec_per_gpu, tokens/total,"
     " tokens/trainable)",
     "{'loss': 1.1062, 'grad_norm': 0.4412, 'learning_rate': 1.8e-05, 'ppl': 3.0227, "
     "'memory/max_active (GiB)': 12.41, 'memory/max_allocated (GiB)': 12.41, "
     "'memory/device_reserved (GiB)': 14.2, 'tokens/train_per_sec_per_gpu': 8512.3, "
     "'tokens/total': 2097152, 'tokens/trainable': 1734211, 'epoch': 0.25}",
     ("loss", 1.1062), ("tokens_train_per_sec_per_gpu", 8512.3, False), ("epoch", 0.25)),
    ("a plain training script", "fixture cuda_oom.log",
     "step 118 loss 2.3447 tok/s 14488.0 lr 3.0e-04",
     ("loss", 2.3447), ("tok_s", 14488, False), ("step", 118)),
]


def test_the_table_covers_enough_real_shapes():
    assert len(SHAPES) >= 40
    assert len(set(s[2] for s in SHAPES)) == len(SHAPES)
    frameworks = " ".join(s[0] for s in SHAPES)
    for name in ("torchtitan", "Megatron-LM", "NeMo", "Composer", "LitGPT", "nanotron",
                 "Keras", "fairseq", "timm", "Hugging Face Trainer", "Lightning", "DeepSpeed",
                 "Accelerate", "nanoGPT", "torchtune", "vLLM", "Axolotl"):
        assert name in frameworks, name


def _metrics(line):
    m = lm.TS_RE.match(line)
    return lm.parse_line(line[m.end():] if m else line)


def _scanned(line, tmp_path):
    log = tmp_path / "shape.log"
    log.write_bytes(line.encode("utf-8") + b"\n")
    res = lm.scan(str(log), {}, {}, 0.0)
    assert len(res["points"]) <= 1
    return res["points"][0]["metrics"] if res["points"] else {}


@pytest.mark.parametrize("framework, source, line, loss, tp, step", SHAPES,
                         ids=["%02d-%s" % (i, s[0]) for i, s in enumerate(SHAPES)])
def test_shape(framework, source, line, loss, tp, step, tmp_path):
    got = _metrics(line)
    assert _scanned(line, tmp_path) == {k: lm.json_value(v) for k, v in got.items()}
    names = list(got)
    losses = [n for n in names if lm.is_loss(n)]
    if loss is None:
        assert losses == [], got
    else:
        assert losses[0] == loss[0], got
        assert got[loss[0]] == pytest.approx(loss[1])
    main = lm.throughput_metric(names)
    if tp is None:
        assert main is None, got
    else:
        assert main == tp[0], got
        assert got[main] == pytest.approx(tp[1])
        assert lm.is_inverse(main) is tp[2]
    if step is not None:
        assert got[step[0]] == pytest.approx(step[1]), got


def test_torchtitan_keeps_memory_with_its_units():
    line = SHAPES[0][2]
    got, u = _metrics(line), units(line[lm.TS_RE.match(line).end():])
    assert got["memory"] == pytest.approx(31.72) and u["memory"] == "GiB"
    assert got["memory_pct"] == pytest.approx(40.04) and u["memory_pct"] == "%"
    assert got["mfu"] == pytest.approx(30.49) and u["mfu"] == "%"
    assert got["tflops"] == pytest.approx(301.55) and got["grad_norm"] == pytest.approx(0.4213)


def test_units_of_times_and_bytes():
    assert units(" iteration 2/ 5 | elapsed time per iteration (ms): 812.3 |")[
        "elapsed_time_per_iteration_ms"] == "ms"
    assert units("Epoch 1 | iter 100 step 25 | iter time: 412.30 ms")["iter_time_ms"] == "ms"
    assert units("MemAllocated=0.63GB")["memallocated"] == "B"  # scaled to bytes
    assert lm.parse_line("MemAllocated=0.63GB")["memallocated"] == pytest.approx(0.63e9)
    assert lm.parse_line("consumed_tokens: 1.2B")["consumed_tokens"] == pytest.approx(1.2e9)


@pytest.mark.parametrize("name, inverse", [
    ("tps", False), ("tok_s", False), ("tokens_s", False), ("tokens_per_sec", False),
    ("tokens_per_second", False), ("samples_s", False), ("samples_per_second", False),
    ("it_s", False), ("img_s", False), ("images_sec", False), ("throughput", False),
    ("elapsed_time_per_iteration_ms", True), ("step_time", True), ("s_it", True),
    ("time_iter", True), ("iter_time_ms", True), ("ms_step", True),
    ("tokens_train_per_sec_per_gpu", False),
    ("train_step_timing_in_s", True),
])
def test_throughput_spellings(name, inverse):
    assert lm.is_throughput(name) and lm.is_inverse(name) is inverse


@pytest.mark.parametrize("name", ["time", "train_time_batch", "remaining_time", "data_time",
                                  "epoch_time_s", "learning_rate", "consumed_tokens",
                                  "tokens_total", "tokens_trainable"])
def test_not_throughputs(name):
    assert not lm.is_throughput(name)


def test_a_time_per_step_reads_inversely_for_floors_and_drops(tmp_path):
    """Megatron without --log-throughput: the time per iteration going up is the throughput
    going down. The floor on `throughput` is in steps per second; a rule on the metric's own
    name reads its own value."""
    fmt = (" [2025-08-01 07:19:%02d] iteration %8d/    5000 | consumed samples: %12d | "
           "elapsed time per iteration (ms): %.1f | learning rate: 1.395349E-07 | global batch "
           "size:   128 | lm loss: 1.044022E+01 | loss scale: 1.0 | grad norm: 26.305 | number "
           "of skipped iterations:   0 | number of nan iterations:   0 |\n")
    log = tmp_path / "megatron.log"
    log.write_text("".join(fmt % (i % 60, i, i * 128, 800.0 if i < 20 else 2000.0)
                           for i in range(1, 30)))
    res = lm.scan(str(log), {}, {"min": {"throughput": 1.0}}, 0.0)
    floor, drop = res["alerts"]
    assert (floor["kind"], floor["line_no"]) == ("below_min", 20)
    assert floor["metric"] == "elapsed_time_per_iteration_ms" and floor["value"] == 2000.0
    assert floor["inverse"] is True and floor["rate"] == pytest.approx(0.5)
    assert (drop["kind"], drop["line_no"]) == ("drop", 22)
    assert drop["inverse"] is True and drop["median"] == pytest.approx(1.25)
    assert res["units"]["elapsed_time_per_iteration_ms"] == "ms"
    # A floor met: 800 ms is 1.25 steps/s.
    assert lm.scan(str(log), {}, {"min": {"throughput": 1.2}, "drop_fraction": 0},
                   0.0)["alerts"][0]["line_no"] == 20
    assert lm.scan(str(log), {}, {"min": {"throughput": 0.4}, "drop_fraction": 0},
                   0.0)["alerts"] == []
    # Its own name: the value as printed.
    own = lm.scan(str(log), {}, {"max": {"elapsed_time_per_iteration_ms": 1000},
                                 "drop_fraction": 0}, 0.0)["alerts"]
    assert [(a["kind"], a["line_no"], a.get("inverse")) for a in own] == [
        ("above_max", 20, None)]
    assert math.isclose(lm.inverse_rate("elapsed_time_per_iteration_ms", 800.0), 1.25)


SLURM_LINES = [
    "slurmstepd: error: *** JOB 4242 ON node1 CANCELLED AT 2026-12-03T10:00:00 ***",
    "slurmstepd-node1: error: *** STEP 4242.0 ON node1 CANCELLED AT 2026-12-03T10:00:00 DUE TO TIME LIMIT ***",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "srun: error: node1: task 0: Exited with exit code 1",
]


@pytest.mark.parametrize("line", SLURM_LINES)
def test_the_batch_systems_own_lines_are_no_metrics(line, tmp_path):
    # "*** STEP 4242.0 ..." read as step=4242 would move the run's step back and forth
    assert lm.parse_line(line) == {} and _scanned(line, tmp_path) == {}


def test_a_slurm_cancel_line_leaves_the_runs_step_alone(tmp_path):
    log = tmp_path / "slurm.log"
    log.write_text("".join(f"step {i} loss={1.0 / i:.4f}\n" for i in range(1, 40)) + SLURM_LINES[1] + "\n")
    res = lm.scan(str(log), {}, {}, 0.0)
    steps = [p["metrics"].get("step") for p in res["points"]]
    assert steps and max(steps) == 39 and 4242 not in steps, steps
