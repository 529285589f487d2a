"""Data-stall analysis of a training script (``batchcast stalls``).

A script marks its training loader once::

    loader = batchcast.stalls.mark(loader)

which returns the loader unchanged in normal runs. ``batchcast stalls --
python train.py ARGS`` runs the script in a few controlled modes, each in a
fresh process (synthetic: one cached batch over and over; cold: the
dataset's files evicted from the page cache; warm: the files cached;
with ``--jobs``, loader: the loader alone, as a shared producer runs it) and
derives the fetch stall (cold - warm), the prep stall (warm - synthetic),
with ``--nproc K`` the communication stall of K data-parallel processes,
and what one shared batchcast producer would buy N collocated copies.
The method is DS-Analyzer's (Mohan et al., VLDB 2021) and Stash's.
"""

from ._analysis import (
    ModeFigures,
    Prediction,
    Stall,
    classify,
    figures,
    percentile,
    predict,
    stalls,
    verdict,
)
from ._mark import mark
from ._runner import StallsError
from ._session import Options, analyse

__all__ = [
    "mark",
    "analyse",
    "Options",
    "StallsError",
    "ModeFigures",
    "Prediction",
    "Stall",
    "classify",
    "figures",
    "percentile",
    "predict",
    "stalls",
    "verdict",
]
