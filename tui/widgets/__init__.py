"""One widget per pane of the workbench."""
