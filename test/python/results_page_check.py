"""The GPU suites' --results page (test/gpu/results_page.py, results/gpu/): command, GPU, date and
commit once each at the top in that order, counts that add up to the rows, every failure listed,
the command without the page's own path, the commit read where the library's bundle wrote it. The
suites' own writers (test_forward.py, test_backward.py) run here too, on made-up results: no torch
or GPU, stand-in torch and numpy modules for their imports. Exit status 0 when all of it holds."""
import datetime
import os
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
import results_page  # noqa: E402

FACTS = {"gpu": "Test GPU", "driver": "1.0", "torch": "0.0", "cuda": "13.0", "cudnn": "9"}
NOW = datetime.datetime(2030, 1, 2, 3, 4, tzinfo=datetime.timezone.utc)
HEADER = ("- command: ", "- GPU: ", "- date: ", "- commit: ", "- result: ")
failed = []


def check(what, ok, detail=""):
    if not ok:
        failed.append(f"{what}{': ' + detail if detail else ''}")


def header_of(page):
    """The page's lines that start like a header field, in order."""
    return [line for line in page.splitlines() if line.startswith(HEADER)]


def check_header(what, page, command, commit):
    lines = header_of(page)
    check(f"{what}: command, GPU, date, commit, result once each, in that order",
          [next(p for p in HEADER if line.startswith(p)) for line in lines] == list(HEADER),
          repr(lines))
    check(f"{what}: the header comes before the table",
          page.index("- result: ") < page.index("\n|"))
    check(f"{what}: the command", f"- command: `{command}`" in page, repr(lines))
    check(f"{what}: the commit", f"- commit: {commit[0]} ({commit[1]})" in page, repr(lines))


def check_render():
    rows = [["a", 3, 3, "1e-3"], ["b", 2, 1, "2e-3"]]
    page = results_page.render("T", "python3 x.py", FACTS, ("abc", "COMMIT beside the library"),
                               12.0, "Bounds.", ["variant", "cases", "pass", "err"], rows,
                               ["b: case 2 wrong"], now=NOW)
    check_header("render", page, "python3 x.py", ("abc", "COMMIT beside the library"))
    check("render: the date", "- date: 2030-01-02 03:04 UTC" in page)
    check("render: the GPU", "- GPU: Test GPU, driver 1.0;" in page)
    check("render: counts add up to the rows", "**4/5 cases passed**, 1 failed" in page,
          header_of(page)[-1])
    check("render: one table row per group", page.count("\n| a | 3 | 3 | 1e-3 |") == 1
          and page.count("\n| b | 2 | 1 | 2e-3 |") == 1)
    check("render: failures listed", "## Failures\n\n- b: case 2 wrong\n" in page)
    clean = results_page.render("T", "c", FACTS, ("abc", "x"), 1.0, "B.", ["v", "c", "p"],
                                [["a", 1, 1]], [], now=NOW)
    check("render: no failures section when nothing failed", "## Failures" not in clean)
    many = [f"f{i}" for i in range(results_page.MAX_FAILURES + 7)]
    capped = results_page.render("T", "c", FACTS, ("abc", "x"), 1.0, "B.", ["v", "c", "p"],
                                 [["a", 60, 0]], many, now=NOW)
    listed = [line for line in capped.splitlines() if line.startswith("- f")]
    check("render: failures capped", len(listed) == results_page.MAX_FAILURES
          and "- and 7 more" in capped, f"{len(listed)} listed")


def check_command_line():
    script = os.path.join(results_page.ROOT, "test", "gpu", "test_forward.py")
    lib = os.path.join(results_page.ROOT, ".device", "bundle", "libattnc.so")
    argv = ["--results", "/tmp/out/f.md", "--lib", lib, "--only", "hd128 full",
            "--results-md=/tmp/out/g.md", "--target", "sm_80"]
    got = results_page.command_line(script, argv)
    want = ("python3 test/gpu/test_forward.py --lib .device/bundle/libattnc.so"
            " --only 'hd128 full' --target sm_80")
    check("command_line: without --results, paths in the checkout relative", got == want, got)


def git(repo, *args):
    subprocess.run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


def check_commit_of():
    with tempfile.TemporaryDirectory() as tmp:
        repo, elsewhere = os.path.join(tmp, "repo"), os.path.join(tmp, "copy")
        os.makedirs(repo)
        os.makedirs(elsewhere)
        lib = os.path.join(repo, "lib", "libattnc.so")
        os.makedirs(os.path.dirname(lib))
        git(repo, "init", "-q")
        with open(os.path.join(repo, "f"), "w") as f:
            f.write("1\n")
        git(repo, "add", "f")
        git(repo, "commit", "-q", "-m", "c")
        head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        got = results_page.commit_of(lib, root=repo)
        check("commit_of: the checkout's HEAD", got == (head, "the checkout's HEAD"), repr(got))
        with open(os.path.join(repo, "f"), "w") as f:
            f.write("2\n")
        got = results_page.commit_of(lib, root=repo)
        check("commit_of: -dirty with a changed tracked file", got[0] == head + "-dirty", repr(got))
        with open(os.path.join(os.path.dirname(lib), "REVISION"), "w") as f:
            f.write("feedbeef\n")
        got = results_page.commit_of(lib, root=repo)
        check("commit_of: the library's REVISION before the checkout",
              got == ("feedbeef", "REVISION beside the library"), repr(got))
        got = results_page.commit_of(os.path.join(elsewhere, "libattnc.so"), root=elsewhere)
        check("commit_of: unknown without either", got[0] == "unknown", repr(got))


class Anything(types.ModuleType):
    """A stand-in module: every attribute is a callable stand-in, enough for import-time use."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(name)

    def __call__(self, *args, **kwargs):
        return Anything("call")


def stub_modules():
    for name in ("torch", "torch.nn", "torch.nn.functional", "numpy"):
        sys.modules[name] = Anything(name)
    sys.modules["torch"].nn = sys.modules["torch.nn"]
    sys.modules["torch.nn"].functional = sys.modules["torch.nn.functional"]


def check_suites():
    stub_modules()
    import test_backward
    import test_forward
    commit = ("abc", "COMMIT beside the library")
    with tempfile.TemporaryDirectory() as tmp:
        res = test_forward.Results()
        res.add("causal hd64 bf16", True, 1e-3, 1e-6, 2e-3)
        res.add("causal hd64 bf16", False, 9e-3, 1e-6, 2e-3, what="Sq128 Skv128: relerr")
        res.add("full hd64 dv32 bf16", True, 1e-3, 1e-6)
        path = os.path.join(tmp, "gpu", "forward.md")
        test_forward.write_results(path, res, FACTS, commit, ["--results", path], 5.0)
        page = open(path).read()
        check_header("test_forward", page, "python3 test/gpu/test_forward.py", commit)
        check("test_forward: counts", "**2/3 cases passed**, 1 failed" in page, page[:400])
        check("test_forward: its failure", "- causal hd64 bf16: Sq128 Skv128: relerr" in page)
        check("test_forward: a row", "| causal hd64 bf16 | 2 | 1 | 9.00e-03 | 1.0e-06 | 2.00e-03 |"
              in page)
        check("test_forward: the head_dim_v note", "`hdD dvN`" in page)

        test_backward.device_facts = lambda: FACTS
        results = {"causal hd64 bf16": [2, 2, 3e-3, None], "window hd64 bf16": [1, 0, 5e-2, 4e-3]}
        path = os.path.join(tmp, "backward.md")
        test_backward.write_results(path, results, ["window hd64 bf16 B1 Sq1 Skv1: dq NaN"],
                                    commit, ["--only", "window", "--results", path], 9.0)
        page = open(path).read()
        check_header("test_backward", page, "python3 test/gpu/test_backward.py --only window",
                     commit)
        check("test_backward: counts", "**2/3 cases passed**, 1 failed" in page, page[:400])
        check("test_backward: its failure", "- window hd64 bf16 B1 Sq1 Skv1: dq NaN" in page)
        check("test_backward: a row", "| window hd64 bf16 | 1 | 0 | 5.00e-02 | 4.00e-03 |" in page)


check_render()
check_command_line()
check_commit_of()
check_suites()
for f in failed:
    print("FAIL", f)
print(f"results_page_check: {len(failed)} failed")
sys.exit(1 if failed else 0)
