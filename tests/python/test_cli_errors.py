"""Every CLI user error ends in one line on stderr and a non-zero exit, without a traceback
(run in-process through ``xpuruntime.cli.main``, plus the console entry point)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")

from xpuruntime.cli import main
from xpuruntime.models import demo_model_path

DEMO = str(demo_model_path())


def _one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "[cpp/" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_missing_model_and_inputs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["run", str(tmp_path / "missing.onnx")]) == 2
    _one_line_error(capsys, "missing.onnx", "does not exist")
    assert main(["run", "--inputs", str(tmp_path / "missing.npz")]) == 2
    _one_line_error(capsys, "--inputs", "missing.npz", "does not exist")
    (tmp_path / "bad.npz").write_bytes(b"not a zip file")
    assert main(["run", "--inputs", str(tmp_path / "bad.npz")]) == 2
    _one_line_error(capsys, "not an .npz file", "numpy.savez")
    np.savez(tmp_path / "wrong.npz", pixels=np.zeros((1, 3, 32, 32), np.float32))
    assert main(["run", "--inputs", str(tmp_path / "wrong.npz")]) == 2
    _one_line_error(capsys, "no array 'image'", "pixels")


def test_invalid_model_keeps_its_type(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["explain", str(bad)]) == 2
    _one_line_error(capsys, "InvalidModelError")


@pytest.mark.parametrize(
    "argv,needles",
    [
        (["run", "--dim", "bogus=3"], ["bogus", "batch"]),
        (["bench", "--dim", "seq=4", "--iterations", "1"], ["seq", "batch"]),
        (["run", "--dim", "batch=x"], ["--dim", "NAME=VALUE"]),
        (["run", "--threads", "0"], ["--threads", ">= 1"]),
        (["bench", "--duration", "-1"], ["--duration"]),
        (["bench", "--iterations", "many"], ["--iterations"]),
        (["run", "--decisions", "some"], ["--decisions", "chosen"]),
        (["serve", "--model-repository", ".", "--http-port", "99999"], ["--http-port"]),
        (["frobnicate"], ["frobnicate"]),
        # found by the outside probe: accepted before, now refused
        (["compare", "--atol", "-1"], ["--atol", ">= 0"]),
        (["compare", "--atol", "nan"], ["--atol", "finite"]),
        (["compare", "--rtol", "inf"], ["--rtol", "finite"]),
        (["compare", "--tolerance", "-0.5"], ["--tolerance"]),
        (["compare", "--threads", "0"], ["--threads", ">= 1"]),
        (["serve", "--model-repository", ".", "--grace", "nan"], ["--grace", "finite"]),
        (["serve", "--model-repository", ".", "--grace", "-5"], ["--grace", ">= 0"]),
    ],
)
def test_bad_flag_values(capsys: pytest.CaptureFixture[str], argv: list[str], needles: list[str]) -> None:
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        status = int(exc.code or 0)
    assert status == 2
    _one_line_error(capsys, *needles)


def test_policy_validate_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["policy", "validate", str(tmp_path / "missing.json")]) == 2
    _one_line_error(capsys, "missing.json", "does not exist")
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"matmul": "cpu_blocked"}))
    assert main(["policy", "validate", str(flat)]) == 1
    _one_line_error(capsys, "'matmul'", '"preferences"', '{"preferences": {"matmul": "cpu_blocked"}}')
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"preferences": {"matmul": "cpu_blass"}}))
    assert main(["policy", "validate", str(bad)]) == 1
    _one_line_error(capsys, "cpu_blass")


def test_policy_validate_honours_kind(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ep = tmp_path / "ep.json"
    ep.write_text(json.dumps({"kind": "execution_policy", "threads": 2}))
    assert main(["policy", "validate", str(ep)]) == 0
    assert "valid ExecutionPolicy" in capsys.readouterr().out
    # The file's kind decides, not a guess from its fields.
    kp_fields = tmp_path / "ep_wrong.json"
    kp_fields.write_text(json.dumps({"kind": "execution_policy", "preferences": {"matmul": "cpu_blocked"}}))
    assert main(["policy", "validate", str(kp_fields)]) == 1
    _one_line_error(capsys, "ExecutionPolicy", "preferences")
    assert main(["policy", "validate", str(ep), "--kind", "kernel"]) == 2
    _one_line_error(capsys, "execution_policy", "--kind")
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"kind": "cooking_policy"}))
    assert main(["policy", "validate", str(odd)]) == 2
    _one_line_error(capsys, "cooking_policy", "kernel_policy")


def test_policy_validate_yaml_the_same_way(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    good = tmp_path / "good.yaml"
    good.write_text("kind: kernel_policy\npreferences:\n  matmul: cpu_blocked\n")
    assert main(["policy", "validate", str(good)]) == 0
    assert "valid KernelPolicy" in capsys.readouterr().out
    flat = tmp_path / "flat.yml"
    flat.write_text("matmul: cpu_blocked\n")
    assert main(["policy", "validate", str(flat)]) == 1
    _one_line_error(capsys, '"preferences"')
    broken = tmp_path / "broken.yaml"
    broken.write_text("preferences: [unclosed\n")
    assert main(["policy", "validate", str(broken)]) == 2
    _one_line_error(capsys, "YAML")


def test_serve_bad_repository(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    assert main(["serve", "--model-repository", str(tmp_path / "missing")]) == 2
    _one_line_error(capsys, "--model-repository", "does not exist", "one subfolder per model")
    f = tmp_path / "model.onnx"
    f.write_bytes(b"x")
    assert main(["serve", "--model-repository", str(f)]) == 2
    _one_line_error(capsys, "is a file, not a folder")


def test_serve_port_in_use(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        taken = s.getsockname()[1]
        argv = ["serve", "--model-repository", str(tmp_path), "--http-port", str(taken), "--grpc-port", "0"]
        assert main(argv) == 2
        _one_line_error(capsys, f"port {taken}", "in use", "--http-port")
        argv = ["serve", "--model-repository", str(tmp_path), "--http-port", "0", "--grpc-port", str(taken)]
        assert main(argv) == 2
        _one_line_error(capsys, "--grpc-port")


def test_serve_load_names_and_host_are_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Found by the outside probe: these started a server (or failed with a gRPC log line)."""
    pytest.importorskip("starlette")
    (tmp_path / "demo").mkdir()
    base = ["serve", "--model-repository", str(tmp_path), "--http-port", "0", "--grpc-port", "0"]
    assert main([*base, "--load", "../x"]) == 2
    _one_line_error(capsys, "--load '../x' is not a model name")
    assert main([*base, "--load", "demo", "--load", "nope"]) == 2
    _one_line_error(capsys, "--load 'nope'", "has no folder 'nope'")
    assert main([*base, "--host", "999.1.1.1"]) == 2
    _one_line_error(capsys, "--host '999.1.1.1' is not an address of this machine")


def test_run_save_outputs_must_name_an_npz_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Found by the outside probe: a folder was accepted (numpy wrote FOLDER.npz beside it)."""
    for bad in (str(tmp_path), str(tmp_path / "no" / "such" / "o.npz"), str(tmp_path / "o.txt")):
        assert main(["run", "--save-outputs", bad]) == 2
        _one_line_error(capsys, "--save-outputs", "must name an .npz file")
    assert not (tmp_path.parent / f"{tmp_path.name}.npz").exists()
    assert main(["run", "--save-outputs", str(tmp_path / "o.npz"), "--decisions", "none"]) == 0
    capsys.readouterr()
    with np.load(tmp_path / "o.npz") as saved:
        assert saved["logits"].shape == (1, 10) and np.isfinite(saved["logits"]).all()


def test_policy_files_are_read_with_a_bound(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Found by the outside probe: a policy path to /dev/zero read until memory ran out."""
    import xpuruntime as xrt

    (tmp_path / "zero.json").symlink_to("/dev/zero")
    with pytest.raises(xrt.PolicyError, match="holds more than 16 MiB"):
        xrt.ExecutionPolicy.load(tmp_path / "zero.json")
    assert main(["policy", "validate", str(tmp_path / "zero.json")]) != 0
    _one_line_error(capsys, "more than 16 MiB")
    (tmp_path / "ok.json").write_text(json.dumps({"threads": 2}))
    assert xrt.ExecutionPolicy.load(tmp_path / "ok.json").threads == 2


def test_internal_errors_point_to_debug(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    cli_main = importlib.import_module("xpuruntime.cli.main")

    def boom(args: object) -> int:
        raise RuntimeError("unexpected state")

    monkeypatch.setattr(cli_main, "cmd_devices", boom)
    assert main(["devices"]) == 3
    _one_line_error(capsys, "internal error", "RuntimeError: unexpected state", "--debug")
    with pytest.raises(RuntimeError, match="unexpected state"):
        main(["devices", "--debug"])


def test_console_script_version_and_no_traceback(tmp_path: Path) -> None:
    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "xpuruntime.cli", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    import xpuruntime

    v = cli("--version")
    assert v.returncode == 0 and v.stdout.strip() == f"xpuruntime {xpuruntime.__version__}"
    p = cli("policy", "validate", str(tmp_path / "missing.json"))
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    d = cli("policy", "validate", str(tmp_path / "missing.json"), "--debug")
    assert d.returncode != 0 and "Traceback" in d.stderr


@pytest.mark.parametrize("command", ["run", "explain", "bench", "serve", "compare", "policy validate"])
def test_help_is_plain_text_with_defaults(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no line wrapping inside the figures looked for
    with pytest.raises(SystemExit) as exc:
        main([*command.split(), "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out
    if command == "serve":
        assert "(default: 8000)" in out and "(default: 127.0.0.1)" in out and "(default: info)" in out
    if command == "bench":
        assert "(default: 5)" in out and "--duration" in out and "--profile" in out


def test_found_by_the_outside_probe_deep_policy_and_huge_random_inputs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Two user mistakes that ended in 'internal error' lines (2026-11-30 probe): a policy
    file nested 100,000 deep (Python's JSON parser recursed out) and --dim asking for
    random inputs larger than the machine. Both now say what is wrong and what to do."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["policy", "validate", str(deep)]) == 2
    _one_line_error(capsys, "deep.json", "nests too deeply")
    assert main(["bench", DEMO, "--dim", "batch=99999999999999", "--iterations", "1"]) == 2
    line = _one_line_error(capsys, "random inputs", "GiB", "--batch")
    assert "internal error" not in line
    # A size that fits still runs: the check does not refuse ordinary batches.
    assert main(["bench", DEMO, "--batch", "2", "--iterations", "1", "--warmup", "0"]) == 0
