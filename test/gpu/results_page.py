"""The page a GPU suite writes with --results PATH (results/gpu/*.md): the command, the GPU, the
date and the code's commit once at the top, then the counts per group and the failures. Needs no
torch, so test/python/results_page_check.py checks the page without a GPU."""
import datetime
import os
import shlex
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Where a library's commit is written beside it: dev/device-bundle.sh and dev/branch-lib.sh.
COMMIT_FILES = ("COMMIT", "REVISION")
# A broken build fails every case; the first ones say why, the suite's log has the rest.
MAX_FAILURES = 50


def commit_of(lib_path, root=ROOT):
    """The commit the tested library was built from, and where that was read: the file its
    bundle wrote beside it, else the checkout's HEAD (with -dirty for uncommitted changes to
    tracked files), else "unknown" (a copied tree with no .git and a library without one)."""
    for name in COMMIT_FILES:
        path = os.path.join(os.path.dirname(os.path.abspath(lib_path)), name)
        if os.path.isfile(path):
            with open(path) as f:
                text = f.read().strip()
            if text:
                return text, f"{name} beside the library"
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=20, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=20, check=True).stdout
        return head + ("-dirty" if dirty.strip() else ""), "the checkout's HEAD"
    except (OSError, subprocess.SubprocessError):
        return "unknown", "no COMMIT beside the library and no git checkout"


RESULTS_OPTIONS = ("--results", "--results-md")


def command_line(script, argv):
    """The command that reruns this suite, as a shell takes it from the checkout's root: without
    the page's own path (a scratch folder on the GPU machine), paths in the checkout relative."""
    shown, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in RESULTS_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(o + "=" for o in RESULTS_OPTIONS)):
            inside = os.path.isabs(arg) and os.path.abspath(arg).startswith(ROOT + os.sep)
            shown.append(os.path.relpath(arg, ROOT) if inside else arg)
    return shlex.join(["python3", os.path.relpath(os.path.abspath(script), ROOT)] + shown)


def render(title, command, facts, commit, elapsed, bounds, columns, rows, failures, notes=(),
           now=None):
    """The page as text. rows: one list of cells per group, the second and third cells its case
    and pass counts; failures: one line each."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    total = sum(int(r[1]) for r in rows)
    passed = sum(int(r[2]) for r in rows)
    lines = [f"# {title}", "",
             f"- command: `{command}` ({elapsed:.0f} s)",
             f"- GPU: {facts['gpu']}, driver {facts['driver']}; torch {facts['torch']}"
             f" (CUDA {facts['cuda']}, cuDNN {facts['cudnn']})",
             f"- date: {now:%Y-%m-%d %H:%M} UTC",
             f"- commit: {commit[0]} ({commit[1]})",
             f"- result: **{passed}/{total} cases passed**, {total - passed} failed", "",
             bounds, "",
             "| " + " | ".join(columns) + " |",
             "|---|" + "---:|" * (len(columns) - 1)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    lines += [n for note in notes for n in ("", note)]
    if failures:
        lines += ["", "## Failures", ""] + [f"- {f}" for f in failures[:MAX_FAILURES]]
        if len(failures) > MAX_FAILURES:
            lines.append(f"- and {len(failures) - MAX_FAILURES} more (the suite's output has all)")
    return "\n".join(lines) + "\n"


def write(path, *args, **kwargs):
    """render() into PATH, creating its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(render(*args, **kwargs))
