"""nbgrader's ``Execute`` with bounded outputs and a record of what happened, for autograding.

A submitted notebook runs in a sandboxed kernel (``autograder.sandbox``) that may print without
end: 100 MB of output would otherwise become a 100 MB autograded notebook and feedback page, and
the grader's memory would hold it all. ``BoundedExecute`` keeps at most ``max_cell_output_bytes``
of output per cell and ``max_notebook_output_bytes`` per notebook (errors always, shortened), drops
the rest with one visible line saying so, and stores no widget state.

It also records, as data, what the grader needs to report: which cells ran past the time limit and
where outputs were cut (``EVENTS``). The report's notes come from these records and from the
grader's own checks, never from text the kernel printed.
"""

from __future__ import annotations

import json
from typing import Any

from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer

EVENTS: list[dict[str, Any]] = []  # appended to while a notebook executes; the runner saves them
TRUNCATED = "[grader: output beyond {limit} bytes was dropped]"
_OUTPUTS = {"stream", "display_data", "execute_result", "update_display_data", "error", "comm_open", "comm_msg"}
_ERROR_TEXT = 4096  # characters of an error's message and traceback kept


def _cell_name(cell, index: int) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index + 1}"


class BoundedExecute(Execute):
    """``Execute`` with caps on output bytes and records of timeouts and truncations."""

    max_cell_output_bytes = Integer(1024 * 1024, help="output bytes kept per cell (an interactive figure sends its PNG twice: widget and static twin)").tag(config=True)
    max_notebook_output_bytes = Integer(4 * 1024 * 1024, help="output bytes kept per notebook").tag(config=True)
    store_widget_state = Bool(False, help="no widget state in autograded notebooks").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._cell_bytes: dict[int, int] = {}
        self._total_bytes = 0
        self._cut: set[int] = set()
        self._notebook = (resources or {}).get("unique_key", "notebook")
        return super().preprocess(nb, resources, km)

    def process_message(self, msg, cell, cell_index):
        kind = msg.get("msg_type")
        if kind in _OUTPUTS:
            content = msg.get("content", {})
            if kind == "error":  # kept (it marks the cell as failed), but short
                content["evalue"] = str(content.get("evalue", ""))[:_ERROR_TEXT]
                traceback = [str(line) for line in content.get("traceback", [])]
                content["traceback"] = traceback[:20] + (["..."] + traceback[-20:] if len(traceback) > 40 else traceback[20:])
            else:
                size = len(json.dumps(content, default=str))
                used = self._cell_bytes.get(cell_index, 0)
                if used + size > self.max_cell_output_bytes or self._total_bytes + size > self.max_notebook_output_bytes:
                    self._cut_output(cell, cell_index)
                    return None
                self._cell_bytes[cell_index] = used + size
                self._total_bytes += size
        return super().process_message(msg, cell, cell_index)

    def _cut_output(self, cell, cell_index: int) -> None:
        if cell_index in self._cut:
            return
        self._cut.add(cell_index)
        limit = min(self.max_cell_output_bytes, self.max_notebook_output_bytes)
        cell.outputs.append(new_output("stream", name="stderr", text=TRUNCATED.format(limit=limit) + "\n"))
        EVENTS.append({"event": "output_truncated", "notebook": self._notebook, "cell": _cell_name(cell, cell_index)})

    async def _async_handle_timeout(self, timeout, cell=None):
        index = next((i for i, c in enumerate(self.nb.cells) if c is cell), -1)
        EVENTS.append({"event": "timeout", "notebook": self._notebook, "seconds": timeout,
                       "cell": _cell_name(cell, index) if cell is not None else "a cell"})
        return await super()._async_handle_timeout(timeout, cell)
