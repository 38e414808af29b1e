# The training script's schedule ends its decay at the wall-clock budget, and its streamed data plans every generated
# conversation exactly once per pass, in batches within the token budget, repeating passes once generation is done.
import argparse
import random

from demo_model import train


def schedule(**overrides):
    values = dict(lr=2e-3, warmup=100, steps=100_000, max_seconds=400.0) | overrides
    return argparse.Namespace(**values)


def test_learning_rate_warms_up_then_decays_by_wall_clock():
    args = schedule()
    assert train.lr_at(args, 0, 0.0) == 2e-3 / 100
    assert train.lr_at(args, 99, 1.0) == 2e-3
    assert abs(train.lr_at(args, 500, 200.0) - 2e-3 * 0.55) < 1e-9  # half the budget: half-way down the cosine
    assert abs(train.lr_at(args, 501, 400.0) - 2e-4) < 1e-12  # budget spent: 10% of peak, whatever the step
    assert abs(train.lr_at(schedule(steps=1100), 1100, 1.0) - 2e-4) < 1e-12  # or the step limit, if reached first


def test_streamed_data_covers_each_conversation_once_per_pass():
    stream = train.StreamedData(seed=3, conversations=60, max_len=1024, workers=1, tokens_per_batch=2048,
                                rng=random.Random(0))
    try:
        seen = []
        while True:
            batch = stream.next_batch()
            if stream.epochs:  # the first batch of the second pass
                break
            assert len(batch) == 1 or max(len(stream.rows[i][0]) for i in batch) * len(batch) <= 2048
            seen += batch
        assert sorted(seen) == list(range(len(stream.rows))) and 50 <= len(stream.rows) <= 60
        assert all(trained.any() for _, trained in stream.rows)
    finally:
        stream.close()
