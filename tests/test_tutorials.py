"""The tutorials run as a reader runs them: every page ``docs/tutorials/*.md``, top to bottom, one test per page.

How a page is run (the contract every tutorial is written against):

* One fresh scratch directory per page, the working directory of every block; offline (``HF_HUB_OFFLINE=1``),
  ``OMP_NUM_THREADS=1``, ``PYTHONPATH`` the repository root, and the running Python's ``bin`` directory first on
  ``PATH`` (so ``avey-b`` and ``python`` are this test's).
* The blocks in page order: a ```` ```bash ```` block runs as one ``bash -euo pipefail`` script, a
  ```` ```python ```` block in its own ``python`` process. Any other info string (``text``, ``console``, ``json``,
  ...) is shown, not run. Blocks share state only through files, as for a reader at a terminal.
* A block whose info string carries ``title="second terminal"`` (```` ```bash title="second terminal" ````; or a
  third, fourth, ... terminal) is a
  long-running server: it is started in the background, the page goes on once ``http://127.0.0.1:PORT/health``
  answers 200 (``PORT``: the block's ``--port N``), the test fails with the server's output if it exits or
  :data:`SERVER_WAIT` seconds pass, and every server is stopped (SIGTERM, then SIGKILL) when the page ends. Each
  server's port becomes a free port everywhere in the page's runnable blocks (after ``:``, ``=`` or a space:
  ``127.0.0.1:8000``, ``--port 8000``, ``port=8000``).
* :data:`SMALL` makes the page small: each entry is ``text on the page -> text the test runs`` (``{model}``: a tiny
  masked-LM saved for the session, for Hub ids), applied to runnable blocks only; every entry must be used.
* Every page but the one that pretrains it (:data:`CREATES_QUICKSTART` in a runnable block) starts with a tiny
  model at ``runs/quickstart/model``, as a reader who did the first tutorial has.

What a page shows a block printing is checked against what it printed (:func:`output_diff`):

* A shown block (any info string but ``bash`` / ``python``) shows the standard output of the runnable block before
  it (the nearest one above, prose between them allowed; standard error, where progress bars and logs go, is not
  compared); for a server, what it has printed when ``/health`` first answers. One shown block per runnable block;
  a shown block with no runnable block above it is refused.
* A shown block whose info string carries ``title="illustrative"`` (or ``title="illustrative: why"``, the reason
  the reader sees as its title) is not checked: for output no run at test size reproduces (a full-size model's
  own guesses, the time a run takes). Any other shown block must match, or the test fails naming the page, the
  line and a diff of shown vs printed (every mismatch of the page at once, at its end).
* Matching, at test size: each line is read as tokens (words, numbers, each other character; spacing is not
  compared), the words and the other characters compared exactly and every number (``-3``, ``0.25``, ``1,174``,
  ``1e-05``, ``42.86%``) as a number of any value. ``...`` alone on a line stands for any run of lines (none
  included); ``...`` within a line for any run of tokens within that line (``0.99...``, ``"id": "..."``).
  Leading and trailing blank lines are not compared.

Pages are written for a reader at full size and run as written apart from :data:`SMALL`.
"""

from __future__ import annotations

import difflib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from avey_b import testing as toy

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
PAGES = sorted(TUTORIALS.glob("*.md"))
RUNNABLE = ("bash", "python")
#: A server block's title: a terminal of its own beside the reader's (``second terminal``, ``third terminal``, ...).
SERVER_TITLE = re.compile(r'title="\w+ terminal"')
SERVER_WAIT = 180  # seconds for a server to answer /health
BLOCK_TIMEOUT = 600  # seconds for one block
CREATES_QUICKSTART = "avey-b pretrain --config quickstart"

#: What a page says, and what the test runs instead (test size; ``{model}``: a tiny masked-LM with its tokenizer).
SMALL = {
    # the install: this test's environment has it; check that it does
    'pip install -e ".[train,embed]"': 'python -c "import avey_b, pyarrow, yaml, tqdm"',
    'pip install -e ".[finetune,serve]" httpx': 'python -c "import avey_b, accelerate, fastapi, uvicorn, httpx"',
    # (the classifier trains its 20 epochs as the page says: seconds for the tiny model, which then answers the labels
    # the page shows)
    # the quickstart at test size: a 2-layer, 32-wide model, a 512-token BPE on 500 documents, 20 steps
    CREATES_QUICKSTART: CREATES_QUICKSTART + " train.max_steps=20 tokenizer.vocab_size=512"
                        " tokenizer.train_documents=500 'model.overrides={hidden_size: 32, num_hidden_layers: 2,"
                        " split_size: 16, num_retrieved_splits: 2}' eval.every=20 eval.max_sequences=4"
                        " checkpoint.every=20",
    # long-corpus.md: the first 3,000 characters of each topic (chapters of about 9,000 characters, not 20,000-65,000)
    "topics[name] for name in names": "topics[name][:3000] for name in names",
}

#: A shown block that is not checked: output no run at test size reproduces (``title="illustrative: why"``).
ILLUSTRATIVE = re.compile(r'title="illustrative(?::[^"]*)?"')
#: A number, as the comparison reads it: a sign, thousands separators, decimals, an exponent, a percent sign.
NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?%?"
TOKEN = re.compile(rf"(?P<elided>\.\.\.|…)|(?P<number>{NUMBER})|(?P<word>[^\W\d]+)|(?P<other>\S)")
ELIDED, ANY_NUMBER = "...", "<number>"
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^`\n]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
PORT = re.compile(r"--port[ =](\d+)")


class TutorialError(ValueError):
    """A tutorial page the runner cannot run as the contract reads it."""


@dataclass
class Shown:
    """A block that shows what the runnable block above it prints."""

    line: int  # the fence's line on the page
    info: str
    text: str


@dataclass
class Block:
    page: str  # path relative to the repository
    line: int  # the fence's line on the page
    lang: str  # "bash" or "python"
    code: str
    server: bool = False
    port: int | None = None
    shown: Shown | None = None  # the block that shows its output (None: none, or an illustrative one)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.lang}{' server' if self.server else ''})"


def parse_page(text: str, name: str) -> list[Block]:
    """The runnable blocks of a page, in order, each with the block that shows its output; :class:`TutorialError`
    for what the contract refuses: a server block that is not bash or has no ``--port N``, two servers on one port,
    a runnable block indented (inside a list or an admonition it would not run), no runnable block at all, a shown
    block with no runnable block above it or a second one for the same block (unless illustrative)."""
    blocks, ports, refused = [], set(), None
    for match in FENCE.finditer(text):
        info = match["info"].strip()
        lang = info.split(" ", 1)[0].split("{", 1)[0].strip()
        line = text[:match.start()].count("\n") + 1
        where = f"{name}:{line}"
        server = SERVER_TITLE.search(info)
        if lang not in RUNNABLE:
            if server:
                raise TutorialError(f"{where}: a {server[0]} block must be ```bash (it is {lang or 'untyped'})")
            if ILLUSTRATIVE.search(info):
                continue
            if not blocks:
                refused = refused or TutorialError(f"{where}: a shown ```{info} block with no runnable block above "
                                                   "it: what it shows is unchecked (mark it title=\"illustrative\")")
            elif blocks[-1].shown is not None:
                raise TutorialError(f"{where}: a second shown block for the block at {blocks[-1].where} (it is "
                                    f"shown at line {blocks[-1].shown.line}; mark one title=\"illustrative\")")
            else:
                blocks[-1].shown = Shown(line, info, match["code"])
            continue
        if match["indent"]:
            raise TutorialError(f"{where}: an indented ```{lang} block: runnable blocks start at the margin "
                                "(the tutorial runner runs only those; use ```text title=\"illustrative\" for "
                                "an indented listing)")
        block = Block(name, line, lang, match["code"])
        if server:
            if lang != "bash":
                raise TutorialError(f"{where}: a {server[0]} block must be ```bash")
            ports_here = PORT.findall(block.code)
            if len(ports_here) != 1:
                raise TutorialError(f"{where}: a {server[0]} block needs exactly one --port N (the runner waits "
                                    f"for http://127.0.0.1:N/health), found {len(ports_here)}")
            block.server, block.port = True, int(ports_here[0])
            if block.port in ports:
                raise TutorialError(f"{where}: port {block.port} is used by an earlier server block")
            ports.add(block.port)
        blocks.append(block)
    if not blocks:
        raise TutorialError(f"{name}: no ```bash or ```python block to run")
    if refused:
        raise refused
    return blocks


def read_page(page: Path) -> list[Block]:
    return parse_page(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))


def smallened(code: str, model: str, ports: dict[int, int]) -> str:
    for name, replacement in SMALL.items():
        code = code.replace(name, replacement.replace("{model}", model))
    for page_port, port in ports.items():
        code = re.sub(rf"(?<=[:= ]){page_port}(?!\d)", str(port), code)
    return code


def tokens(line: str) -> list[str]:
    """A line as the comparison reads it: words and other characters as they are, every number as
    :data:`ANY_NUMBER`, an elision as :data:`ELIDED`."""
    return [ANY_NUMBER if m.lastgroup == "number" else ELIDED if m.lastgroup == "elided" else m[0]
            for m in TOKEN.finditer(line)]


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _glob(pattern: list, items: list, same) -> bool:
    """Whether ``items`` match ``pattern``, an element :data:`ELIDED` standing for any run of items (none included),
    any other element for one item it is ``same`` as."""
    rest = [False] * len(items) + [True]  # rest[j]: whether the pattern's elements after this one match items[j:]
    for element in reversed(pattern):
        if element == ELIDED:
            here = rest[:]
            for j in range(len(items) - 1, -1, -1):
                here[j] = here[j] or here[j + 1]
        else:
            here = [j < len(items) and rest[j + 1] and same(element, items[j]) for j in range(len(items) + 1)]
        rest = here
    return rest[0]


def output_matches(shown: str, printed: str) -> bool:
    """Whether ``printed`` is what ``shown`` shows, as the module's contract reads it: tokens compared exactly but
    numbers, ``...`` alone on a line for any run of lines, ``...`` in a line for any run of its tokens."""
    pattern = [ELIDED if toks == [ELIDED] else toks for toks in map(tokens, _lines(shown))]
    return _glob(pattern, [tokens(line) for line in _lines(printed)], lambda toks, got: _glob(toks, got, str.__eq__))


def output_diff(shown: str, printed: str, where: str) -> str | None:
    """None when ``printed`` matches ``shown`` (:func:`output_matches`); else a message naming ``where`` (the shown
    block's page and line) with a diff of what the page shows against what the block printed."""
    if output_matches(shown, printed):
        return None
    diff = difflib.unified_diff(_lines(shown), _lines(printed), f"shown at {where}", "printed", lineterm="", n=2)
    return (f"{where}: the shown output does not match what the block printed (numbers and lines elided with "
            "`...` aside)\n" + "\n".join(diff))


def tail(text: str, n: int = 3000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


class Page:
    """A page being run: its environment, its scratch directory, its servers."""

    def __init__(self, scratch: Path, logs: Path):
        self.scratch, self.logs, self.servers, self.mismatches = scratch, logs, [], []
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
                    "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                    "TOKENIZERS_PARALLELISM": "false"}

    def server_output(self) -> str:
        return "".join(f"\n--- {name} of the server at {block.where} (tail) ---\n"
                       f"{tail(log.with_suffix(suffix).read_text(errors='replace'), 2000)}"
                       for block, _, log in self.servers for name, suffix in (("stdout", ".out"), ("stderr", ".err")))

    def mismatch_report(self) -> str:
        return "".join(f"\n--- an earlier mismatch ---\n{m}" for m in self.mismatches)

    def compare(self, block: Block, printed: str) -> None:
        """Note a mismatch of ``printed`` (the block's output) with the block that shows it, if one does."""
        if block.shown is not None:
            where = f"{block.page}:{block.shown.line} (the output of the block at line {block.line})"
            if (diff := output_diff(block.shown.text, printed, where)) is not None:
                self.mismatches.append(diff)

    def run(self, block: Block, code: str) -> None:
        if block.server:
            self.start(block, code)
            return self.compare(block, self.servers[-1][2].with_suffix(".out").read_text(errors="replace"))
        argv = (["bash", "-euo", "pipefail", "-c", code] if block.lang == "bash" else [sys.executable, "-c", code])
        try:
            done = subprocess.run(argv, cwd=self.scratch, env=self.env, capture_output=True, text=True,
                                  timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired as timeout:
            pytest.fail(f"the block at {block.where} ran past {BLOCK_TIMEOUT} s\n--- stdout (tail) ---\n"
                        f"{tail(timeout.stdout or '')}\n--- stderr (tail) ---\n{tail(timeout.stderr or '')}"
                        f"{self.server_output()}{self.mismatch_report()}")
        if done.returncode != 0:
            pytest.fail(f"the block at {block.where} failed (exit {done.returncode})\n--- block ---\n{code}"
                        f"--- stdout (tail) ---\n{tail(done.stdout)}\n--- stderr (tail) ---\n{tail(done.stderr)}"
                        f"{self.server_output()}{self.mismatch_report()}")
        self.compare(block, done.stdout)

    def start(self, block: Block, code: str) -> None:
        log = self.logs / f"server-{block.line}"  # .out: its standard output, .err: its standard error
        with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
            proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", code], cwd=self.scratch, env=self.env,
                                    stdout=out, stderr=err, start_new_session=True)
        self.servers.append((block, proc, log))
        port = int(PORT.findall(code)[0])
        deadline = time.monotonic() + SERVER_WAIT
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if proc.poll() is not None:
                pytest.fail(f"the server at {block.where} exited (code {proc.returncode}) before "
                            f"/health answered{self.server_output()}")
            time.sleep(0.3)
        pytest.fail(f"the server at {block.where} did not answer /health in {SERVER_WAIT} s{self.server_output()}")

    def stop(self) -> None:
        for _, proc, _ in self.servers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc, _ in self.servers:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def hub_model(tmp_path_factory) -> str:
    """The tiny masked-LM that stands for the authors' checkpoint (``{model}`` in :data:`SMALL`)."""
    directory = tmp_path_factory.mktemp("hub-model")
    toy.avey_b(str(directory), toy.tokenizer(str(directory)))
    return str(directory)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_the_tutorial_runs_top_to_bottom(page, hub_model, tmp_path):
    blocks = read_page(page)
    scratch, logs = tmp_path / "work", tmp_path / "logs"
    scratch.mkdir(), logs.mkdir()
    if not any(CREATES_QUICKSTART in block.code for block in blocks):  # a reader who did the first hour has one
        model = scratch / "runs" / "quickstart" / "model"
        toy.avey_b(str(model), toy.tokenizer(str(model)))
    from test_serve import free_port

    ports = {block.port: free_port() for block in blocks if block.server}
    run = Page(scratch, logs)
    try:
        for block in blocks:
            run.run(block, smallened(block.code, hub_model, ports))
    finally:
        run.stop()
    if run.mismatches:
        pytest.fail("\n\n".join(run.mismatches))


def test_every_tutorial_parses_with_a_runnable_block_and_every_entry_of_small_is_used():
    assert PAGES, "docs/tutorials/ has no page"
    pages = {page: read_page(page) for page in PAGES}  # raises TutorialError, naming the page, on a malformed one
    for page, blocks in pages.items():
        assert blocks and all(block.port for block in blocks if block.server), page
    every = "\n".join(block.code for blocks in pages.values() for block in blocks)
    assert [name for name in SMALL if name not in every] == []


def test_a_malformed_page_is_refused_naming_where():
    page = ("# A page\n\nStart the server:\n\n```bash title=\"second terminal\"\navey-b serve runs/m\n```\n\n"
            "```python\nprint(1)\n```\n")
    with pytest.raises(TutorialError, match=r"bad\.md:5: a title=\"second terminal\" block needs exactly one "
                                            r"--port N .*found 0"):
        parse_page(page, "bad.md")
    with pytest.raises(TutorialError, match=r"bad\.md:1: .*must be ```bash"):
        parse_page('```python title="second terminal"\nserve(port=8000)\n```\n', "bad.md")
    with pytest.raises(TutorialError, match=r"bad\.md:3: an indented ```python block"):
        parse_page("1. a step\n\n    ```python\n    print(1)\n    ```\n", "bad.md")
    with pytest.raises(TutorialError, match=r"bad\.md: no ```bash or ```python block to run"):
        parse_page("# Only prose\n\n```text\noutput\n```\n", "bad.md")
    with pytest.raises(TutorialError, match=r"bad\.md:4: port 8000 is used by an earlier server block"):
        parse_page('```bash title="second terminal"\navey-b serve a --port 8000\n```\n'
                   '```bash title="second terminal"\navey-b serve b --port 8000\n```\n', "bad.md")


def test_every_terminal_of_its_own_is_a_server_block():
    """A page that starts two servers titles them "second terminal" and "third terminal": both run in the background
    (a server block run in the foreground would hold the page until its timeout)."""
    page = ('```bash title="second terminal"\navey-b serve a --port 8000\n```\n'
            '```bash title="third terminal"\navey-b serve b --port 8001\n```\n```bash\ncurl -s 127.0.0.1:8001\n```\n')
    first, second, client = parse_page(page, "ok.md")
    assert (first.server, first.port, second.server, second.port, client.server) == (True, 8000, True, 8001, False)


def test_the_ports_and_the_table_are_substituted_in_runnable_code():
    page = ('```bash title="second terminal"\navey-b serve runs/sentiment --port 8000\n```\n\n'
            '```bash\ncurl -s http://127.0.0.1:8000/predict -d \'{"inputs": "8000 films"}\'\n```\n')
    server, client = parse_page(page, "ok.md")
    assert (server.server, server.port, client.server) == (True, 8000, False)
    assert smallened(client.code, "/m", {8000: 41234}) == \
        "curl -s http://127.0.0.1:41234/predict -d '{\"inputs\": \"8000 films\"}'\n"
    assert smallened(server.code, "/m", {8000: 41234}) == "avey-b serve runs/sentiment --port 41234\n"


def test_a_shown_output_is_compared_word_for_word_and_number_for_any_number():
    """The comparison itself (:func:`output_diff`), without running a page: a drifted word or line fails, another
    number passes, ``...`` stands for lines or for part of a line."""
    printed = ("model avey-b (0.05M parameters, vocab 512); 20 steps\nstep     20 | loss 6.1234 | lr 2.00e-03\n"
               "0 32 [-0.2, 0.077]\nheld-out: 1,174 of 9,999 tokens (11.7%)\n")
    assert output_diff("model avey-b (2.89M parameters, vocab 4096); 2400 steps\nstep 920 | loss 5.6264 | lr 1.5e-4"
                       "\n0 256 [0.031, -0.12]\nheld-out: 12 of 137,624 tokens (0.01%)", printed, "p.md:1") is None
    assert output_diff("model avey-b ...\n...\nheld-out: ...", printed, "p.md:1") is None  # elisions
    assert output_diff("\nmodel avey-b ...\n...\n\n", printed, "p.md:1") is None  # blank lines at the ends
    drifted = output_diff("model avey-c ...\n...", printed, "docs/tutorials/p.md:7")
    assert drifted is not None and drifted.startswith("docs/tutorials/p.md:7: the shown output does not match")
    assert "\n-model avey-c ...\n" in drifted and "\n+model avey-b (0.05M parameters, vocab 512); 20 steps\n" in drifted
    assert output_diff("model avey-b ...\nstep 20 | loss 6.1 | lr 2e-3", printed, "p.md:1")  # lines left out
    assert output_diff("...\n0 32 [-0.2, 0.077, 0.3]\n...", printed, "p.md:1")  # a vector of another length
    assert output_diff("...\n0 32 [-0.2 0.077]\n...", printed, "p.md:1")  # a comma lost
    assert output_diff("...\nheld-out: 1,174 of 9,999 tokens (11.7%)\nfinished", printed, "p.md:1")  # a line more
    assert output_diff("...\nheld-out: 1,174 of 9,999 ... (11.7%)", printed, "p.md:1") is None
    assert output_diff("...\nheld-out: ... words (11.7%)", printed, "p.md:1")  # an elision ends at its line


def test_a_shown_block_is_the_output_of_the_runnable_block_above_it():
    page = ('```bash\necho hi\n```\n\nIt prints:\n\n```text\nhi\n```\n\n```python\nprint(1)\n```\n\n'
            '```text title="illustrative: yours differs"\n2\n```\n\n```bash title="second terminal"\n'
            'avey-b serve m --port 8000\n```\n\n```console\nserving m ...\n```\n')
    echo, one, server = parse_page(page, "ok.md")
    assert (echo.shown.line, echo.shown.text, one.shown, server.shown.text) == (7, "hi\n", None, "serving m ...\n")
    with pytest.raises(TutorialError, match=r"bad\.md:1: a shown ```text block with no runnable block above it"):
        parse_page("```text\nhi\n```\n\n```bash\necho hi\n```\n", "bad.md")
    parse_page('```text title="illustrative"\nhi\n```\n\n```bash\necho hi\n```\n', "ok.md")
    with pytest.raises(TutorialError, match=r"bad\.md:8: a second shown block for the block at bad\.md:1 "):
        parse_page("```bash\necho hi\n```\n```text\nhi\n```\n\n```text\nhi\n```\n", "bad.md")
