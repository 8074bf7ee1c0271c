"""Starting and stopping a training job's processes on its hosts (the inventory back end's restart)."""
