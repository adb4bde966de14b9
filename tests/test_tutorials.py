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

Pages are written for a reader at full size and run as written apart from :data:`SMALL`.
"""

from __future__ import annotations

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
    # the classifier: one epoch over the page's CSV (the tiny model learns nothing either way; the run is the same)
    "--output-dir runs/sentiment --epochs 20": "--output-dir runs/sentiment --epochs 1",
    # the quickstart at test size: a 2-layer, 32-wide model, a 512-token BPE on 500 documents, 20 steps
    CREATES_QUICKSTART: CREATES_QUICKSTART + " train.max_steps=20 tokenizer.vocab_size=512"
                        " tokenizer.train_documents=500 'model.overrides={hidden_size: 32, num_hidden_layers: 2,"
                        " split_size: 16, num_retrieved_splits: 2}' eval.every=20 eval.max_sequences=4"
                        " checkpoint.every=20",
    # long-corpus.md: the first 3,000 characters of each topic (chapters of about 9,000 characters, not 20,000-65,000)
    "topics[name] for name in names": "topics[name][:3000] for name in names",
}

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^`\n]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
PORT = re.compile(r"--port[ =](\d+)")


class TutorialError(ValueError):
    """A tutorial page the runner cannot run as the contract reads it."""


@dataclass
class Block:
    page: str  # path relative to the repository
    line: int  # the fence's line on the page
    lang: str  # "bash" or "python"
    code: str
    server: bool = False
    port: int | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.lang}{' server' if self.server else ''})"


def parse_page(text: str, name: str) -> list[Block]:
    """The runnable blocks of a page, in order; :class:`TutorialError` for what the contract refuses: a server block
    that is not bash or has no ``--port N``, two servers on one port, a runnable block indented (inside a list or an
    admonition it would not run), no runnable block at all."""
    blocks, ports = [], set()
    for match in FENCE.finditer(text):
        info = match["info"].strip()
        lang = info.split(" ", 1)[0].split("{", 1)[0].strip()
        line = text[:match.start()].count("\n") + 1
        where = f"{name}:{line}"
        server = SERVER_TITLE.search(info)
        if lang not in RUNNABLE:
            if server:
                raise TutorialError(f"{where}: a {server[0]} block must be ```bash (it is {lang or 'untyped'})")
            continue
        if match["indent"]:
            raise TutorialError(f"{where}: an indented ```{lang} block: runnable blocks start at the margin "
                                "(the tutorial runner runs only those; use ```text for an indented listing)")
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
    return blocks


def read_page(page: Path) -> list[Block]:
    return parse_page(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))


def smallened(code: str, model: str, ports: dict[int, int]) -> str:
    for name, replacement in SMALL.items():
        code = code.replace(name, replacement.replace("{model}", model))
    for page_port, port in ports.items():
        code = re.sub(rf"(?<=[:= ]){page_port}(?!\d)", str(port), code)
    return code


def tail(text: str, n: int = 3000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


class Page:
    """A page being run: its environment, its scratch directory, its servers."""

    def __init__(self, scratch: Path, logs: Path):
        self.scratch, self.logs, self.servers = scratch, logs, []
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
                    "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                    "TOKENIZERS_PARALLELISM": "false"}

    def server_output(self) -> str:
        return "".join(f"\n--- output of the server at {block.where} (tail) ---\n"
                       f"{tail(log.read_text(errors='replace'), 2000)}" for block, _, log in self.servers)

    def run(self, block: Block, code: str) -> None:
        if block.server:
            return self.start(block, code)
        argv = (["bash", "-euo", "pipefail", "-c", code] if block.lang == "bash" else [sys.executable, "-c", code])
        try:
            done = subprocess.run(argv, cwd=self.scratch, env=self.env, capture_output=True, text=True,
                                  timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired as timeout:
            pytest.fail(f"the block at {block.where} ran past {BLOCK_TIMEOUT} s\n--- stdout (tail) ---\n"
                        f"{tail(timeout.stdout or '')}\n--- stderr (tail) ---\n{tail(timeout.stderr or '')}"
                        f"{self.server_output()}")
        if done.returncode != 0:
            pytest.fail(f"the block at {block.where} failed (exit {done.returncode})\n--- block ---\n{code}"
                        f"--- stdout (tail) ---\n{tail(done.stdout)}\n--- stderr (tail) ---\n{tail(done.stderr)}"
                        f"{self.server_output()}")

    def start(self, block: Block, code: str) -> None:
        log = self.logs / f"server-{block.line}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", code], cwd=self.scratch, env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
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
