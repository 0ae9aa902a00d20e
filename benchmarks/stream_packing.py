"""How packing a streamed dataset grows with a document's length (trainer/stream.py,
pack_windows) against the packing it replaced (each window cut off the front of the
buffer: every cut moved the rest of the document), on one long document at sizes
spanning 16x, measured in the same run. The growth exponent is the slope of log(time)
over log(tokens): 1 is linear, 2 quadratic."""

from __future__ import annotations

import random
import sys
import timeit
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._growth import growth_exponent  # noqa: E402
from trainer.stream import Window, pack_windows  # noqa: E402

QUICK = "--quick" in sys.argv  # the test suite runs it: smaller sizes, one round
# Past the CPU caches from the first size on (below, the first step of each curve is
# cache, not algorithm).
SIZES = (100_000, 400_000, 1_600_000) if QUICK else (200_000, 800_000, 3_200_000)
ROUNDS = 1 if QUICK else 3
WINDOW = 2049  # seq_len 2048 + 1


def cut_from_the_front(encoded: Iterator[Window], window: int) -> Iterator[Window]:
    """The packing before: `del ids[:window]` on the whole buffer per window."""
    ids: list[int] = []
    for doc_ids, _ in encoded:
        ids += doc_ids
        while len(ids) >= window:
            yield ids[:window], None
            del ids[:window]


def seconds(pack: Callable[[Iterator[Window], int], Iterator[Window]], doc: list[int]) -> float:
    """Per pass over the document: as many passes as take 0.2 s, the best of ROUNDS."""
    timer = timeit.Timer(lambda: sum(1 for _ in pack(iter([(doc, None)]), WINDOW)))
    number, _ = timer.autorange()
    return min(timer.repeat(ROUNDS, number)) / number


def main() -> None:
    rng = random.Random(0)
    now, before = [], []
    for size in SIZES:
        doc = [rng.randrange(128_000) for _ in range(size)]
        now.append(seconds(pack_windows, doc))
        before.append(seconds(cut_from_the_front, doc))
        print(f"{size:>9,} tokens: now {now[-1] * 1e3:8.1f} ms, before "
              f"{before[-1] * 1e3:8.1f} ms ({before[-1] / now[-1]:.1f}x)")  # fmt: skip
    k_now, k_before = growth_exponent(SIZES, now), growth_exponent(SIZES, before)
    print(f"growth exponent over {SIZES[-1] // SIZES[0]}x tokens: now {k_now:.2f}, "
          f"before {k_before:.2f} (1 linear, 2 quadratic; best of {ROUNDS})")  # fmt: skip


if __name__ == "__main__":
    main()
