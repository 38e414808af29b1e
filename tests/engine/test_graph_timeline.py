"""tests/gpu/graph_timeline.py's arithmetic (what each kernel adds to a pass, the gaps, a resident kernel kept apart),
on a trace written by a stand-in for the engine in the CUPTI tracer's CSV format: the GPU run itself needs the lent
machine, this checks the analysis that turns its trace into a table."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "tests", "gpu", "graph_timeline.py")

# 30 passes: the embedding (2 µs), 1 µs of nothing, then 3 layers of hr_down (8 µs) and hr_mix (7 µs, starting 1 µs
# before hr_down ends: a dependent launch), 5 µs of host time after each pass (a 1 µs copy of the choice to the host,
# then the next pass's 2 µs graph launch); a prefetch worker resident per pass.
FAKE_ENGINE = r'''#!/usr/bin/env python3
import os, sys
serve = "--serve" in sys.argv   # as the engine: READY, then the request, then QUIT after DONE
if serve:
    print("INFO version=0.1.0", flush=True)
    print("READY", flush=True)
    gen = sys.stdin.readline().split()
    assert gen[0] == "GEN" and gen[1] == "160" and len(gen[-1].split(",")) == 16, gen
else:
    assert sys.argv[1] == "generate", sys.argv
with open(os.environ["STRATA_KERNEL_TRACE_OUT"], "w") as f:
    f.write("start_ns,end_ns,stream,graph_node,name\n")
    t = 0
    for p in range(30):
        f.write(f"{t + 500},{t + 40000},9,0,void (anonymous namespace)::prefetch_worker_kernel(PrefetchWorkerArgs)\n")
        f.write(f"{t},{t + 2000},7,1,void dequant_rows_kernel<FmtQ4_K>(unsigned char const*; int)\n")
        t += 3000
        for layer in range(3):
            f.write(f"{t},{t + 8000},7,2,void (anonymous namespace)::hr_down_kernel<FmtQ2_0; 32>(float const*)\n")
            f.write(f"{t + 7000},{t + 14000},7,3,void hr_mix_kernel<FmtQ2_0; 1; 0>(float const*)\n")
            t += 15000
        f.write(f"{t - 500},{t + 500},7,0,[memcpy DtoH] 4\n")
        t += 5000
        f.write(f"{t - 3000},{t - 1000},4294967295,0,[api] cudaGraphLaunch\n")
if serve:
    print("DONE 160 stop=length", flush=True)
    assert sys.stdin.readline().strip() == "QUIT"
print("kernel_trace: 330 kernels and 60 copies, fills and runtime calls written, 0 records dropped", file=sys.stderr)
'''


@pytest.mark.parametrize("driver", [[], ["--generate"]])
def test_timeline_of_a_written_trace(tmp_path, driver):
    engine = tmp_path / "strata"
    engine.write_text(FAKE_ENGINE)
    engine.chmod(0o755)
    tracer = tmp_path / "libstrata_kernel_trace.so"
    tracer.write_bytes(b"")
    out = tmp_path / "timeline.json"
    p = subprocess.run([sys.executable, SCRIPT, "--strata", str(engine), "--model", "syn.gguf", "--out", str(out),
                        "--tracer", str(tracer), "--skip", "5"] + driver, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr + p.stdout
    res = json.loads(out.read_text())
    assert res["passes"] == 24   # 30 found, 5 skipped, the last left out (it may be cut)
    assert res["kernels_per_pass"] == 7
    assert res["pass_us"] == 47.0 and res["busy_us"] == 44.0 and res["gap_us"] == 3.0 and res["step_us"] == 53.0
    rows = {r["kernel"]: r for r in res["table"]}
    assert set(rows) == {"dequant_rows_kernel", "hr_down_kernel", "hr_mix_kernel"}
    assert rows["hr_down_kernel"]["added_us_per_call"] == 8.0 and rows["hr_down_kernel"]["gap_before_us"] == 3.0
    # hr_mix ran 7 µs but added 6: its first µs overlapped hr_down
    assert rows["hr_mix_kernel"]["span_us_per_call"] == 7.0 and rows["hr_mix_kernel"]["added_us_per_call"] == 6.0
    assert res["side_kernels"] == {"prefetch_worker_kernel": {"launches": 30, "span_us_mean": 39.5}}
    assert [k["kernel"] for k in res["first_kernels_of_last_pass"][:3]] == \
        ["dequant_rows_kernel", "hr_down_kernel", "hr_mix_kernel"]
    # between passes: the copy and the launch, from the last kernel's end (6 µs before the next pass)
    assert res["between_passes_us"] == 6.0
    assert res["events_per_pass"] == [{"event": "[api] cudaGraphLaunch", "calls": 1.0, "us": 2.0},
                                      {"event": "[memcpy DtoH]", "calls": 1.0, "us": 1.0}]
    before = res["largest_gaps_of_last_pass"][0]
    assert before["where"] == "before the pass" and before["gap_us"] == 6.0
    assert before["events"] == [{"event": "[memcpy DtoH] 4", "start_us": 0.5, "us": 1.0},
                                {"event": "[api] cudaGraphLaunch", "start_us": 3.0, "us": 2.0}]
    assert [g["gap_us"] for g in res["largest_gaps_of_last_pass"][1:]] == [1.0, 1.0, 1.0]


def test_pass_starts_skip_row_kernels_inside_a_pass():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        from graph_timeline import pass_starts
    finally:
        sys.path.pop(0)
    k = lambda name: (0, 0, name)
    # two passes of the 12 GB PC: the embedding, the streams' fill, ..., a row gather of the join inside the pass
    trace = [k("dequant_rows_kernel"), k("repeat_streams_kernel"), k("hr_down_kernel"), k("gather_rows_kernel"),
             k("hybrid_join_kernel"), k("dequant_rows_kernel"), k("repeat_streams_kernel"), k("gather_rows_kernel")]
    assert pass_starts(trace) == [0, 5]
    # without the fill after any of them, every embedding kernel starts a pass
    assert pass_starts([k("gather_rows_kernel"), k("hr_down_kernel"), k("gather_rows_kernel")]) == [0, 2]
