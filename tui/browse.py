"""Opening a saved run read-only (`cudaforge-tui --open RUN`): the run folder into the RunModel.

No session and no decisions; a folder that cannot be read is an error message, not a traceback."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from cudaforge.engine.errors import CudaforgeError
from cudaforge.engine.session import RunStore
from cudaforge.tui.model import RunModel
from cudaforge.tui.widgets.log import run_folder_log


@dataclass(frozen=True)
class Opened:
    """What the App shows after --open: a log line and a banner, or the error."""

    log: str = ""
    banner: str = ""
    error: str = ""
    folder_log: tuple[tuple[str, str], ...] = ()  # the run folder's session log, or what the folder records


def open_run(path: Path, model: RunModel) -> Opened:
    """Every round of the run at `path` into `model` (its selection is left to the App)."""
    try:
        store = RunStore.open(path, read_only=True)
        manifest = store.manifest
        records = store.rounds()
    except CudaforgeError as exc:
        return Opened(error=exc.message)
    except (OSError, ValueError) as exc:
        return Opened(error=f"{path}: cannot read the run folder ({exc})")
    state = store.state
    m = model
    m.run_id, m.run_dir, m.task_path = store.run_id, str(path), manifest.task_path
    m.mode = state.mode or manifest.mode
    configured = manifest.rounds_limit or len(records)
    m.gpu_name = manifest.gpu.shown if manifest.gpu is not None else ""
    m.load_records(records)
    m.load_state(state.status or "?", state.best_round, state.best_speedup, state.rounds_done, configured)
    m.dollars = sum(r.cost_usd or 0.0 for r in records)
    m.cost_known = all(r.cost_usd is not None for r in records)
    m.tokens = sum(r.tokens for r in records)
    return Opened(log=f"opened {path} read-only: {len(records)} round(s), status {state.status or '?'}"
                  + (f" ({state.stop_message})" if state.stop_message else ""),
                  folder_log=tuple(run_folder_log(path, records, state)),
                  banner=f"Browsing {store.run_id} read-only. Select a round in the tree; every pane shows it.")


def run_gpu_name(run_dir: str) -> str:
    """The device named in a run folder's manifest; "" when it names none or cannot be read."""
    with contextlib.suppress(OSError, ValueError, CudaforgeError):
        gpu = RunStore(Path(run_dir), read_only=True).manifest.gpu
        return gpu.shown if gpu is not None else ""
    return ""
