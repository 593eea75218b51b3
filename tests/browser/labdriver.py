"""Drive JupyterLab in a real browser: a server on a temporary copy of the course, and a page.

``LabServer`` starts ``jupyter lab`` (this environment's) on a free localhost port with a token,
in its own Jupyter config, data, runtime, settings and workspace folders, so nothing of the
machine's own Jupyter set-up (or of an earlier run) leaks in; the course's nbgrader and widget
extensions are still found in the environment (``<venv>/share/jupyter``, ``<venv>/etc/jupyter``).
``Lab`` wraps a Playwright page with the few JupyterLab actions the tests need, done the way a
learner does them: menus, toolbar buttons, the keyboard.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEARNER_CONFIG = ROOT / "lab-settings" / "jupyter_lab_config.py"

# The active notebook's panel: JupyterLab hides the others with this class.
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"

# True when the active notebook has its kernel (the indicator also says "idle" before there is
# one, while the toolbar says "No Kernel"), the kernel is idle, and no cell is queued or running.
_NOTEBOOK_IDLE = """(panel) => {
    const kernel = document.querySelector(panel + ' .jp-KernelName');
    if (!kernel || !kernel.textContent.trim() || kernel.textContent.includes('No Kernel')) return false;
    const indicator = document.querySelector(panel + ' .jp-Notebook-ExecutionIndicator');
    if (!indicator || indicator.getAttribute('data-status') !== 'idle') return false;
    const prompts = document.querySelectorAll(panel + ' .jp-CodeCell .jp-InputPrompt');
    return Array.from(prompts).every(p => !p.textContent.includes('*'));
}"""


def free_ports(count: int) -> list[int]:
    """``count`` distinct free localhost ports (held open together while chosen, so never the same twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]


class LabServer:
    """``jupyter lab`` serving ``root``, started in ``cwd``; ``log`` receives its output.

    learner: start it as ``make lab`` does (lab-settings/jupyter_lab_config.py); otherwise it is
    JupyterLab's own defaults, as an instructor starts it in a course directory.
    """

    def __init__(
        self, root: Path, cwd: Path, home: Path, log: Path, learner: bool, nbgrader_config: str = "",
        env: dict[str, str] | None = None,
    ):
        self.root, self.cwd, self.home, self.log_path, self.learner = root, cwd, home, log, learner
        self.extra_env = dict(env or {})  # on top of the cleaned environment (e.g. ATTNLAB_REFERENCE)
        # nbgrader reads an nbgrader_config.py from the Jupyter config folder too (the machine-wide
        # settings of a class, such as where its exchange is), before the course directory's own.
        self.nbgrader_config = nbgrader_config
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def environment(self) -> dict[str, str]:
        # No ATTNLAB_* from the caller: the kernels must use the learner's library, not the reference.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNLAB_", "JUPYTER"))}
        folders = {
            "JUPYTER_CONFIG_DIR": "config",
            "JUPYTER_DATA_DIR": "data",
            "JUPYTER_RUNTIME_DIR": "runtime",
            "JUPYTERLAB_SETTINGS_DIR": "user-settings",
            "JUPYTERLAB_WORKSPACES_DIR": "workspaces",
        }
        for variable, name in folders.items():
            (self.home / name).mkdir(parents=True, exist_ok=True)
            env[variable] = str(self.home / name)
        # The one setting of the tests' own: JupyterLab attaches every cell of a notebook to the
        # page, not only those in view, so the tests can find a cell by its code and read its output.
        tracker = self.home / "user-settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
        tracker.parent.mkdir(parents=True, exist_ok=True)
        tracker.write_text('{"windowingMode": "none"}')
        if self.nbgrader_config:
            (self.home / "config" / "nbgrader_config.py").write_text(self.nbgrader_config)
        # Kernels and nbgrader's helpers are found beside this Python even without an activated venv.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 90) -> "LabServer":
        command = [
            sys.executable, "-m", "jupyterlab", "--no-browser",
            f"--port={self.port}", "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.root_dir={self.root}", f"--IdentityProvider.token={self.token}",
        ]
        if self.learner:
            command.insert(3, f"--config={LEARNER_CONFIG}")
        if os.geteuid() == 0:
            command.append("--allow-root")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w")
        self.process = subprocess.Popen(
            command, cwd=self.cwd, env=self.environment(), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url("/api/status"), timeout=5) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer within {timeout} s:\n{self.log_tail()}")

    def url(self, path: str) -> str:
        separator = "&" if "?" in path else "?"
        return f"{self.base}{path}{separator}token={self.token}"

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        """Shut the server down (and its kernels); kill its process group if it does not go."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            request = urllib.request.Request(self.url("/api/shutdown"), method="POST")
            urllib.request.urlopen(request, timeout=10).close()
            self.process.wait(timeout=20)
        except Exception:  # noqa: BLE001 (whatever went wrong, the process must go)
            pass
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


class Lab:
    """A Playwright page on a ``LabServer``; ``shot(step)`` saves a screenshot for the artifacts."""

    def __init__(self, page, server: LabServer, artifacts: Path):
        self.page, self.server, self.artifacts = page, server, artifacts
        self._shots = 0

    # --- navigation -----------------------------------------------------------------------------

    def goto(self, path: str) -> None:
        """Load JupyterLab at ``path`` and wait until its shell is there."""
        self.page.goto(self.server.url(path))
        self.page.wait_for_selector("#jp-main-dock-panel", timeout=90_000)

    def open_notebook(self, path: str, workspace: str) -> None:
        """Open the notebook ``path`` alone, in a fresh workspace, and wait for its kernel."""
        self.goto(f"/lab/workspaces/{workspace}/tree/{path}")
        self.wait_for_notebook()

    def wait_for_notebook(self, timeout: float = 90_000) -> None:
        self.page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=timeout)
        self.wait_idle(timeout)

    def wait_idle(self, timeout: float = 180_000) -> None:
        """Wait until the active notebook's kernel is idle and no cell is queued."""
        self.page.wait_for_function(_NOTEBOOK_IDLE, arg=NOTEBOOK, timeout=timeout, polling=250)
        # A cell's prompt turns from [*] to its number just before the kernel reports idle; check
        # once more a little later so that a run that continues is not taken for finished.
        self.page.wait_for_timeout(300)
        self.page.wait_for_function(_NOTEBOOK_IDLE, arg=NOTEBOOK, timeout=timeout, polling=250)

    def menu(self, *labels: str) -> None:
        """Click through the menu bar: ``menu("Run", "Run All Cells")``."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(labels[0])}$")).click()
        for label in labels[1:]:
            self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(label)}$")).click()

    def menu_items(self, label: str) -> list[str]:
        """The visible item labels of the menu ``label`` (opened, read, closed again)."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(label)}$")).click()
        items = self.page.locator(".lm-Menu .lm-Menu-item:visible .lm-Menu-itemLabel")
        items.first.wait_for()
        labels = [text.strip() for text in items.all_inner_texts() if text.strip()]
        return labels

    def close_menu(self) -> None:
        self.page.keyboard.press("Escape")

    def dialog(self, timeout: float = 30_000):
        """The dialog JupyterLab shows next (waits for it)."""
        dialog = self.page.locator(".jp-Dialog")
        dialog.wait_for(timeout=timeout)
        return dialog

    def close_dialog(self) -> None:
        self.page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept").click()
        self.page.locator(".jp-Dialog").wait_for(state="detached")

    # --- cells ------------------------------------------------------------------------------------

    def cell(self, code: str):
        """The code cell of the active notebook whose source contains ``code``; a quiz cell, whose
        code (the answers) is folded away, is found by its placeholder instead."""
        code_cells = self.page.locator(f"{NOTEBOOK} .jp-CodeCell")
        cells = code_cells.filter(has=self.page.locator(".cm-content", has_text=code))
        if "quiz" in code.lower() and cells.count() == 0:
            cells = code_cells.filter(has=self.page.locator(".jp-InputPlaceholder"))
        return cells.first

    def setup_cell(self):
        """The active notebook's set-up cell: every lesson's first code cell (``attnlab.start_lesson``)."""
        return self.page.locator(f"{NOTEBOOK} .jp-CodeCell").first

    def _cell(self, cell):
        """``cell`` itself, or the code cell holding the code ``cell``."""
        return self.cell(cell) if isinstance(cell, str) else cell

    def prompts(self) -> list[str]:
        """The input prompts of the active notebook's code cells: "[3]:", "[ ]:", "[*]:"."""
        return [p.strip() for p in self.page.locator(f"{NOTEBOOK} .jp-CodeCell .jp-InputPrompt").all_inner_texts()]

    def output_text(self, cell) -> str:
        """The output of ``cell`` (a cell, or the code it holds) as text."""
        return self._cell(cell).locator(".jp-OutputArea").inner_text()

    def run_all(self, timeout: float = 180_000) -> None:
        """Run > Run All Cells; returns when the run is over (JupyterLab stops at an error)."""
        first = self.page.locator(f"{NOTEBOOK} .jp-CodeCell").first
        before = first.locator(".jp-InputPrompt").inner_text()
        self.menu("Run", "Run All Cells")
        self._wait_prompt_changed(first, before, timeout)
        self.wait_idle(timeout)

    def run_cell(self, cell, timeout: float = 60_000) -> None:
        """Select ``cell`` (or the cell holding that code) and run it with Shift+Enter, as a learner does."""
        cell = self._cell(cell)
        before = cell.locator(".jp-InputPrompt").inner_text()
        cell.locator(".jp-InputPrompt").click()
        self.page.keyboard.press("Shift+Enter")
        self._wait_prompt_changed(cell, before, timeout)
        self.wait_idle(timeout)

    def _wait_prompt_changed(self, cell, before: str, timeout: float) -> None:
        """Wait until ``cell`` has run again: its prompt is a new execution count."""
        self.page.wait_for_function(
            "([el, before]) => { const t = el.textContent; return t !== before && !t.includes('*'); }",
            arg=[cell.locator(".jp-InputPrompt").element_handle(), before], timeout=timeout, polling=250,
        )

    def insert_cell_above(self, below, source: str) -> None:
        """Insert a code cell with ``source`` above the cell ``below`` (or the cell holding that code)."""
        self._cell(below).locator(".jp-InputPrompt").click()
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("a")
        editor = self.page.locator(f"{NOTEBOOK} .jp-Cell.jp-mod-active .cm-content")
        editor.click()
        self.page.keyboard.insert_text(source)
        self.page.keyboard.press("Escape")

    def write_markdown(self, text_in_cell: str, source: str) -> None:
        """Replace the source of the markdown cell showing ``text_in_cell`` and render it."""
        cell = self.page.locator(f"{NOTEBOOK} .jp-MarkdownCell", has_text=text_in_cell).first
        cell.dblclick()
        editor = cell.locator(".cm-content")
        editor.click()
        self.page.keyboard.press("ControlOrMeta+a")
        self.page.keyboard.insert_text(source)
        self.page.keyboard.press("Shift+Enter")

    # --- evidence ---------------------------------------------------------------------------------

    def shot(self, step: str, locator=None, block: str = "center") -> Path:
        """Save a screenshot of the page as ``NN-step.png``, scrolled first so that ``locator`` is
        at the ``block`` ("start", "center", "end") of the view."""
        if locator is not None:
            locator.evaluate("(el, block) => el.scrollIntoView({block})", block)
            self.page.wait_for_timeout(200)
        self._shots += 1
        path = self.artifacts / f"{self._shots:02d}-{step}.png"
        self.page.screenshot(path=str(path))
        return path
