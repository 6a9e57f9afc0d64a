"""benchmarks/gpu.py: the JSON other scripts read from a GPU run, produced here on the CPU."""

from __future__ import annotations

import json
from types import SimpleNamespace

from torch.autograd import DeviceType

from benchmarks.gpu import count_events, flops_per_item, main, plot
from oahu import OAHU


def test_a_cpu_run_writes_the_contract(tmp_path):
    out, png = tmp_path / "gpu.json", tmp_path / "gpu.png"
    argv = ["--device", "cpu", "--dataset", "digits", "--constraints", "600"]
    argv += ["--long-constraints", "800", "--long", "default:1", "--batch-sizes", "1,64"]
    argv += ["--profile-warmup", "100", "--profile-updates", "20", "--compare-cpu"]
    argv += ["--compare-constraints", "100", "--out", str(out), "--plot", str(png)]
    argv += ["--host-profile", "64", "--host-profile-constraints", "200"]
    main(argv)
    result = json.loads(out.read_text())
    assert result["gpu"] is None and isinstance(result["torch"], str)
    assert result["commit"] is None or len(result["commit"]) == 40
    runs = result["runs"]
    assert [(r["preset"], r["batch_size"]) for r in runs] == [
        (None, 1),
        (None, 64),
        ("paper", 1),
        ("paper", 64),
        (None, 1),
    ]
    for run in runs:
        assert run["device"] == "cpu" and run["capped"] is False
        assert run["triplets_per_s"] > 0 and run["steady_triplets_per_s"] > 0
        assert 0 <= run["error"] <= 1 and len(run["alpha"]) in (3, 6)
        assert run["gpu_max_memory_allocated_mib"] is None and run["achieved_gflops"] > 0
        assert run["config"]["batch_size"] == run["batch_size"]
    assert runs[-1]["long"] is True and runs[-1]["constraints"] == 800
    assert 0 <= runs[0]["prequential_accuracy"] <= 1
    profile = result["profile"]
    assert profile["updates"] == 20 and profile["host_wall_us_per_update"] > 0
    assert "profile_error" not in profile
    host = result["host_profile"]
    assert (host["batch_size"], host["constraints"]) == (64, 200)
    assert host["wall_us_per_triplet"] > 0 and len(host["own_us_per_triplet"]) == 20
    assert result["compare_cpu"]["max_weight_diff"] == 0.0  # the CPU against itself
    assert png.stat().st_size > 0


def test_a_plot_of_long_runs_alone_draws_them(tmp_path):
    # An invocation of only --long runs once wrote two empty axes.
    run = {"preset": None, "batch_size": 1024, "constraints": 1000, "long": True}
    run |= {"triplets_per_s": 2e4, "steady_triplets_per_s": 3e4, "error": 0.11}
    out = {"gpu": "a GPU", "device": "cuda", "constraints": 100, "long_constraints": 1000}
    out |= {"max_seconds": 70, "runs": [run]}
    png = tmp_path / "long.png"
    labels = plot(out, png)
    assert labels == ["default, 1,000 constraints", "default, 1,000 constraints, steady state"]
    assert png.stat().st_size > 0


def test_a_run_stopped_by_the_clock_says_so(tmp_path):
    out = tmp_path / "gpu.json"
    argv = ["--device", "cpu", "--dataset", "digits", "--constraints", "600", "--long", ""]
    argv += ["--batch-sizes", "1", "--presets", "default", "--max-seconds", "0", "--no-profile"]
    result = main([*argv, "--out", str(out)])
    (run,) = result["runs"]
    assert run["capped"] is True and run["constraints"] < 600
    assert result["capped_runs"] == ["default B=1"]


def test_flops_follow_the_weight_shapes():
    # 64 inputs, one hidden layer of 8, embeddings of 64: W1 8x64 and E0 64x64 see the input,
    # the head 64x8 a hidden layer (whose gradient it passes back too).
    model = OAHU(64, n_hidden_layers=1, hidden_width=8, preprocess="none")
    assert flops_per_item(model) == 2 * (8 * 64 * 2 + 64 * 64 * 2 + 64 * 8 * 3)


def test_a_trace_is_counted_per_update():
    def event(name, device=DeviceType.CPU, us=0.0):
        span = SimpleNamespace(elapsed_us=lambda: us)
        return SimpleNamespace(name=name, device_type=device, time_range=span)

    trace = [
        event("cudaLaunchKernel"),
        event("cudaLaunchKernel"),
        event("cudaStreamSynchronize"),
        event("gemm", DeviceType.CUDA, 6.0),
        event("relu", DeviceType.CUDA, 2.0),
        event("Memcpy HtoD (Pageable -> Device)", DeviceType.CUDA, 1.0),
    ]
    counts = count_events(trace, per=2)
    assert counts["kernels_per_update"] == 1.0 and counts["kernel_us_per_update"] == 4.0
    assert counts["kernel_launch_calls_per_update"] == 1.0 and counts["copies_per_update"] == 0.5
    assert counts["synchronizations_per_update"] == 0.5
    assert counts["top_kernels"] == {"gemm": 1, "relu": 1}
