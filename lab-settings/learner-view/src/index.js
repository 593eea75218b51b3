// The course's additions to JupyterLab for learners (lab-settings/learner-view/README.md).
// Built into lab-settings/labextensions/attnlab-learner-view, which lab-settings/jupyter_lab_config.py
// loads; rebuild with `make lab-extension` after changing this file.
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';

/**
 * Run All stops at the first cell that raises, but leaves the notebook scrolled to its last cell:
 * the learner sees old output at the bottom and "Idle", with the error far above. When a cell's
 * run fails, make it the active cell and scroll its error into view.
 */
const showFailingCell = {
  id: 'attnlab-learner-view:show-failing-cell',
  description: 'After a run stops at an error, scroll the failing cell into view.',
  autoStart: true,
  activate: () => {
    NotebookActions.executed.connect((_, { notebook, cell, success }) => {
      // The cells queued after the failing one fail too ("aborted", with no output): the cell to
      // show is the one that raised.
      if (!success && !notebook.isDisposed && !cell.isDisposed && raised(cell)) {
        void reveal(notebook, cell);
      }
    });
  }
};

function raised(cell) {
  const outputs = cell.model.outputs;
  for (let i = 0; outputs && i < outputs.length; i++) {
    if (outputs.get(i).type === 'error') {
      return true;
    }
  }
  return false;
}

function lastError(cell) {
  const outputs = cell.node.querySelectorAll(
    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
  );
  return outputs[outputs.length - 1];
}

function inView(notebook, node) {
  const view = notebook.node.getBoundingClientRect();
  const box = node.getBoundingClientRect();
  return box.height > 0 && box.top >= view.top && box.bottom <= view.bottom;
}

async function reveal(notebook, cell) {
  const index = notebook.widgets.indexOf(cell);
  const shown = lastError(cell);
  // Shift+Enter on a cell in view: its error is in view already, and the next cell stays active.
  if (index < 0 || (shown && inView(notebook, shown))) {
    return;
  }
  notebook.activeCellIndex = index;
  notebook.deselectAll();
  try {
    // JupyterLab's own scrolling: it also attaches a cell that windowing left out of the page.
    await notebook.scrollToItem(index, 'center');
  } catch (reason) {
    return; // the learner scrolled meanwhile: leave it be
  }
  // A cell taller than the view: its error (the last output) is what must be seen.
  const error = lastError(cell);
  if (error && !inView(notebook, error)) {
    const tall = error.getBoundingClientRect().height > notebook.node.getBoundingClientRect().height;
    error.scrollIntoView({ block: tall ? 'start' : 'end' });
  }
}

/**
 * A notebook is not "unsaved" (● in its tab) just because its kernel started: JupyterLab writes
 * the kernel's language_info (with the Python version of this machine) into the notebook's
 * metadata, which marks it changed. When that is the only change, keep the notebook clean; the
 * metadata is still saved with the learner's first real change.
 */
const cleanOnKernelStart = {
  id: 'attnlab-learner-view:clean-on-kernel-start',
  description: "Opening a notebook and starting its kernel does not mark it unsaved.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app, tracker) => {
    tracker.widgetAdded.connect((_, panel) => {
      const model = panel.context.model;
      model.metadataChanged.connect((__, change) => {
        const before = change.oldValue;
        const after = change.newValue;
        const sameLanguage = !before || !after || before.name === after.name;
        if (change.key === 'language_info' && sameLanguage && !model.dirty) {
          // JupyterLab marks the notebook changed right after this signal: undo that mark.
          queueMicrotask(() => {
            if (!model.isDisposed) {
              model.dirty = false;
            }
          });
        }
      });
    });
  }
};

export default [showFailingCell, cleanOnKernelStart];
