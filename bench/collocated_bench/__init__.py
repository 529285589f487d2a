"""Collocated training end to end: N trainer processes on one machine, each
with its own DataLoader, or all fed by one shared pipeline.

One run makes (or reuses) a synthetic ImageNet-like JPEG dataset in
ImageFolder layout, then, for every mode and every N, starts N trainer
processes that train a small real PyTorch CNN (or sleep a fixed emulated
accelerator step, --step-ms) on the same torchvision transform pipeline
(RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize):

  independent    each trainer has its own torch DataLoader (--workers each)
  shared-python  one batchcast.Producer wrapping that DataLoader, N batchcast.Consumers
  shared-native  `batchcast serve` (the native Rust pipeline), N batchcast.Consumers
  tensorsocket   TensorSocket 0.0.5 (TensorProducer over the DataLoader, N TensorConsumers)

and prints, per mode and N: aggregate and per-trainer samples/s, the share of
the trainers' time spent waiting for data, total CPU seconds per 1,000 samples
(all processes of the mode), peak memory, and the speedup against
`independent` at the same N. A mode that fails or hangs is reported with its
error (a hang is cut short by --stall-timeout); the run never hangs.

    python bench/collocated.py                          # real CPU model, N = 1,2,4, all modes
    python bench/collocated.py --step-ms 40             # emulated accelerator (loading-bound)
    python bench/collocated.py --device cuda --model resnet50 --workers 8 --images 20000
    python bench/collocated.py --json results.json      # the figures as JSON too

Needs torch, torchvision, pillow and numpy; batchcast for the shared modes
(its `batchcast` binary for shared-native: --batchcast-bin, $BATCHCAST_BIN,
target/release/batchcast or PATH); tensorsocket==0.0.5 for its mode. See
bench/README.md for what each column means and how CPU and memory are counted.
"""
# The runner, one concept per module (the entry script is bench/collocated.py,
# which the child processes re-run with --role):
#
#   options.py    the command line
#   dataset.py    the synthetic ImageFolder dataset, made once and cached
#   protocol.py   the lines a child process and the runner exchange
#   roles.py      the child processes: trainer, Python producer, TensorSocket producer
#   procfs.py     reading /proc: the process tree, status fields, shared-memory maps
#   measure.py    CPU and memory accounting (the memory sampler)
#   supervise.py  starting, watching (stalls, time limits), stopping and reaping children
#   native.py     finding `batchcast` and its `serve` command line
#   cells.py      one (mode, N) cell: its processes and its figures
#   report.py     speedups, targets, the table, the setup line and the JSON document
#   run.py        the whole run: main()

from .cells import CELL_FIELDS, blank_cell, run_cell
from .run import main
from .native import find_batchcast_bin
from .options import MODES, SHARED_MODES, parse_args
from .report import add_speedups, evaluate_targets, format_table

__all__ = [
    "CELL_FIELDS", "MODES", "SHARED_MODES", "add_speedups", "blank_cell", "evaluate_targets",
    "find_batchcast_bin", "format_table", "main", "parse_args", "run_cell",
]
