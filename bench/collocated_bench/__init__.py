"""Collocated training end to end: N trainer processes on one machine (and
one GPU with --device cuda), each with its own DataLoader, or all fed by one
shared pipeline.

One run makes (or reuses) a synthetic ImageNet-like JPEG dataset in
ImageFolder layout, then, for every model, mode and N, starts N trainer
processes that train a real model (the small CNN, or a timm model such as
resnet18, resnet50 or mobilenetv3_large_100; or sleep a fixed emulated
accelerator step, --step-ms) on the same torchvision transform pipeline
(RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize):

  independent       each trainer has its own torch DataLoader (--workers each)
  shared-python     one batchcast.Producer wrapping that DataLoader, N batchcast.Consumers
  shared-native     `batchcast serve` (the native Rust pipeline), N batchcast.Consumers
  tensorsocket      TensorSocket 0.0.5 (TensorProducer over the DataLoader, N TensorConsumers),
                    its producer kept off the GPU: batches in CPU shared memory
  tensorsocket-gpu  the same as its README sets it up on a GPU machine: the producer moves
                    every batch to the GPU, the trainers get CUDA tensors by CUDA IPC
  ceiling           no loading at all: each trainer trains on one batch already on its
                    device, the model's own limit

and prints, per model, mode and N: aggregate and per-trainer samples/s, the
share of the trainers' time spent waiting for data, CPU cores used and CPU
seconds per 1,000 samples (all processes of the mode), peak memory, the GPU's
utilisation, SM activity and memory (null without a GPU), the speedup
against `independent` and the share of `ceiling` at the same N, and whether
every trainer got every sample exactly once. A mode that fails or hangs is
reported with its error (a hang is cut short by --stall-timeout); the run
never hangs. --repeats interleaves repeated runs and reports medians;
--budget skips what would not fit; the JSON is written after every run.
Every cell is run by `batchcast run` into a run store (--store), which
`batchcast ui --store PATH` opens; the report's last line names it.

    python bench/collocated.py                          # real CPU model, N = 1,2,4
    python bench/collocated.py --step-ms 40             # emulated accelerator (loading-bound)
    python bench/collocated.py --device cuda --model resnet18,mobilenetv3_large_100 --budget 290
    python bench/collocated.py --json results.json      # the figures as JSON too

Needs torch, torchvision, pillow and numpy (timm for its models); batchcast
for the shared modes (its `batchcast` binary for shared-native:
--batchcast-bin, $BATCHCAST_BIN, target/release/batchcast or PATH);
tensorsocket==0.0.5 for its modes. See bench/README.md for what each column
means and how CPU, memory and the GPU are counted.
"""
# The runner, one concept per module (the entry script is bench/collocated.py,
# which the child processes re-run with --role). Every cell is a workload of
# `batchcast run` (batchcast._experiment.run_plan), recorded in a run store:
#
#   options.py    the command line
#   plan.py       the runs in priority order, the worker split, the --budget
#   preflight.py  checks before anything starts (CUDA, models) and the versions
#   dataset.py    the synthetic ImageFolder dataset, made once and cached
#   training.py   the model, the training step, the ceiling's resident batch
#   roles.py      the child processes: trainer, Python producer, TensorSocket producer
#   native.py     finding `batchcast` and its `serve` command line
#   cells.py      one run of a (model, mode, N) cell: its plan, its watch, its figures
#   recorded.py   a cell's CPU, memory and GPU figures, from the run store
#   summary.py    a cell's repeats summed up (medians)
#   report.py     speedups, targets, the tables, the setup line and the JSON document
#   run.py        the whole run: main()

from .cells import CELL_FIELDS, blank_cell, run_cell
from .native import find_batchcast_bin
from .options import MODES, SHARED_MODES, parse_args
from .plan import Budget, Run, plan_runs
from .report import add_speedups, evaluate_targets, format_table
from .run import main
from .summary import summarize

__all__ = [
    "Budget", "CELL_FIELDS", "MODES", "Run", "SHARED_MODES", "add_speedups", "blank_cell",
    "evaluate_targets", "find_batchcast_bin", "format_table", "main", "parse_args", "plan_runs",
    "run_cell", "summarize",
]
