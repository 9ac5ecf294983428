"""The command line: `cuvil compile/run/inspect/passes` and `cuvil-opt`.

The installed console scripts run in a subprocess where exit codes, stderr and the package on
disk are the point; `cli.main(argv)` / `opt.main(argv)` run in-process where only speed differs.
One small MLP is compiled once (for two targets, cpu and vmvx) for the whole file.
"""

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest
import torch

import cuvil_mlir
from cuvil_mlir import cli
from cuvil_mlir.cli import opt
from cuvil_mlir.lowering import builtin_registry


def bad_pattern_file(path: Path, root: str) -> Path:
    """A user pattern file whose one pattern raises on every ``root`` op."""
    path.write_text(f'''
from cuvil_mlir.core.patterns import PatternSet

patterns = PatternSet("explode", description="a pattern that raises")

@patterns.add("{root}")
def explode(op, rewriter):
    """{root}(...) -> (raises)"""
    raise RuntimeError("boom")
''')
    return path


RELU_MLIR = """\
func.func @f(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32> {
  %0 = torch.aten.relu %x : !torch.vtensor<[2,4],f32> -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}
"""


def _script(name: str) -> str:
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"console script {name} is not installed (pip install -e .)")
    return found


def run(*args, script="cuvil", stdin=None):
    return subprocess.run([_script(script), *map(str, args)], capture_output=True, text=True, input=stdin, timeout=600)


def assert_clean_error(code: int, stderr: str, *fragments: str, prog: str = "cuvil") -> str:
    """Exit code 1, exactly one `prog: error:` line holding every fragment, no traceback."""
    assert code == 1, stderr
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(errors) == 1, stderr
    for fragment in fragments:
        assert fragment in errors[0], stderr
    return errors[0]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """A .pt2 of a small MLP, an input, PyTorch's output, and the package `cuvil compile` made."""
    d = tmp_path_factory.mktemp("cli")
    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(2, 8)
    torch.export.save(torch.export.export(model, (x,)), d / "mlp.pt2")
    np.save(d / "x.npy", x.numpy())
    with torch.no_grad():
        ref = model(x).numpy()
    result = run("compile", d / "mlp.pt2", "-o", d / "mlp.cuvilpkg", "-O2", "--target", "cpu,vmvx")
    assert result.returncode == 0, result.stderr
    return SimpleNamespace(dir=d, pt2=d / "mlp.pt2", pkg=d / "mlp.cuvilpkg", x=d / "x.npy", ref=ref, compiled=result)


# ---------------------------------------------------------------------------------------
# cuvil compile / run / inspect / passes: the happy paths


def test_compile_writes_package_and_prints_summary(mlp):
    out = mlp.compiled.stdout
    assert mlp.pkg.is_file() and zipfile.is_zipfile(mlp.pkg)
    assert f"-> {mlp.pkg}" in out
    assert "targets:    cpu, vmvx (O2)" in out
    assert "signature:  (float32[2, 8]) -> (float32[2, 4])" in out
    assert re.search(r"raise-torch-to-cuvil: linear x2\b(?!,)", out) and "fuse-linear-epilogue: relu_epilogue x1" in out and "(for cpu)" in out
    assert re.search(r"seconds:\s+\d+\.\d\d \(torch [\d.]+, .*iree-compile [\d.]+\)", out), out
    assert mlp.compiled.stderr.strip() == "", mlp.compiled.stderr


def test_run_writes_outputs_that_match_pytorch(mlp, tmp_path):
    result = run("run", mlp.pkg, "--input", mlp.x, "--output", tmp_path / "y.npy")
    assert result.returncode == 0, result.stderr
    assert "ran on target cpu" in result.stdout
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (2, 4) and y.dtype == np.float32
    np.testing.assert_allclose(y, mlp.ref, rtol=1e-5, atol=1e-6)


def test_run_on_a_chosen_target(mlp, tmp_path, capsys):
    assert cli.main(["run", str(mlp.pkg), "-i", str(mlp.x), "-o", str(tmp_path / "y.npy"), "--target", "vmvx"]) == 0
    assert "ran on target vmvx" in capsys.readouterr().out
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), mlp.ref, rtol=1e-5, atol=1e-6)
    code = cli.main(["run", str(mlp.pkg), "-i", str(mlp.x), "--target", "cuda"])
    assert_clean_error(code, capsys.readouterr().err, "'cuda' names no target of this program; its targets: cpu, vmvx")


def test_run_without_output_prints_a_summary(mlp, capsys):
    assert cli.main(["run", str(mlp.pkg), "-i", str(mlp.x)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ran on target cpu\noutput 0: float32[2, 4] [")
    first = float(re.search(r"\] \[\s*(-?[\d.e+-]+),", out).group(1))
    assert first == pytest.approx(float(mlp.ref.ravel()[0]), rel=1e-4, abs=1e-5)


def test_inspect_prints_metadata(mlp, capsys):
    assert cli.main(["inspect", str(mlp.pkg)]) == 0
    out = capsys.readouterr().out
    assert "format:      cuvilpkg version 3" in out
    assert "signature:   (float32[2, 8]) -> (float32[2, 4])" in out
    assert re.search(r"  cpu: modules/cpu\.vmfb, [\d.]+ KiB, driver local-task, sha256 [0-9a-f]{16}", out), out
    assert re.search(r"  vmvx: modules/vmvx\.vmfb, [\d.]+ KiB, driver local-task, sha256 [0-9a-f]{16}", out), out
    assert "--iree-hal-local-target-device-backends=vmvx" in out and "--iree-opt-level=O2" in out
    assert re.search(r"raise-torch-to-cuvil: linear x2\b(?!,)", out) and "fuse-linear-epilogue: relu_epilogue x1" in out
    assert re.search(r"versions: .*torch-mlir \d+", out), out


def test_inspect_json_is_the_stored_metadata(mlp, capsys):
    assert cli.main(["inspect", "--json", str(mlp.pkg)]) == 0
    printed = json.loads(capsys.readouterr().out)
    with zipfile.ZipFile(mlp.pkg) as z:
        stored = json.loads(z.read("metadata.json"))
    assert printed == stored
    assert printed["format_version"] == 3 and [m["target"] for m in printed["modules"]] == ["cpu", "vmvx"]


def test_emit_stages_print_ir_instead_of_compiling(mlp, capsys, tmp_path):
    assert cli.main(["compile", str(mlp.pt2), "--emit", "fused"]) == 0
    cuvil_ir = capsys.readouterr().out
    assert re.search(r'"cuvil.linear"\(.*\{activation = "relu"', cuvil_ir), cuvil_ir
    assert "torch.aten.linear" not in cuvil_ir and "torch.aten.relu" not in cuvil_ir

    assert cli.main(["compile", str(mlp.pt2), "--emit", "torch"]) == 0
    assert "torch.aten.linear" in capsys.readouterr().out

    # -o gets the full IR (weights kept), which cuvil-opt parses back
    lowered = tmp_path / "lowered.mlir"
    assert cli.main(["compile", str(mlp.pt2), "--emit", "lowered", "-o", str(lowered)]) == 0
    text = lowered.read_text()
    assert "torch.aten.linear" in text and "cuvil." not in text
    assert opt.main([str(lowered), "-p", "verify-no-cuvil"]) == 0
    assert not list(tmp_path.glob("*.cuvilpkg"))


def test_passes_lists_passes_and_patterns(capsys):
    assert cli.main(["passes"]) == 0
    out = capsys.readouterr().out
    assert "raise-torch-to-cuvil: torch ops -> cuvil.linear/conv2d/attention/norm" in out
    assert re.search(r"  mul_by_one +on torch\.aten\.mul\.Scalar: mul\.Scalar\(x, 1\) -> x", out), out
    assert "lower-cuvil-to-torch:" in out
    assert "  option attention: sdpa | decomposed (default sdpa" in out
    assert "verify-no-cuvil: fail if a Cuvil op reaches IREE" in out


# ---------------------------------------------------------------------------------------
# cuvil: errors a user can cause are one clean line and exit code 1


def test_missing_model_file(tmp_path):
    result = run("compile", tmp_path / "missing.pt2", "-o", tmp_path / "out.cuvilpkg")
    assert_clean_error(result.returncode, result.stderr, "model file not found", "missing.pt2")


def test_text_file_renamed_pt2_is_not_a_model(tmp_path, capsys):
    fake = tmp_path / "notes.pt2"
    fake.write_text("not a model\n")
    code = cli.main(["compile", str(fake), "-o", str(tmp_path / "out.cuvilpkg")])
    assert_clean_error(code, capsys.readouterr().err, "notes.pt2 is not a model")
    assert not (tmp_path / "out.cuvilpkg").exists()


def test_zip_that_is_not_a_pt2_gives_no_torch_traceback(mlp, tmp_path):
    fake = tmp_path / "package.pt2"
    shutil.copy(mlp.pkg, fake)  # a zip archive, but not torch.export's: torch logs a traceback as a warning
    result = run("compile", fake, "-o", tmp_path / "out.cuvilpkg")
    assert_clean_error(result.returncode, result.stderr, "package.pt2 is not a loadable torch.export program")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("damage", ["truncated", "garbage", "bad-sha", "no-metadata", "bad-signature"])
def test_corrupt_package(mlp, tmp_path, capsys, damage):
    bad = tmp_path / "bad.cuvilpkg"
    data = mlp.pkg.read_bytes()
    if damage == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        bad.write_bytes(b"\x00garbage" * 100)
    else:
        with zipfile.ZipFile(mlp.pkg) as src, zipfile.ZipFile(bad, "w") as dst:
            for name in src.namelist():
                if damage == "no-metadata" and name == "metadata.json":
                    continue
                content = bytearray(src.read(name))
                if damage == "bad-sha" and name.endswith(".vmfb"):
                    content[len(content) // 2] ^= 0xFF  # one flipped byte: the sha256 check must catch it
                if damage == "bad-signature" and name == "metadata.json":
                    content = json.dumps({**json.loads(content), "signature": {"inputs": 3}}).encode()
                dst.writestr(name, bytes(content))
    for command in (["run", str(bad), "-i", str(mlp.x)], ["inspect", str(bad)]):
        code = cli.main(command)
        assert_clean_error(code, capsys.readouterr().err, "bad.cuvilpkg")


def test_missing_package(tmp_path, capsys):
    code = cli.main(["run", str(tmp_path / "nope.cuvilpkg")])
    assert_clean_error(code, capsys.readouterr().err, "package not found")


def test_wrong_input_shape_count_dtype_and_file(mlp, tmp_path, capsys):
    np.save(tmp_path / "wide.npy", np.zeros((2, 9), np.float32))
    np.save(tmp_path / "f64.npy", np.zeros((2, 8), np.float64))
    (tmp_path / "text.npy").write_text("1 2 3\n")
    cases = [
        (["-i", str(tmp_path / "wide.npy")], "input 0: expected shape float32[2, 8], got float32[2, 9]"),
        ([], "expected 1 input(s) (float32[2, 8]), got 0"),
        (["-i", str(mlp.x), "-i", str(mlp.x)], "expected 1 input(s) (float32[2, 8]), got 2"),
        (["-i", str(tmp_path / "f64.npy")], "input 0: expected dtype float32, got float64"),
        (["-i", str(tmp_path / "text.npy")], "text.npy is not a .npy array file"),
        (["-i", str(tmp_path / "absent.npy")], "input file not found"),
        (["-i", str(mlp.x), "-o", "a.npy", "-o", "b.npy"], "the model has 1 output(s) but 2 --output path(s)"),
    ]
    for extra, message in cases:
        code = cli.main(["run", str(mlp.pkg), *extra])
        assert_clean_error(code, capsys.readouterr().err, message)


def test_wrong_input_shape_through_the_console_script(mlp, tmp_path):
    np.save(tmp_path / "wide.npy", np.zeros((3, 8), np.float32))
    result = run("run", mlp.pkg, "--input", tmp_path / "wide.npy")
    assert_clean_error(result.returncode, result.stderr, "input 0: expected shape float32[2, 8], got float32[3, 8]")


def test_compile_option_errors(mlp, tmp_path, capsys):
    cases = [
        (["--emit", "bogus"], "unknown stage 'bogus'; stages: torch, cuvil, fused, precision, lowered"),
        (["--target", "tpu", "-o", str(tmp_path / "o.cuvilpkg")], "unknown target 'tpu'"),
        (["-o", str(tmp_path / "no-such-dir" / "o.cuvilpkg")], "does not exist"),
        (["--emit", "cuvil", "--patterns", str(tmp_path / "absent.py")], "pattern file not found"),
    ]
    for extra, message in cases:
        code = cli.main(["compile", str(mlp.pt2), *extra])
        assert_clean_error(code, capsys.readouterr().err, message)


def _wide_mlp(hidden: int):
    """Two linears whose weights (>= 4 KiB) become external parameters; biases stay in the module."""
    model = torch.nn.Sequential()
    model.fc1, model.act, model.fc2 = torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 32)
    return model.eval()


def test_parameters_saved_apart_and_supplied_at_load(mlp, tmp_path, capsys):
    """`compile --save-parameters` writes the package without its weights and the weights as an
    .irpa; `run`/`bench` load it with `--parameters`, and refuse it without them or with wrong ones."""
    torch.manual_seed(0)
    model, x = _wide_mlp(32), torch.randn(2, 64)
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "wide.pt2")
    np.save(tmp_path / "x.npy", x.numpy())
    pkg, weights = tmp_path / "m.cuvilpkg", tmp_path / "m.irpa"
    assert cli.main(["compile", str(tmp_path / "wide.pt2"), "-o", str(pkg), "--save-parameters", str(weights)]) == 0
    out = capsys.readouterr().out
    assert f"parameters: {weights} (2 tensors" in out and f"load with --parameters {weights}" in out
    meta = json.loads(zipfile.ZipFile(pkg).read("metadata.json"))
    assert meta["parameters"]["file"] is None and sorted(meta["parameters"]["entries"]) == ["fc1.weight", "fc2.weight"]
    assert not any(name.endswith(".irpa") for name in zipfile.ZipFile(pkg).namelist())

    x_npy = str(tmp_path / "x.npy")
    assert cli.main(["run", str(pkg), "-i", x_npy, "-o", str(tmp_path / "y.npy"), "--parameters", str(weights)]) == 0
    with torch.no_grad():
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), model(x).numpy(), rtol=1e-5, atol=1e-6)
    assert cli.main(["bench", str(pkg), "--parameters", str(weights), "--repetitions", "2", "--warmup", "1",
                     "--min-time", "0", "--quiet"]) == 0
    capsys.readouterr()

    code = cli.main(["run", str(pkg), "-i", x_npy])
    assert_clean_error(code, capsys.readouterr().err, "saved without its parameters", "--parameters model.irpa")
    code = cli.main(["run", str(pkg), "-i", x_npy, "--parameters", str(tmp_path / "absent.irpa")])
    assert_clean_error(code, capsys.readouterr().err, "absent.irpa", "no such file")
    other = tmp_path / "other.irpa"  # an archive of another model: the same keys, other shapes
    cuvil_mlir.compile(_wide_mlp(64), (x,), params="external").save_parameters(other)
    code = cli.main(["run", str(pkg), "-i", x_npy, "--parameters", str(other)])
    err = capsys.readouterr().err
    assert_clean_error(code, err, "do not fit this package's modules (2 problem(s))")
    assert "fc1.weight: the archive holds float32[64,64], the module needs float32[32,64]" in err
    code = cli.main(["run", str(mlp.pkg), "-i", str(mlp.x), "--parameters", str(weights)])
    assert_clean_error(code, capsys.readouterr().err, "has no external parameters")
    code = cli.main(["compile", str(mlp.pt2), "-o", str(tmp_path / "small.cuvilpkg"), "--save-parameters", str(weights)])
    assert_clean_error(code, capsys.readouterr().err, "no weight became an external parameter")


def test_save_parameters_option_errors(mlp, tmp_path, capsys):
    pkg = str(tmp_path / "m.cuvilpkg")
    assert cli.main(["compile", str(mlp.pt2), "-o", pkg, "--save-parameters", pkg]) == 2
    assert cli.main(["compile", str(mlp.pt2), "-o", pkg, "--params", "inline", "--save-parameters", "w.irpa"]) == 2
    assert cli.main(["compile", str(mlp.pt2), "--emit", "torch", "--save-parameters", "w.irpa"]) == 2
    err = capsys.readouterr().err
    assert "-o name the same file" in err and "not with --params inline" in err and "not with --emit" in err
    code = cli.main(["compile", str(mlp.pt2), "-o", pkg, "--save-parameters", str(tmp_path / "no-dir" / "w.irpa")])
    assert_clean_error(code, capsys.readouterr().err, "does not exist")


def test_usage_errors_exit_2(capsys):
    assert cli.main([]) == 2
    assert cli.main(["bogus-command"]) == 2
    assert cli.main(["compile"]) == 2
    assert cli.main(["compile", "m.pt2", "-O7"]) == 2
    assert cli.main(["compile", "m.pt2"]) == 2  # neither -o nor --emit
    assert "usage: cuvil" in capsys.readouterr().err
    assert opt.main(["--no-such-flag"]) == 2


def test_internal_error_is_one_line_unless_verbose(mlp, monkeypatch, capsys):
    def broken(args, parser):
        raise RuntimeError("something unexpected")

    monkeypatch.setattr(cli.build, "_inspect", broken)  # cuvil inspect lives in cli/build.py
    assert cli.main(["inspect", str(mlp.pkg)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "cuvil: internal error: RuntimeError: something unexpected; rerun with --verbose for the traceback"

    assert cli.main(["inspect", "--verbose", str(mlp.pkg)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "something unexpected" in err


def test_a_command_group_is_a_module_named_in_command_groups(monkeypatch, capsys):
    """A new command: a module with add_parsers(sub, common), registered by one name in COMMAND_GROUPS."""
    def hello(args, parser):
        print(f"hello {args.name}")
        return 0

    def add_parsers(sub, common):
        p = sub.add_parser("hello", parents=[common], help="say hello")
        p.add_argument("name")
        p.set_defaults(command=hello)

    group = ModuleType("hello_group")
    group.add_parsers = add_parsers
    assert cli.main(["hello", "you"]) == 2  # not registered: a usage error
    assert "invalid choice: 'hello'" in capsys.readouterr().err
    monkeypatch.setattr(cli, "COMMAND_GROUPS", (*cli.COMMAND_GROUPS, group))
    assert cli.main(["hello", "you", "--verbose"]) == 0  # the common options come with it
    assert capsys.readouterr().out == "hello you\n"
    assert cli.main(["passes"]) == 0 and "raise-torch-to-cuvil" in capsys.readouterr().out


def test_compile_pattern_failure_gives_a_repro_with_the_pattern_file(mlp, tmp_path, capsys):
    bad = bad_pattern_file(tmp_path / "bad_patterns.py", "cuvil.linear")  # user patterns run after raising
    code = cli.main(["compile", str(mlp.pt2), "--emit", "cuvil", "--patterns", str(bad)])
    err = capsys.readouterr().err
    line = assert_clean_error(code, err, "pass 'explode' failed", "pattern 'explode' raised RuntimeError: boom")
    assert "while matching cuvil.linear" in line
    repro = re.search(r"reproduce with: (cuvil-opt \S+\.mlirbc -p explode --load-patterns \S+)", err)
    assert repro, err
    assert repro.group(1).endswith(str(bad.resolve()))
    Path(repro.group(1).split()[1]).unlink()


# ---------------------------------------------------------------------------------------
# cuvil-opt


def test_opt_runs_passes_on_stdin():
    result = run("-p", "raise-torch-to-cuvil", "-", script="cuvil-opt", stdin=RELU_MLIR)
    assert result.returncode == 0, result.stderr
    assert "torch.aten.relu %arg0" in result.stdout  # relu of an argument: nothing to raise
    assert result.stdout.startswith("module {")


def test_opt_unknown_pass_lists_known_passes(tmp_path):
    src = tmp_path / "in.mlir"
    src.write_text(RELU_MLIR)
    result = run(src, "-p", "raise-torch-to-cuvil,no-such-pass", script="cuvil-opt")
    known = ", ".join(builtin_registry().names())
    assert "raise-torch-to-cuvil" in known
    assert_clean_error(result.returncode, result.stderr, "unknown pass 'no-such-pass'", f"known passes: {known}", prog="cuvil-opt")
    assert result.stdout == ""


def test_opt_pass_options(tmp_path, capsys):
    src = tmp_path / "in.mlir"
    src.write_text(RELU_MLIR)
    assert opt.main([str(src), "-p", "lower-cuvil-to-torch{attention=decomposed},verify-no-cuvil"]) == 0
    assert "torch.aten.relu" in capsys.readouterr().out
    assert opt.main([str(src), "-p", "lower-cuvil-to-torch{attention=flash}"]) == 1
    assert_clean_error(1, capsys.readouterr().err, "option attention=flash is not one of sdpa, decomposed", prog="cuvil-opt")
    assert opt.main([str(src), "-p", "verify-no-cuvil{x=1}"]) == 1
    assert_clean_error(1, capsys.readouterr().err, "pass 'verify-no-cuvil' takes no options", prog="cuvil-opt")


def test_opt_parse_error_names_file_line_and_column(tmp_path, capsys):
    src = tmp_path / "bad.mlir"
    src.write_text(RELU_MLIR.replace("torch.aten.relu %x :", "torch.aten.relu %x, %x :"))
    assert opt.main([str(src)]) == 1
    line = assert_clean_error(1, capsys.readouterr().err, prog="cuvil-opt")
    assert re.match(rf"cuvil-opt: error: {re.escape(str(src))}:2:\d+: ", line), line


def test_opt_missing_and_binary_inputs(tmp_path, capsys):
    assert opt.main([str(tmp_path / "absent.mlir")]) == 1
    assert_clean_error(1, capsys.readouterr().err, "input file not found", prog="cuvil-opt")
    junk = tmp_path / "junk.mlir"
    junk.write_bytes(bytes(range(128, 256)))
    assert opt.main([str(junk)]) == 1
    assert_clean_error(1, capsys.readouterr().err, "neither MLIR bytecode nor UTF-8 MLIR text", prog="cuvil-opt")


def test_opt_split_input_file_keeps_going_after_an_error(tmp_path, capsys):
    src = tmp_path / "split.mlir"
    src.write_text(RELU_MLIR + "// -----\nfunc.func @broken( {\n// -----\n" + RELU_MLIR.replace("@f", "@g"))
    assert opt.main([str(src), "--split-input-file"]) == 1
    captured = capsys.readouterr()
    chunks = captured.out.split("// -----\n")
    assert len(chunks) == 3
    assert "func.func @f" in chunks[0] and "func.func @g" in chunks[2]
    assert chunks[1].startswith(f"// error: {src}:6:")
    assert_clean_error(1, captured.err, f"{src}:6:", prog="cuvil-opt")


def test_opt_pass_failure_prints_a_command_that_reproduces_it(tmp_path):
    bad = bad_pattern_file(tmp_path / "bad_patterns.py", "torch.aten.relu")
    src = tmp_path / "in.mlir"
    src.write_text(RELU_MLIR)
    result = run(src, "-p", "explode", "--load-patterns", bad, script="cuvil-opt")
    line = assert_clean_error(result.returncode, result.stderr, "pass 'explode' failed",
                              "RuntimeError: boom while matching torch.aten.relu", prog="cuvil-opt")
    assert f'"{src}":2:8' in line  # the op's location names the real file
    repro = re.search(r"reproduce with: (cuvil-opt (\S+\.mlirbc) -p explode --load-patterns \S+)", result.stderr)
    assert repro, result.stderr
    try:
        again = run(*repro.group(1).split()[1:], script="cuvil-opt")  # the printed command fails the same way
        assert_clean_error(again.returncode, again.stderr, "pattern 'explode' raised RuntimeError: boom", prog="cuvil-opt")
    finally:
        for path in re.findall(r"reproduce with: cuvil-opt (\S+\.mlirbc)", result.stderr + again.stderr):
            Path(path).unlink(missing_ok=True)
